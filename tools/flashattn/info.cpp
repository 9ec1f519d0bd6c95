// `flashattn info`: what this build of the library can do, from flashattn_get_capabilities, and
// which backend `flashattn run --backend auto` picks here (the best device present).
#include <cstdio>
#include <string>

#include "args.h"
#include "commands.h"
#include "measure.h"

namespace flashattn::cli {
namespace {

const CommandSpec kInfo{
    "info", "Prints the version, the build configuration and the devices visible.", {}};

constexpr flashattn_backend kAllBackends[] = {
    FLASHATTN_BACKEND_CPU, FLASHATTN_BACKEND_CPU_REFERENCE, FLASHATTN_BACKEND_CPU_REFERENCE_LOWP,
    FLASHATTN_BACKEND_CUDA, FLASHATTN_BACKEND_CUDA_SM80};
constexpr flashattn_dtype kKernelDtypes[] = {FLASHATTN_F32, FLASHATTN_F16, FLASHATTN_BF16,
                                              FLASHATTN_E4M3};

// A comma-separated list, or `empty` when it has no item.
std::string or_none(const std::string& list, const char* empty) {
  return list.empty() ? empty : list;
}

void append(std::string& list, const std::string& item) {
  list += (list.empty() ? "" : ", ") + item;
}

}  // namespace

int info_command(int argc, char** argv) {
  Flags flags(kInfo, argc, argv);
  if (flags.help()) {
    print_usage(kInfo);
    return 0;
  }
  flashattn_capabilities caps{};
  caps.struct_size = sizeof caps;
  check_status(flashattn_get_capabilities(&caps), "flashattn_get_capabilities");

  std::string backends, archs, dims, dtypes;
  for (flashattn_backend backend : kAllBackends) {
    if (caps.backends & (1u << backend)) append(backends, backend_name(backend));
  }
  for (int i = 0; i < caps.num_cuda_archs; ++i) {
    append(archs, "sm_" + std::to_string(caps.cuda_archs[i]));
  }
  for (int i = 0; i < caps.num_head_dims; ++i) append(dims, std::to_string(caps.head_dims[i]));
  for (flashattn_dtype dtype : kKernelDtypes) {
    if (caps.cuda_dtypes & (1u << dtype)) append(dtypes, flashattn_dtype_string(dtype));
  }
  const bool cuda = caps.backends & (1u << FLASHATTN_BACKEND_CUDA);
  const char* no_cuda = cuda ? "none yet" : "none (built without CUDA)";

  std::printf("flashattn %d.%d.%d\n", caps.version_major, caps.version_minor, caps.version_patch);
  std::printf("  %-24s %s\n", "backends built in", or_none(backends, "none").c_str());
  std::printf("  %-24s %s\n", "CUDA archs", or_none(archs, no_cuda).c_str());
  std::printf("  %-24s %s\n", "CUDA kernel head dims", or_none(dims, no_cuda).c_str());
  std::printf("  %-24s %s\n", "CUDA kernel dtypes", or_none(dtypes, no_cuda).c_str());
  std::printf("  %-24s %s\n", "CUDA backward", caps.cuda_backward ? "yes" : "no");
  std::printf("  %-24s %s\n", "CUDA Hopper forward", caps.cuda_hopper_forward ? "yes (sm90a)" : "no");
  std::printf("  %-24s %d\n", "CUDA devices visible", caps.cuda_device_count);
  std::printf("  %-24s %d\n", "CPU threads available", hardware_threads());
  std::printf("  %-24s %s\n", "flashattn run picks",
              backend_name(resolve_backend(FLASHATTN_BACKEND_AUTO)));
  return 0;
}

}  // namespace flashattn::cli
