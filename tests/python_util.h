// Test helpers: running the Python references (tests/py/, scripts/) that the
// interop tests compare against. They need the PyPI packages numpy,
// safetensors and tokenizers, which scripts/setup.sh installs; a missing
// package is a test failure that says so, never a skip.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tmpdir_util.h"

namespace mxdp::testing {

// The interpreter: $MXDP_PYTHON, else python3 on PATH.
inline std::string python() {
  const char* p = std::getenv("MXDP_PYTHON");
  return p && *p ? p : "python3";
}

inline std::string source_path(const std::string& rel) { return std::string(MXDP_SOURCE_DIR) + "/" + rel; }

// `python3 ARGS` through the shell (args already quoted), output to out_file.
// numpy's BLAS on one thread: its spinning threads cost seconds on a shared 2-core machine.
inline RunResult run_python(const std::string& args, const std::string& out_file) {
  const std::string cmd = "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 " + python() + " " + args + " > '" + out_file + "' 2>&1";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.output = read_file(out_file);
  return r;
}

// Fails the test (with what to run) unless every module imports.
#define MXDP_REQUIRE_PYTHON(tmp, ...)                                                                    \
  do {                                                                                                   \
    const ::mxdp::testing::RunResult _r = ::mxdp::testing::run_python(                                   \
        std::string("-c 'import ") + __VA_ARGS__ + "'", (tmp) / "python_check.txt");                     \
    ASSERT_EQ(_r.exit_code, 0) << "the Python references need the packages " << __VA_ARGS__             \
                               << " (bash scripts/setup.sh installs them with pip):\n" << _r.output;     \
  } while (0)

}  // namespace mxdp::testing
