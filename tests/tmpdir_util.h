// Test helpers: a per-test temporary directory, file I/O, running the mxdp
// executable with its exit code and combined output, shell quoting (and
// error_of.h).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "error_of.h"

namespace mxdp::testing {

namespace fs = std::filesystem;

// A fresh directory named after the running test, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // Parameterized tests have '/' in their names: keep the directory flat.
    std::string name = std::string("mxdp_") + info->test_suite_name() + "_" + info->name() + "_" +
                       std::to_string(::getpid());
    for (char& c : name)
      if (c == '/') c = '_';
    path = fs::temp_directory_path() / name;
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `MXDP_BINARY args` through the shell; args must already be quoted.
inline RunResult run_mxdp(const std::string& args, const std::string& out_file) {
  const std::string cmd = std::string("'") + MXDP_BINARY + "' " + args + " > '" + out_file + "' 2>&1";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.output = read_file(out_file);
  return r;
}

// s in single quotes, for the command lines run_mxdp takes (s holds no quote).
inline std::string quote(const std::string& s) { return "'" + s + "'"; }

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace mxdp::testing
