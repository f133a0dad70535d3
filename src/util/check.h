// Errors. Every failure mxdp reports carries the file:line where it was
// detected and what was expected, and is thrown as mxdp::Error so that the
// CLI can print it and exit non-zero (never a crash, never a silent result).
//
//   MXDP_CHECK(cond, "what was expected", value, ...);   // message parts are streamed
//   MXDP_FAIL("unknown format '", name, "'");
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mxdp {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Args>
[[noreturn]] void fail(const char* file, int line, const Args&... args) {
  std::ostringstream os;
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  os << base << ":" << line << ": ";
  (os << ... << args);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace mxdp

#define MXDP_FAIL(...) ::mxdp::detail::fail(__FILE__, __LINE__, __VA_ARGS__)

#define MXDP_CHECK(cond, ...)                                                          \
  do {                                                                                 \
    if (!(cond)) ::mxdp::detail::fail(__FILE__, __LINE__, "check failed (" #cond "): " \
                                      __VA_OPT__(, ) __VA_ARGS__);                     \
  } while (0)
