// The one run-time dispatch point: picks the backend of a validated problem and runs it.
#pragma once

#include <cstddef>

#include "core/problem.h"

namespace flashattn {

void dispatch_fwd(const AttnProblem& p);
void dispatch_bwd(const AttnProblem& p);
void dispatch_merge(const MergeProblem& p);
size_t fwd_workspace_size(const AttnProblem& p);
size_t bwd_workspace_size(const AttnProblem& p);

}  // namespace flashattn
