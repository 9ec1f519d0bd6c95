// Warp-level building blocks of the sm80 kernels: the layout of head-dim rows in shared memory,
// cp.async with zero fill and the m16n8k16 tensor-core MMA (CuTe's architecture atoms), ldmatrix
// (plain and transposed) on 32-bit shared-memory addresses, and register packing.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include <cute/arch/copy_sm80.hpp>
#include <cute/arch/mma_sm80.hpp>
#include <cutlass/numeric_types.h>

namespace flashattn::cuda {

// The 32-bit shared-memory address of an element of a tile.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Where element (row, col) of a tile of head-dim rows of 16-bit elements sits in shared memory.
// Swizzled (head dims 64, 128, 256): rows unpadded, the 16-byte chunk c of row r stored at chunk
// c ^ (r % 8) of its 128-byte block, so the 8 rows one ldmatrix phase reads hit distinct banks and
// each 128-byte block of a global row lands in one aligned 128-byte block of shared memory.
// Padded (the other head dims): each row takes 16 bytes more than its data, which also spreads
// the ldmatrix rows over the banks, but the cp.async writes of 7 rows in 8 straddle two blocks
// (the swizzle measured 1.02-1.10x over padding, docs/performance.md).
template <int kHeadDim>
struct SmemRows {
  // Powers of two only: the column parts the kernels split the rows into are then powers of two
  // too, which step() relies on.
  static constexpr bool kSwizzled = kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256;
  static constexpr int kStride = kSwizzled ? kHeadDim : kHeadDim + 8;
  __device__ __forceinline__ static int offset(int row, int col) {
    if constexpr (kSwizzled) return row * kStride + (col ^ ((row & 7) << 3));
    return row * kStride + col;
  }
  // The shared-memory address of element (row, col) of the tile at `tile`.
  __device__ __forceinline__ static uint32_t address(const void* tile, int row, int col) {
    return smem_addr(tile) + uint32_t(offset(row, col)) * 2;
  }
  // The shared-memory address of (row + dr, col + dc) from that of (row, col), for dr a multiple
  // of 8 and dc of 16 known at compile time: one add, and with the swizzle one XOR. The swizzled
  // form holds where the tile starts on a 128-byte boundary and col + dc == col | dc below bit 6
  // (col a multiple of a power of two above dc, plus at most 8).
  __device__ __forceinline__ static uint32_t step(uint32_t addr, int dr, int dc) {
    if constexpr (kSwizzled) return (addr ^ uint32_t((dc & 48) * 2)) + uint32_t(dr * kStride + (dc & ~63)) * 2;
    return addr + uint32_t(dr * kStride + dc) * 2;
  }
};

// How the kThreads threads of a CTA (K's) cover kRows rows of a tile of T in 16-byte chunks,
// pass by pass: each thread keeps the chunk column col of row `row` and the rows kRowsPerPass
// apart below it (kApplies: the rows split so, K::kThreads a multiple of the chunks per row and
// kRows of the rows per pass; the callers' general path serves the other head dims). Row
// row + pass * kRowsPerPass has the swizzle of row row + (pass * kRowsPerPass) % 8, so the passes
// cycle through 8 / kRowsPerPass phases (one with a multiple of 8 rows per pass, or unswizzled
// rows), each a base pointer plus a constant per pass. (Row by row, the compiler recomputed every
// pass's swizzle: 11 instructions per 16-byte copy at d 256, 4 rows per pass of 128 threads,
// against 4 at d 128. Copies in column blocks from one pointer per pass, FlashAttention-2's shape,
// issued fewer instructions still but ran slower at d 256: 1-3% with 8 rows per pass (sm80
// forward v9); with 16, 0.975-0.994x in (b, s, h, d) and 0.976-1.013x in (b, h, s, d) storage
// (docs/performance.md, twenty-fourth session).)
template <class K, int kRows, class T>
struct RowPasses {
  using Rows = typename K::Rows;
  static constexpr int kRowsPerPass = K::kThreads / K::kChunksPerRow;
  static constexpr bool kApplies = K::kThreads % K::kChunksPerRow == 0 && kRows % kRowsPerPass == 0;
  static constexpr int kPasses = kRows / kRowsPerPass;
  static constexpr bool kOnePhase = !Rows::kSwizzled || kRowsPerPass % 8 == 0;
  static_assert(!kApplies || kOnePhase || 8 % kRowsPerPass == 0, "the swizzle repeats every 8 rows");
  static constexpr int kPhases = kOnePhase ? 1 : 8 / kRowsPerPass;
  int row = threadIdx.x / K::kChunksPerRow;     // this thread's row in the first pass
  int col = (threadIdx.x % K::kChunksPerRow) * 8;  // and its column
  T* base[kPhases];
  __device__ __forceinline__ explicit RowPasses(T* tile) {
#pragma unroll
    for (int ph = 0; ph < kPhases; ++ph) {
      base[ph] = tile + Rows::offset(row + ph * kRowsPerPass, col) - ph * kRowsPerPass * Rows::kStride;
    }
  }
  // This thread's chunk of the tile in pass `pass`.
  __device__ __forceinline__ T* operator()(int pass) const {
    return base[pass % kPhases] + pass * kRowsPerPass * Rows::kStride;
  }
  // The rows of the first `rows` that lie at or below this thread's first row, where its column
  // is one of the first `cols` (else 0): pass `pass` holds a row of them iff
  // pass * kRowsPerPass < rows_left(...), a compare with a constant per pass (written as
  // row + pass * kRowsPerPass < rows, it cost an add per pass too).
  __device__ __forceinline__ int rows_left(int rows, int cols) const { return col < cols ? rows - row : 0; }
};

// 16 bytes global -> shared; when !valid the destination is zero-filled and nothing is read.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  using Chunk = cute::uint128_t;
  cute::SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<Chunk>::copy(*static_cast<const Chunk*>(gmem),
                                                     *static_cast<Chunk*>(smem), valid);
}
// 8 bytes global -> shared (cached in L1: small per-row records read by several CTAs).
__device__ __forceinline__ void cp_async_8(void* smem, const void* gmem, bool valid) {
  cute::SM80_CP_ASYNC_CACHEALWAYS_ZFILL<uint64_t>::copy(*static_cast<const uint64_t*>(gmem),
                                                        *static_cast<uint64_t*>(smem), valid);
}
__device__ __forceinline__ void cp_async_commit() { cute::cp_async_fence(); }

