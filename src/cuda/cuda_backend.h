// The CUDA backend as the dispatcher sees it: device queries and the kernel entry points.
// Compiled only when the build has CUDA (FLASHATTN_WITH_CUDA).
#pragma once

#include <cstddef>
#include <string>

#include "core/problem.h"

namespace flashattn::cuda {

int device_count();                    // 0 when there is no driver or no device
bool is_device_pointer(const void* p); // device or managed memory
std::string device_description(int device);  // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)"

void fwd(const AttnProblem& p);
void bwd(const AttnProblem& p);
void merge(const MergeProblem& p);
size_t fwd_workspace_size(const AttnProblem& p);
size_t bwd_workspace_size(const AttnProblem& p);

}  // namespace flashattn::cuda
