// What the `mxdp train` job tests share (test_train_job.cpp, test_train_robust.cpp):
// a small corpus of numbered lines, prepared into byte-token shards in a temp
// directory, and `mxdp train` run on it with a test's tiny-model flags.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "data/data.h"
#include "mpi_session.h"
#include "tmpdir_util.h"

#ifndef MXDP_MPIEXEC
#define MXDP_MPIEXEC ""
#endif

namespace mxdp::testing {

// `lines` numbered lines of Genesis 1:1: real text whose every line differs.
inline std::string numbered_corpus(int lines = 300) {
  std::string text;
  for (int i = 0; i < lines; ++i) text += "In the beginning God created the heaven and the earth. " + std::to_string(i) + "\n";
  return text;
}

// A fixture: the corpus prepared into d/data (val_fraction 0.1), and train() runs
// `mxdp train <flags> --data d/data <args>` with its output in d/<log>.
class TinyTrainTest : public ::testing::Test {
 protected:
  explicit TinyTrainTest(std::string flags) : flags_(std::move(flags)) {}
  void SetUp() override {
    write_file(d / "corpus.txt", numbered_corpus());
    mxdp::prepare(d / "corpus.txt", d / "data", 0.1, nullptr);
    common = flags_ + " --data " + quote(d / "data");
  }
  RunResult train(const std::string& args, const std::string& log) {
    return run_mxdp("train " + common + " " + args, d / log);
  }
  // `mpirun -np 2 mxdp train <flags> --data ...` for a shell, to which a test
  // appends its arguments and redirections; its Open MPI session files go to
  // the fixture's own directory (mpi_session.h), and root may run it. "" when
  // this build found no mpirun: the test then skips.
  std::string mpirun_train() { return with_mpirun(""); }
  // The same under a 120 s timeout (then killed), for jobs that must end by themselves.
  std::string timed_mpirun_train() { return with_mpirun("timeout -k 5 120 "); }
  TempDir d;
  std::string common;  // the flags and --data, for tests that build their own command line
  MpiSessionDir session;

 private:
  std::string with_mpirun(const std::string& wrapper) {
    const std::string m = MXDP_MPIEXEC;
    if (m.empty() || ::access(m.c_str(), X_OK) != 0) return "";
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    return session.shell_prefix() + wrapper + quote(m) + " --oversubscribe --bind-to none -np 2 " + quote(MXDP_BINARY) +
           " train " + common;
  }
  std::string flags_;
};

}  // namespace mxdp::testing
