#include "util/env.h"

#include <cstdlib>

#include "util/check.h"

namespace mxdp {

namespace {
// The variable's value, or null when it is unset or empty (both mean "the default").
const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}
}  // namespace

bool env_flag(const char* name, bool unset) {
  const char* v = env_value(name);
  if (!v) return unset;
  const std::string s = v;
  MXDP_CHECK(s == "0" || s == "1", name, " must be 0 or 1, got '", s, "'");
  return s == "1";
}

std::string env_choice(const char* name, std::initializer_list<const char*> choices, const char* unset) {
  const char* v = env_value(name);
  if (!v) return unset;
  const std::string s = v;
  std::string all;
  for (const char* c : choices) {
    if (s == c) return s;
    all += all.empty() ? "" : ", ";
    all += std::string("'") + c + "'";
  }
  MXDP_FAIL(name, " must be one of ", all, ", got '", s, "'");
}

}  // namespace mxdp
