// CUDA runtime side of the backend: device discovery and pointer classification.
#include <cuda_runtime_api.h>

#include "cuda/cuda_backend.h"

namespace flashattn::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for a CPU-only run
    return 0;
  }
  return count;
}

namespace {
cudaMemoryType memory_type(const void* p) {
  if (p == nullptr || device_count() == 0) return cudaMemoryTypeUnregistered;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();
    return cudaMemoryTypeUnregistered;
  }
  return attributes.type;
}
}  // namespace

bool is_device_pointer(const void* p) {
  cudaMemoryType type = memory_type(p);
  return type == cudaMemoryTypeDevice || type == cudaMemoryTypeManaged;
}

bool is_device_only_pointer(const void* p) { return memory_type(p) == cudaMemoryTypeDevice; }

}  // namespace flashattn::cuda
