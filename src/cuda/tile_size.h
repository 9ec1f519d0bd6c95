// Tile sizes of the CUDA kernels, one constexpr table per kernel family with a reason per entry.
#pragma once

namespace flashattn::cuda {

// sm80 forward: kWarps warps of kWarpMTiles x 16 query rows each (kBlockM = 16 * kWarps *
// kWarpMTiles) sweep kBlockN keys per step. Two m16 tiles per warp halve the shared-memory reads of
// K and V per FLOP (each ldmatrix feeds two MMAs) at the price of registers: S (kWarpMTiles *
// kBlockN / 2 floats per thread) plus O (kWarpMTiles * kHeadDim / 2). Measured on H100,
// docs/performance.md (sm80 forward, tiles).
template <int kHeadDim>
struct FwdTileSm80;
// d <= 128: 4 warps x 2 m-tiles, 128 x 64 tiles, 255 registers: two CTAs per SM hide each other's
// loads (best of 4 tables measured: 167-201 TFLOP/s at 16k against 130-185 for the others).
template <> struct FwdTileSm80<32> { static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 64; };
template <> struct FwdTileSm80<64> { static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 64; };
template <> struct FwdTileSm80<96> { static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 64; };
template <> struct FwdTileSm80<128> { static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 64; };
// d > 128: O alone is 80..128 floats per m-tile, so one m-tile per warp and 8 warps for a 128-row
// tile (191 TFLOP/s at d 256, 16k, against 167 with 4 warps x 1 and 145 with 64-key tiles).
template <> struct FwdTileSm80<160> { static constexpr int kWarps = 8, kWarpMTiles = 1, kBlockN = 64; };
template <> struct FwdTileSm80<192> { static constexpr int kWarps = 8, kWarpMTiles = 1, kBlockN = 64; };
template <> struct FwdTileSm80<224> { static constexpr int kWarps = 8, kWarpMTiles = 1, kBlockN = 64; };
template <> struct FwdTileSm80<256> { static constexpr int kWarps = 8, kWarpMTiles = 1, kBlockN = 64; };

}  // namespace flashattn::cuda
