// The CUDA backend as the dispatcher sees it: device queries and the kernel entry points.
// Compiled only when the build has CUDA (FLASHATTN_WITH_CUDA).
#pragma once

#include <cstddef>

#include "core/problem.h"

namespace flashattn::cuda {

int device_count();                       // 0 when there is no driver or no device
bool is_device_pointer(const void* p);    // device or managed memory: the kernels can read it
bool is_device_only_pointer(const void* p);  // device memory the host cannot read

void fwd(const AttnProblem& p);
void bwd(const AttnProblem& p);
void merge(const MergeProblem& p);
size_t fwd_workspace_size(const AttnProblem& p);
size_t bwd_workspace_size(const AttnProblem& p);

}  // namespace flashattn::cuda
