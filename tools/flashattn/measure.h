// Timing and FLOP counts of attention calls, shared by `flashattn run` and `flashattn bench`:
// warm-up calls, then the median of timed repeats around one synchronous call each.
#pragma once

#include <stdexcept>
#include <string>

#include "attn_case.h"
#include "flashattn/flashattn.h"

namespace flashattn::cli {

struct ExecOptions {
  flashattn_backend backend = FLASHATTN_BACKEND_AUTO;
  int threads = 0;  // CPU backends: 0 = every hardware thread
  int warmup = 1;
  int repeat = 5;
};

struct Timing {
  double ms = 0;     // median over the repeats
  double flops = 0;  // per call
  double tflops() const { return ms > 0 ? flops / (ms * 1e-3) * 1e-12 : 0; }
};

// The backend a request runs on: AUTO is the best device present (CUDA when this program was
// built with it and a GPU is visible, else the tiled CPU backend). Data for CUDA is mirrored to
// device memory.
flashattn_backend resolve_backend(flashattn_backend requested);
bool is_cpu_backend(flashattn_backend backend);
int hardware_threads();
// "2 threads" for a --threads value (0 = every hardware thread).
std::string threads_text(int requested);

// FLOPs of the two matrix products per kept (query, key) pair and query head: 2*d for q.k and
// 2*d_v for p.v (4*d when d_v == d, the standard grid's convention); the backward counts 2.5x the forward.
double fwd_flops(const testing::AttnData& data);
double bwd_flops(const testing::AttnData& data);

// Times the forward on a private copy of `data` (its outputs are overwritten each call).
Timing time_fwd(const testing::AttnData& data, const ExecOptions& exec);
// Runs the forward once for out and lse, then times the backward (deterministic: its
// bitwise-reproducible form). `data` must be dense or varlen.
Timing time_bwd(const testing::AttnData& data, const ExecOptions& exec, bool deterministic = false);

// A failed library call: its status and "<call>: STATUS: <flashattn_last_error()>".
struct CallError : std::runtime_error {
  CallError(flashattn_status s, const std::string& message) : std::runtime_error(message), status(s) {}
  flashattn_status status;
};

// Throws CallError unless SUCCESS.
void check_status(flashattn_status status, const char* call);

}  // namespace flashattn::cli