// Programmatic dependent launch (sm_90): let the next kernel on the stream start once every CTA of
// this one has called this or exited; wait until the kernel this one depends on has finished and
// its writes are visible. Both do nothing where the launch had no such dependency, and are not
// compiled for archs below sm_90.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() { cute::cp_async_wait<N>(); }

// ldmatrix reads the 8x8 tiles whose rows' addresses the lanes give (x4: lanes 0-31, x2: 0-15).
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t addr, uint32_t (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

// d = a * b + d for one 16x8x16 tile; a: 4 regs (16x16 row-major), b: 2 regs (16x8 col-major).
template <class Element>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>) {
    cute::SM80_16x8x16_F32BF16BF16F32_TN::fma(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b0, b1,
                                              d[0], d[1], d[2], d[3]);
  } else {
    cute::SM80_16x8x16_F32F16F16F32_TN::fma(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b0, b1,
                                            d[0], d[1], d[2], d[3]);
  }
}

// dst[0..3] += v[0..3] in global memory by f32 atomics: one 16-byte reduction on sm90 and newer,
// four before (dst 16-byte aligned).
__device__ __forceinline__ void atomic_add_f32x4(float* dst, const float (&v)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(dst), make_float4(v[0], v[1], v[2], v[3]));
#else
  for (int e = 0; e < 4; ++e) atomicAdd(dst + e, v[e]);
#endif
}

// 2^x in one MUFU.EX2 (subnormal results flush to 0, harmless for softmax weights); exp2f without
// fast-math adds range-scaling instructions per element.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) in one MUFU.TANH (tanh.approx.f32: relative error within 2^-11 by the PTX ISA; 1.1e-5 at
// most over all floats as measured on Turing, N. Juffa on NVIDIA's developer forum, 2021): the
// kernels' softcap (softmax_sm80.h, softcap_tanh).
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two floats -> one register of two 16-bit elements (low half = first), in one
// cvt.rn.{bf16x2,f16x2}.f32 instruction.
template <class Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t packed;
  if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    packed = *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    packed = *reinterpret_cast<uint32_t*>(&v);
  }
  return packed;
}

}  // namespace flashattn::cuda
