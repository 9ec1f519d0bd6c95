// Internal error reporting: code below the C API throws Failure; the API boundary catches it,
// stores the message in the thread-local slot and returns the status. Nothing crosses the ABI.
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "flashattn/flashattn.h"

namespace flashattn {

struct Failure {
  flashattn_status status;
  std::string message;
};

// Concatenates its arguments with operator<< ("k: heads_kv=", 5, " ...").
template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <class... Args>
[[noreturn]] void fail(flashattn_status status, Args&&... args) {
  throw Failure{status, cat(std::forward<Args>(args)...)};
}

#define FA_CHECK_ARG(cond, ...) \
  do {                          \
    if (!(cond)) ::flashattn::fail(FLASHATTN_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

#define FA_CHECK_SUPPORTED(cond, ...) \
  do {                                \
    if (!(cond)) ::flashattn::fail(FLASHATTN_NOT_SUPPORTED, __VA_ARGS__); \
  } while (0)

// Thread-local last-error slot behind flashattn_last_error().
void set_last_error(const std::string& message);
void clear_last_error();
const char* last_error_message();

}  // namespace flashattn
