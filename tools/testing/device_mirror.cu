// Device copies of an AttnData's buffers (see device_mirror.h). Compiled only with CUDA.
#include "device_mirror.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace flashattn::testing {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

std::vector<Buffer*> all_buffers(AttnData& d) {
  return {&d.q, &d.k, &d.v, &d.out, &d.lse, &d.cu_seqlens_q, &d.cu_seqlens_k, &d.seqused_k,
          &d.cache_seqlens, &d.block_table, &d.k_new, &d.v_new, &d.rotary_cos, &d.rotary_sin,
          &d.alibi_slopes, &d.dout, &d.dq, &d.dk, &d.dv};
}

DeviceAllocation::DeviceAllocation(size_t bytes) {
  if (bytes > 0) check(cudaMalloc(&data_, bytes), "cudaMalloc");
}

DeviceAllocation::~DeviceAllocation() { cudaFree(data_); }

DeviceMirror::DeviceMirror(AttnData& data) : DeviceMirror(all_buffers(data)) {}

DeviceMirror::DeviceMirror(const std::vector<Buffer*>& buffers) {
  for (Buffer* b : buffers) {
    if (!b->present()) continue;
    Entry e{b, nullptr};
    check(cudaMalloc(reinterpret_cast<void**>(&e.device), b->storage_bytes()), "cudaMalloc");
    entries_.push_back(e);
    check(cudaMemcpy(e.device, b->storage(), b->storage_bytes(), cudaMemcpyHostToDevice), "upload");
  }
  // A copy from pageable host memory may return before its DMA lands, and nothing orders it
  // before work on a non-blocking stream: without this, a test's kernel could read inputs not yet
  // there, or its outputs be overwritten afterwards by the upload of their NaN poison.
  check(cudaDeviceSynchronize(), "upload");
}

DeviceMirror::~DeviceMirror() {
  for (const Entry& e : entries_) cudaFree(e.device);
}

void DeviceMirror::translate(flashattn_tensor* t) const {
  if (t->data == nullptr) return;
  for (const Entry& e : entries_) {
    if (t->data == e.host->data()) {
      t->data = e.device + e.host->guard_bytes();
      return;
    }
  }
  throw std::logic_error("DeviceMirror: a tensor of the params is not one of the case's buffers");
}

void DeviceMirror::translate(flashattn_fwd_params* p) const {
  for (flashattn_tensor* t : {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->cu_seqlens_q, &p->cu_seqlens_k,
                              &p->seqused_k, &p->cache_seqlens, &p->block_table, &p->k_new, &p->v_new,
                              &p->rotary_cos, &p->rotary_sin, &p->opts.alibi_slopes}) {
    translate(t);
  }
}

void DeviceMirror::translate(flashattn_bwd_params* p) const {
  for (flashattn_tensor* t : {&p->q, &p->k, &p->v, &p->out, &p->dout, &p->lse, &p->dq, &p->dk, &p->dv,
                              &p->cu_seqlens_q, &p->cu_seqlens_k, &p->seqused_k, &p->opts.alibi_slopes}) {
    translate(t);
  }
}

void DeviceMirror::translate(flashattn_merge_params* p) const {
  for (flashattn_tensor* t : {&p->out_partial, &p->lse_partial, &p->out, &p->lse}) translate(t);
}

void DeviceMirror::download() {
  check(cudaDeviceSynchronize(), "kernel execution");
  for (const Entry& e : entries_) {
    check(cudaMemcpy(e.host->storage(), e.device, e.host->storage_bytes(), cudaMemcpyDeviceToHost),
          "download");
  }
}

double device_copy_tbps(size_t bytes, int repeat) {
  DeviceAllocation source(bytes), destination(bytes);
  check(cudaMemset(source.get(), 1, bytes), "cudaMemset");
  const double ms = median_device_ms(
      [&] { check(cudaMemcpyAsync(destination.get(), source.get(), bytes, cudaMemcpyDeviceToDevice), "copy"); },
      2, repeat);
  return 2.0 * double(bytes) / (ms * 1e-3) * 1e-12;
}

double median_device_ms(const std::function<void()>& call, int warmup, int repeat) {
  for (int i = 0; i < warmup; ++i) call();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> samples;
  for (int i = 0; i < repeat; ++i) {
    check(cudaEventRecord(start), "cudaEventRecord");
    call();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "kernel execution");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    samples.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(samples.begin(), samples.end());
  const size_t mid = samples.size() / 2;
  return samples.size() % 2 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
}

}  // namespace flashattn::testing
