// The sm90a forward's persistent schedule: the work item each position of the schedule takes
// (kernel_fwd_sm90.h) and the launcher's choice of the schedule's tail (launch_fwd_sm90.h). Plain
// C++, shared with the unit tests (tests/test_internal.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/host_device.h"

namespace flashattn::cuda {

// The positions from `start` on take the items of the last `heads` (sequence, head)s longest first
// across those heads. heads 0 (start = the item count): off.
struct FwdTail {
  int start, heads;
};

// Under a right edge without a left one (causal), where a head's last query tile is its longest
// item: the last wave's worth of items (whole heads) for `workers` CTAs or clusters. In the work
// items' own order (fwd_tile: a head's query tiles from the last, head after head) the last heads'
// longest items would start among the last of the call and run on after the other CTAs had
// finished: a model of the standard grid puts causal calls at 1.03-1.13x the ideal span, and this
// tail recovers most of it (scripts/model_fwd_schedule.py, docs/performance.md, sm90a v68). Within
// the tail about as many heads run at once as before it (about twice as many where it starts), and
// each tail head's K and V stay in use for the whole tail. Without a mask every item is as long;
// under a left edge the first query tiles are the longest, and with both edges the lengths do not
// follow the tile (the backward's heads_first_grid takes the same rule). One head is the items'
// own order: off.
inline FwdTail fwd_tail(int64_t heads, int items_per_head, int64_t workers, bool right_edge_only) {
  const int64_t tail_heads =
      right_edge_only ? std::min(heads, (workers + items_per_head - 1) / items_per_head) : 0;
  const int kept = tail_heads > 1 ? int(tail_heads) : 0;
  return {int((heads - kept) * items_per_head), kept};
}

// The work item at position t of the schedule: below tail.start the item t; from there every tail
// head's last query tile, then every tail head's second last, and so on.
FA_HD int schedule_item(int t, FwdTail tail, int items_per_head) {
  if (t < tail.start) return t;
  const int at = t - tail.start, rank = at / tail.heads, head = at - rank * tail.heads;
  return tail.start + head * items_per_head + rank;
}

}  // namespace flashattn::cuda
