// Tile sizes of the CUDA kernels, one constexpr table per kernel family with a reason per entry.
#pragma once

namespace flashattn::cuda {

// sm80 forward: kWarps warps of 16 query rows each (kBlockM = 16 * kWarps) sweep kBlockN keys per
// step. Registers hold S (kBlockN / 2 floats per thread) and O (kHeadDim / 2): their sum stays
// under ~160 so that the fragments, addresses and softmax state fit in 255 without spilling.
template <int kHeadDim>
struct FwdTileSm80;
// d 32/64: 128 x 128 tiles, 8 warps: S 64 + O 16..32 floats; large tiles amortise each K/V load.
template <> struct FwdTileSm80<32> { static constexpr int kWarps = 8, kBlockN = 128; };
template <> struct FwdTileSm80<64> { static constexpr int kWarps = 8, kBlockN = 128; };
// d 96/128: 128 x 64, 8 warps: S 32 + O 48..64; smem (128 + 2 * 64) rows * 272 B = 68 KB.
template <> struct FwdTileSm80<96> { static constexpr int kWarps = 8, kBlockN = 64; };
template <> struct FwdTileSm80<128> { static constexpr int kWarps = 8, kBlockN = 64; };
// d 160..256: O alone is 80..128 floats: 64 x 64 tiles, 4 warps, smem up to 101 KB.
template <> struct FwdTileSm80<160> { static constexpr int kWarps = 4, kBlockN = 64; };
template <> struct FwdTileSm80<192> { static constexpr int kWarps = 4, kBlockN = 64; };
template <> struct FwdTileSm80<224> { static constexpr int kWarps = 4, kBlockN = 64; };
template <> struct FwdTileSm80<256> { static constexpr int kWarps = 4, kBlockN = 64; };

}  // namespace flashattn::cuda
