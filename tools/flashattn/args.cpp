// Flag parsing for the flashattn program (see args.h).
#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <sstream>

namespace flashattn::cli {
namespace {

constexpr int kHelpColumn = 22;  // where the help text of a flag starts in --help
constexpr int64_t kMaxThreads = 4096;
constexpr int64_t kMaxRepeat = 100000;

std::string flag_text(const std::string& name) { return "--" + name; }

const FlagSpec* find_flag(const CommandSpec& command, const std::string& name) {
  for (const FlagSpec& flag : command.flags) {
    if (name == flag.name) return &flag;
  }
  return nullptr;
}

int64_t to_int(const std::string& name, const std::string& text, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') {
    throw UsageError(flag_text(name) + ": expected an integer, got '" + text + "'");
  }
  if (errno == ERANGE || value < lo || value > hi) {
    throw UsageError(flag_text(name) + ": expected a value in " + std::to_string(lo) + ".." +
                     std::to_string(hi) + ", got " + text);
  }
  return value;
}

}  // namespace

void print_usage(const CommandSpec& command) {
  std::printf("usage: flashattn %s [flags]\n\n%s\n\nflags:\n", command.name, command.summary);
  for (const FlagSpec& flag : command.flags) {
    std::string left = flag_text(flag.name) + (flag.value ? std::string(" ") + flag.value : "");
    std::printf("  %-*s %s\n", kHelpColumn, left.c_str(), flag.help);
  }
  std::printf("  %-*s %s\n", kHelpColumn, "--help", "print this help");
}

Flags::Flags(const CommandSpec& command, int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--help" || word == "-h") {
      help_ = true;
      continue;
    }
    if (word.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + word + "'");
    const size_t equals = word.find('=');
    const std::string name = word.substr(2, equals == std::string::npos ? equals : equals - 2);
    const FlagSpec* spec = find_flag(command, name);
    if (spec == nullptr) {
      throw UsageError("unknown flag " + flag_text(name) + " for '" + command.name + "'");
    }
    if (has(name)) throw UsageError(flag_text(name) + " given twice");
    std::string value;
    if (spec->value == nullptr) {
      if (equals != std::string::npos) throw UsageError(flag_text(name) + " takes no value");
    } else if (equals != std::string::npos) {
      value = word.substr(equals + 1);
    } else if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
      value = argv[++i];
    } else {
      throw UsageError(flag_text(name) + ": missing value " + spec->value);
    }
    values_[name] = value;
  }
}

int64_t Flags::get_int(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : to_int(name, it->second, lo, hi);
}

double Flags::get_real(const std::string& name, double fallback, double lo, double hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& text = it->second;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value)) {
    throw UsageError(flag_text(name) + ": expected a number, got '" + text + "'");
  }
  if (value < lo || value > hi) {
    std::ostringstream os;
    os << flag_text(name) << ": expected a value in [" << lo << ", " << hi << "], got " << text;
    throw UsageError(os.str());
  }
  return value;
}

std::vector<int64_t> Flags::get_int_list(const std::string& name, std::vector<int64_t> fallback,
                                         int64_t lo, int64_t hi, size_t count) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  std::vector<int64_t> values;
  std::stringstream items(it->second);
  std::string item;
  while (std::getline(items, item, ',')) values.push_back(to_int(name, item, lo, hi));
  if (values.empty() || (count > 0 && values.size() != count) || it->second.back() == ',') {
    throw UsageError(flag_text(name) + ": expected " +
                     (count > 0 ? std::to_string(count) : std::string("a list of")) +
                     " comma-separated integers, got '" + it->second + "'");
  }
  return values;
}

std::string Flags::get_string(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

flashattn_dtype parse_dtype(const std::string& flag, const std::string& text) {
  for (flashattn_dtype dtype : {FLASHATTN_F32, FLASHATTN_F16, FLASHATTN_BF16}) {
    if (text == flashattn_dtype_string(dtype)) return dtype;
  }
  throw UsageError(flag_text(flag) + ": expected f32, f16 or bf16, got '" + text + "'");
}

flashattn_backend parse_backend(const std::string& flag, const std::string& text) {
  constexpr flashattn_backend kBackends[] = {FLASHATTN_BACKEND_AUTO, FLASHATTN_BACKEND_CPU,
                                             FLASHATTN_BACKEND_CPU_REFERENCE, FLASHATTN_BACKEND_CPU_REFERENCE_LOWP,
                                             FLASHATTN_BACKEND_CUDA, FLASHATTN_BACKEND_CUDA_SM80};
  std::string names;  // "auto, cpu, ... or cuda-sm80"
  for (size_t k = 0; k < std::size(kBackends); ++k) {
    if (text == backend_name(kBackends[k])) return kBackends[k];
    names += k == 0 ? "" : k + 1 == std::size(kBackends) ? " or " : ", ";
    names += backend_name(kBackends[k]);
  }
  throw UsageError(flag_text(flag) + ": expected " + names + ", got '" + text + "'");
}

const char* backend_name(flashattn_backend backend) {
  switch (backend) {
    case FLASHATTN_BACKEND_AUTO: return "auto";
    case FLASHATTN_BACKEND_CPU: return "cpu";
    case FLASHATTN_BACKEND_CPU_REFERENCE: return "reference";
    case FLASHATTN_BACKEND_CUDA: return "cuda";
    case FLASHATTN_BACKEND_CPU_REFERENCE_LOWP: return "reference-lowp";
    case FLASHATTN_BACKEND_CUDA_SM80: return "cuda-sm80";
  }
  return "unknown";
}

ExecOptions parse_exec(const Flags& flags, const RepeatCounts& cpu, const RepeatCounts& gpu) {
  ExecOptions exec;
  exec.backend = parse_backend("backend", flags.get_string("backend", "auto"));
  const RepeatCounts& counts = is_cpu_backend(resolve_backend(exec.backend)) ? cpu : gpu;
  exec.threads = int(flags.get_int("threads", 0, 0, kMaxThreads));
  exec.warmup = int(flags.get_int("warmup", counts.warmup, 0, kMaxRepeat));
  exec.repeat = int(flags.get_int("repeat", counts.repeat, 1, kMaxRepeat));
  return exec;
}

}  // namespace flashattn::cli
