// Device copies of an AttnData's buffers for running the CUDA backend on a host-built case.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "attn_case.h"

namespace flashattn::testing {

class DeviceMirror {
 public:
  explicit DeviceMirror(AttnData& data);  // allocates and uploads every present buffer
  explicit DeviceMirror(const std::vector<Buffer*>& buffers);
  ~DeviceMirror();
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;

  // Rewrites every tensor pointer of params from host to device memory.
  void translate(flashattn_fwd_params* params) const;
  void translate(flashattn_bwd_params* params) const;
  void translate(flashattn_merge_params* params) const;
  void download();  // copies every buffer back to the host
  void translate(flashattn_tensor* t) const;

 private:
  struct Entry {
    Buffer* host;
    unsigned char* device;
  };
  std::vector<Entry> entries_;
};

std::vector<Buffer*> all_buffers(AttnData& data);

// Device memory of `bytes` (none for 0), freed with the object: a call's workspace.
class DeviceAllocation {
 public:
  explicit DeviceAllocation(size_t bytes);
  ~DeviceAllocation();
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

// The device's copy bandwidth in TB/s (bytes read + written per second) of a device-to-device
// copy of `bytes`, median of `repeat` copies: the ceiling a memory-bound kernel is judged against.
double device_copy_tbps(size_t bytes, int repeat);

// Median time in ms of `call` (which enqueues device work on the legacy default stream), measured
// with CUDA events around each call after `warmup` untimed calls.
double median_device_ms(const std::function<void()>& call, int warmup, int repeat);

}  // namespace flashattn::testing
