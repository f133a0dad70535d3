// Errors. Every failure mxdp reports is thrown as mxdp::Error, a sentence a
// user understands (what()), so that the CLI prints it once and exits non-zero
// (never a crash, never a silent result). Where it was detected (file:line and,
// for a check, the condition) travels beside it in where(), which the CLI
// prints only with --verbose (or MXDP_VERBOSE=1).
//
//   MXDP_CHECK(cond, "what was expected", value, ...);   // message parts are streamed
//   MXDP_FAIL("unknown format '", name, "'");
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mxdp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg, std::string where = {}, bool every_rank = false)
      : std::runtime_error(msg), where_(std::move(where)), every_rank_(every_rank) {}
  // "file.cpp:N" of the check or fail that threw, with " (check failed: cond)"
  // for a check; empty for an error made elsewhere.
  const std::string& where() const { return where_; }
  // Thrown alike on every rank of the job after the ranks agreed on it
  // (comm.h's on_every_rank, on_rank0): one rank reports it for all.
  bool every_rank() const { return every_rank_; }

 private:
  std::string where_;
  bool every_rank_;
};

namespace detail {
template <class... Args>
[[noreturn]] void fail(const char* file, int line, const char* cond, const Args&... args) {
  std::ostringstream msg, where;
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  where << base << ":" << line;
  if (cond) where << " (check failed: " << cond << ")";
  if constexpr (sizeof...(Args) > 0) (msg << ... << args);  // MXDP_CHECK(cond) gives none
  std::string text = msg.str();
  if (text.empty()) text = std::string("internal check failed: ") + (cond ? cond : "?");
  throw Error(text, where.str());
}
}  // namespace detail

}  // namespace mxdp

#define MXDP_FAIL(...) ::mxdp::detail::fail(__FILE__, __LINE__, nullptr, __VA_ARGS__)

#define MXDP_CHECK(cond, ...)                                                                \
  do {                                                                                       \
    if (!(cond)) ::mxdp::detail::fail(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
