// Fork-join parallelism for the tiled CPU kernels: a parallel-for over work items on plain
// std::threads (no OpenMP), and the (batch, head, tile) grid those items enumerate.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace flashattn::cpu {

// Hands out item indices 0, 1, ... in order to whichever thread asks next. Dynamic scheduling
// balances causal tiles of unequal cost; results do not depend on which thread ran an item.
class WorkQueue {
 public:
  explicit WorkQueue(int64_t count) : count_(count) {}
  bool next(int64_t* item) {
    *item = next_.fetch_add(1, std::memory_order_relaxed);
    return *item < count_;
  }
  void cancel() { next_.store(count_, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> next_{0};
  const int64_t count_;
};

// exec.num_threads, with 0 meaning every hardware thread.
inline int resolve_num_threads(int requested) {
  if (requested > 0) return requested;
  return std::max(1u, std::thread::hardware_concurrency());
}

// Runs worker(queue) on min(num_threads, count) threads, the calling thread included, until the
// queue is drained. A worker allocates its scratch once, then loops on queue.next(). The first
// exception a worker throws cancels the rest and is rethrown here after every thread joined. If
// the system refuses a thread, the threads already started (and this one) do the work.
template <class Worker>
void parallel_run(int64_t count, int num_threads, Worker&& worker) {
  if (count <= 0) return;
  const int64_t threads = std::min<int64_t>(resolve_num_threads(num_threads), count);
  WorkQueue queue(count);
  std::exception_ptr error;
  std::mutex error_mutex;
  auto guarded = [&] {
    try {
      worker(queue);
    } catch (...) {
      queue.cancel();
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  try {
    pool.reserve(size_t(threads - 1));
    for (int64_t t = 1; t < threads; ++t) pool.emplace_back(guarded);
  } catch (const std::system_error&) {
  } catch (const std::bad_alloc&) {
  }
  guarded();
  for (std::thread& thread : pool) thread.join();
  if (error) std::rethrow_exception(error);
}

// The items of a grid with `heads` heads per batch entry and a per-entry tile count, numbered
// batch-major, then head, then tile from the last (heaviest under a causal mask) to the first,
// so that dynamic scheduling ends on the cheapest items.
class TileGrid {
 public:
  template <class TilesOf>
  TileGrid(int64_t batch, int64_t heads, TilesOf&& tiles_of) : heads_(heads) {
    starts_.reserve(size_t(batch) + 1);
    starts_.push_back(0);
    for (int64_t b = 0; b < batch; ++b) starts_.push_back(starts_.back() + heads * tiles_of(b));
  }
  int64_t size() const { return starts_.back(); }

  struct Item {
    int64_t batch, head, tile;
  };
  Item item(int64_t index) const {
    const int64_t b =
        int64_t(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin()) - 1;
    const int64_t local = index - starts_[size_t(b)];
    const int64_t tiles = (starts_[size_t(b) + 1] - starts_[size_t(b)]) / heads_;
    return Item{b, local / tiles, tiles - 1 - local % tiles};
  }

 private:
  int64_t heads_;
  std::vector<int64_t> starts_;
};

}  // namespace flashattn::cpu
