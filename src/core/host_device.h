// Portability macro for code shared by the CPU backends and the CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define FA_HD __host__ __device__ __forceinline__
#else
#define FA_HD inline
#endif
