// The commands of the flashattn program. Each takes the words after its name and returns the
// exit status; bad flags throw UsageError (status 2), failed library calls std::runtime_error
// (status 1), both handled in main().
#pragma once

namespace flashattn::cli {

constexpr int kExitFail = 1;   // a library error or a failed --check
constexpr int kExitUsage = 2;  // the command line is wrong

int info_command(int argc, char** argv);
int run_command(int argc, char** argv);
int bench_command(int argc, char** argv);
int bench_decode_command(int argc, char** argv);

}  // namespace flashattn::cli
