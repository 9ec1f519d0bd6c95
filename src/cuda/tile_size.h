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
// 4 warps x 2 m-tiles (128-row tiles) up to d 128: 255 registers, two CTAs per SM. 128-key tiles
// at d <= 64 (227 TFLOP/s at d 64, 16k, against 219 with 64 keys), 64 at d 96/128 (297 against
// 258 with 32 keys and 211 with 8 warps x 1 m-tile).
template <> struct FwdTileSm80<32> { static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 128; };
template <> struct FwdTileSm80<64> { static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 128; };
template <> struct FwdTileSm80<96> { static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 64; };
template <> struct FwdTileSm80<128> { static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 64; };
// d > 128: O alone is 80..128 floats per m-tile, so one m-tile per warp: 4 warps, 64 x 64 tiles
// (260 TFLOP/s at d 256, 16k, against 250 with 8 warps and 214 with 32-key tiles).
template <> struct FwdTileSm80<160> { static constexpr int kWarps = 4, kWarpMTiles = 1, kBlockN = 64; };
template <> struct FwdTileSm80<192> { static constexpr int kWarps = 4, kWarpMTiles = 1, kBlockN = 64; };
template <> struct FwdTileSm80<224> { static constexpr int kWarps = 4, kWarpMTiles = 1, kBlockN = 64; };
template <> struct FwdTileSm80<256> { static constexpr int kWarps = 4, kWarpMTiles = 1, kBlockN = 64; };

}  // namespace flashattn::cuda
