// flashattn: the command-line program of the library. Dispatches to run / bench / bench-decode /
// info and turns errors into exit statuses: 2 for a wrong command line (with a hint), 1 for a library error.
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>

#include "args.h"
#include "commands.h"
#include "flashattn/flashattn.h"

namespace {

using flashattn::cli::kExitFail;
using flashattn::cli::kExitUsage;

struct Command {
  const char* name;
  const char* summary;
  int (*entry)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"run", "run one attention problem: time it, and check it against the reference (--check)",
     flashattn::cli::run_command},
    {"bench", "time a grid of problems (the standard grid: 16k tokens, heads * d = 2048) and print a table",
     flashattn::cli::bench_command},
    {"bench-decode", "time decoding steps (one query, GQA, paged cache): time and memory bandwidth",
     flashattn::cli::bench_decode_command},
    {"info", "print the version, the build configuration and the devices visible",
     flashattn::cli::info_command},
};

void print_usage() {
  std::printf("usage: flashattn <command> [flags]\n\ncommands:\n");
  for (const Command& command : kCommands) {
    std::printf("  %-12s %s\n", command.name, command.summary);
  }
  std::printf("\n'flashattn <command> --help' lists the flags of a command. "
              "'flashattn --version' prints the version.\n");
}

int usage_error(const std::string& where, const std::string& message, const std::string& help) {
  std::fprintf(stderr, "%s: %s\nhint: run '%s' for usage\n", where.c_str(), message.c_str(),
               help.c_str());
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    return usage_error("flashattn", "missing command (run, bench, bench-decode or info)", "flashattn --help");
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage();
    return 0;
  }
  if (name == "--version") {
    std::printf("flashattn %s\n", flashattn_version_string());
    return 0;
  }
  for (const Command& command : kCommands) {
    if (name != command.name) continue;
    const std::string where = "flashattn " + name;
    try {
      return command.entry(argc - 2, argv + 2);
    } catch (const flashattn::cli::UsageError& e) {
      return usage_error(where, e.what(), where + " --help");
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "%s: out of host memory (try a smaller problem)\n", where.c_str());
      return kExitFail;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", where.c_str(), e.what());
      return kExitFail;
    }
  }
  return usage_error("flashattn", "unknown command '" + name + "' (expected run, bench, bench-decode or info)",
                     "flashattn --help");
}
