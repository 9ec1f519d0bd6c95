// Command-line flags of the flashattn program: a per-command table of flags (the one source of
// both parsing and --help), typed getters with range checks, and the names of dtypes and backends.
// Every malformed input throws UsageError, which main() turns into exit status 2 and a hint.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "measure.h"

namespace flashattn::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct FlagSpec {
  const char* name;   // without the leading "--"
  const char* value;  // placeholder of the value in --help ("N"); nullptr for a switch
  const char* help;
};

struct CommandSpec {
  const char* name;
  const char* summary;
  std::vector<FlagSpec> flags;
};

void print_usage(const CommandSpec& command);

// The flags of one command line, after "flashattn <command>". Accepts "--name value" and
// "--name=value"; rejects unknown flags, repeated flags, missing values and positional words.
class Flags {
 public:
  Flags(const CommandSpec& command, int argc, char** argv);

  bool help() const { return help_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  // Integers and reals must lie in [lo, hi]; an absent flag gives `fallback` unchecked.
  int64_t get_int(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  double get_real(const std::string& name, double fallback, double lo, double hi) const;
  // A comma-separated list ("512,1024"), each element in [lo, hi]; count 0 means any length.
  std::vector<int64_t> get_int_list(const std::string& name, std::vector<int64_t> fallback,
                                    int64_t lo, int64_t hi, size_t count = 0) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;

 private:
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

// "f32", "f16", "bf16" (the dtypes attention takes).
flashattn_dtype parse_dtype(const std::string& flag, const std::string& text);
// A backend by its name (backend_name's: "auto", "cpu", "reference", ...).
flashattn_backend parse_backend(const std::string& flag, const std::string& text);
const char* backend_name(flashattn_backend backend);

// The --backend and --threads flags that parse_exec reads, the same in every command that has them.
inline constexpr FlagSpec kBackendFlag{"backend", "B",
                                       "auto, cpu, reference, reference-lowp, cuda or cuda-sm80 (default auto)"};
inline constexpr FlagSpec kThreadsFlag{"threads", "N", "CPU threads, 0 = all (default 0)"};

// --backend, --threads, --warmup and --repeat; the repeat counts default by the backend kind.
struct RepeatCounts {
  int64_t warmup, repeat;
};
ExecOptions parse_exec(const Flags& flags, const RepeatCounts& cpu, const RepeatCounts& gpu);

}  // namespace flashattn::cli
