// Checkpoint save and load of a GPT-2-sized data-parallel engine on the CPU:
// wall time (slowest rank, between barriers) and, per rank, the peak host
// memory the operation adds above what the rank held before it (VmHWM after
// the operation minus VmRSS before it, with the peak reset through
// /proc/self/clear_refs). No model compute: the model is GPT-2's parameter list
// with patterned weights, which it drops once the engine has taken its masters,
// so the resident memory is the engine's shard state and whatever the
// checkpoint code allocates.
//
// Before the load, every rank evicts the checkpoint's files from the page cache
// (posix_fadvise DONTNEED after an fsync), so the load reads from the disk.
//
//   export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1   # as root
//   mpirun --oversubscribe --bind-to none -np 4 build/bench/bench_checkpoint --model gpt2-350m --dir /tmp/mxdp_ckbench
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "engine/engine.h"
#include "models/gpt2/gpt.h"

namespace {

using namespace mxdp;
namespace fs = std::filesystem;

// GPT-2's parameters without the network.
class ParamsOnly final : public Model {
 public:
  explicit ParamsOnly(const GptConfig& c) : specs_(gpt_param_specs(c)) {
    int64_t n = 0;
    for (const auto& p : specs_) {
      off_.push_back(n);
      n += p.numel();
    }
    w_.resize(size_t(n));
  }
  const std::vector<ParamSpec>& params() const override { return specs_; }
  int num_layers() const override {
    int l = 0;
    for (const auto& p : specs_) l = std::max(l, p.layer + 1);
    return l;
  }
  float* weights(int p) override { return w_.data() + off_[p]; }
  void init_weights(uint64_t seed) override {
    for (size_t i = 0; i < w_.size(); ++i) w_[i] = float(int64_t((i * 2654435761u + seed) % 2001) - 1000) * 1e-5f;
  }
  void drop_weights() { std::vector<float>().swap(w_); }
  float forward(const Batch&, ModelHooks&) override { std::abort(); }
  void forward_into(const Batch&, ModelHooks&, float*) override { std::abort(); }
  void backward(ModelHooks&) override { std::abort(); }

 private:
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> off_;
  std::vector<float> w_;
};

int64_t status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0) return std::atoll(line.c_str() + n + 1);
  return -1;
}
void reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

void evict(const fs::path& p) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(p, ec)) {
    for (auto& e : fs::recursive_directory_iterator(p, ec))
      if (e.is_regular_file()) files.push_back(e.path());
  } else {
    files.push_back(p);
  }
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

int64_t disk_bytes(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return int64_t(fs::file_size(p, ec));
  int64_t n = 0;
  for (auto& e : fs::recursive_directory_iterator(p, ec))
    if (e.is_regular_file()) n += int64_t(e.file_size());
  return n;
}

struct Measure {
  double seconds;
  int64_t extra_kb;  // this rank
};

template <class Fn>
Measure measure(Communicator& c, Fn&& fn) {
  c.barrier();
  reset_peak();
  const int64_t before = status_kb("VmRSS:");
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  c.barrier();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {s, status_kb("VmHWM:") - before};
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "gpt2-350m", dir = "/tmp/mxdp_ckbench";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model = argv[i + 1];
    else if (a == "--dir") dir = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: bench_checkpoint [--model NAME] [--dir DIR]\n");
      return 2;
    }
  }
  try {
    auto comm = make_communicator();
    const int rank = comm->rank(), dp = comm->size();
    const GptConfig cfg = gpt_config(model);
    DpOptions o;  // mxdp train's defaults: mxfp8 gather, overlap, grad-buffer reuse
    o.reuse_grad_buf = true;
    ParamsOnly m(cfg);
    m.init_weights(1);
    DataParallel engine(m, *comm, o);
    m.drop_weights();
    const std::string path = (fs::path(dir) / "step_000001.ckpt").string();
    if (rank == 0) {
      fs::remove_all(dir);
      fs::create_directories(dir);
    }
    comm->barrier();
    const std::vector<float> probe = engine.full_master(0);  // wte: compared after the load
    const int64_t held_kb = status_kb("VmRSS:");
    const Measure save = measure(*comm, [&] { engine.save_checkpoint(path, {{"bench", model}}); });
    if (rank == 0) evict(path);
    comm->barrier();
    const Measure load = measure(*comm, [&] { engine.load_checkpoint(path); });
    const bool same = engine.full_master(0) == probe;

    std::vector<int64_t> all(4 * size_t(dp));
    int64_t mine[4] = {save.extra_kb, load.extra_kb, held_kb, same ? 1 : 0};
    std::memcpy(all.data() + 4 * rank, mine, sizeof mine);
    comm->all_gather(all.data() + 4 * rank, all.data(), sizeof mine);
    if (rank == 0) {
      std::printf("bench_checkpoint: %s (%lld params), dp %d, checkpoint %.2f GB on disk\n", model.c_str(),
                  (long long)gpt_num_parameters(cfg), dp, disk_bytes(path) / 1e9);
      std::printf("save %.2f s, load %.2f s (slowest rank, page cache evicted before the load)\n", save.seconds,
                  load.seconds);
      std::printf("rank  held before (GB)  save peak extra (GB)  load peak extra (GB)  wte after load\n");
      for (int r = 0; r < dp; ++r)
        std::printf("%4d  %16.2f  %20.2f  %20.2f  %s\n", r, all[4 * r + 2] / 1048576.0, all[4 * r] / 1048576.0,
                    all[4 * r + 1] / 1048576.0, all[4 * r + 3] ? "equal" : "DIFFERS");
    }
    comm->barrier();
    if (rank == 0) fs::remove_all(dir);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint: error: %s\n", e.what());
    return 1;
  }
}
