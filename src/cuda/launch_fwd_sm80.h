// Launcher of the sm80 forward kernel for one (head dim, dtype); the generated instantiation files
// include this header and instantiate run_fwd_sm80 once each.
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "cuda/kernel_fwd_sm80.h"
#include "cuda/launch_common.h"

namespace flashattn::cuda {

template <class K, bool kScoreMods>
void launch(const FwdParams& p, cudaStream_t stream) {
  const dim3 grid((p.seqlen_q + K::kBlockM - 1) / K::kBlockM * p.num_splits, p.heads_q, p.batch);
  launch_tiled_kernel(fwd_kernel_sm80<K, kScoreMods>, grid, K::kThreads, K::kSmemBytes, p, stream,
                      "forward kernel");
}

template <int kHeadDim, class Element>
void run_fwd_sm80(const FwdParams& p, cudaStream_t stream) {
  using K = FwdSm80<kHeadDim, Element>;
  const bool score_mods = p.softcap > 0.f || p.alibi_slopes != nullptr || p.dropout_threshold != 0;
  if constexpr (kHeadDim <= kFwdFewRowsMaxHeadDim) {
    if (p.few_rows) {  // the host's plan leaves score modifiers on the table's tiles
      if (score_mods) fail(FLASHATTN_INTERNAL_ERROR, "few-rows forward tile planned with score modifiers");
      return launch<FwdSm80<kHeadDim, Element, true>, false>(p, stream);
    }
  }
  if (score_mods) {
    launch<K, true>(p, stream);
  } else {
    launch<K, false>(p, stream);
  }
}

}  // namespace flashattn::cuda
