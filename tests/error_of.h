// The message of the mxdp::Error a piece of test code throws.
#pragma once

#include <string>

#include "util/check.h"

namespace mxdp::testing {

// Runs `f` and returns the message of the mxdp::Error it throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const mxdp::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace mxdp::testing
