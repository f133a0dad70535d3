// Open MPI keeps each job's session files under <tmpdir base>/ompi.<host>.<uid>/
// (Open MPI 5: PRRTE's prte.<host>.<uid>/), a directory that every mpirun on
// the machine creates on start and removes when it is empty again. Two mpiruns
// starting at the same moment race on it (seen with ctest -j2: "mkdir
// /tmp/ompi.vm.0 ... File exists", and the job fails). So every mpirun a test
// starts gets a base directory of its own, removed when the test is done with it
// (ctest's own mpirun commands get theirs from tests/mpi_session.sh).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

namespace mxdp::testing {

class MpiSessionDir {
 public:
  MpiSessionDir() {
    std::string t = (std::filesystem::temp_directory_path() / "mxdp-ompi.XXXXXX").string();
    if (::mkdtemp(t.data())) path_ = t;  // else: Open MPI's default place (and its race)
  }
  ~MpiSessionDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  MpiSessionDir(const MpiSessionDir&) = delete;
  MpiSessionDir& operator=(const MpiSessionDir&) = delete;

  const std::string& path() const { return path_; }
  // NAME=VALUE entries for an environment (Open MPI 4's and PRRTE's parameter).
  std::vector<std::string> env() const {
    if (path_.empty()) return {};
    return {"OMPI_MCA_orte_tmpdir_base=" + path_, "PRTE_MCA_prte_tmpdir_base=" + path_};
  }
  // The same as assignments to put in front of a shell command ("A='x' B='x' ").
  std::string shell_prefix() const {
    std::string s;
    for (const std::string& e : env()) {
      const size_t eq = e.find('=');
      s += e.substr(0, eq) + "='" + e.substr(eq + 1) + "' ";
    }
    return s;
  }

 private:
  std::string path_;
};

}  // namespace mxdp::testing
