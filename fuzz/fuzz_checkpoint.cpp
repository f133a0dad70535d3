// libFuzzer harness: the checkpoint readers (checkpoint.h) on untrusted bytes.
// The first byte picks the reader; each input is tried as it is and with its
// checksums recomputed, so that the fuzzer reaches the lengths, counts, shapes
// and JSON behind them. Any exception other than mxdp::Error, any crash and
// any sanitizer report is a finding.
//   0: a version-1 single-file checkpoint     1: a step directory's manifest
//   2: a rank file's header                    3: a whole step directory (a rank
//      file on disk with a manifest that matches it), read through CheckpointReader
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "util/check.h"
#include "io/checkpoint.h"

using namespace mxdp;

namespace {

// The params a rank file's pieces name (each as long as its furthest piece
// needs), so that a real rank file from any model reads through; three small
// ones when the header cannot say (or would need too much memory).
std::vector<CheckpointParam> params_for(const std::vector<uint8_t>& b) {
  const std::vector<CheckpointParam> small = {{"w0", {10}, 10}, {"w1", {4, 8}, 32}, {"w2", {3}, 3}};
  uint64_t hb = 0;
  try {
    hb = rank_file_header_bytes(b, b.size(), "fuzz");
  } catch (const Error&) {
    return small;
  }
  (void)hb;
  uint64_t n_pieces;
  std::memcpy(&n_pieces, b.data() + 16, 8);
  std::vector<int64_t> numel;
  uint64_t total = 0;
  for (uint64_t i = 0; i < n_pieces; ++i) {
    uint64_t p, begin, len;
    std::memcpy(&p, b.data() + 40 + 24 * i, 8);
    std::memcpy(&begin, b.data() + 48 + 24 * i, 8);
    std::memcpy(&len, b.data() + 56 + 24 * i, 8);
    if (p >= 4096 || begin > (1u << 22) || len > (1u << 22)) return small;
    if (numel.size() <= p) numel.resize(p + 1, 1);
    numel[p] = std::max<int64_t>(numel[p], int64_t(begin + len));
  }
  std::vector<CheckpointParam> out;
  for (size_t p = 0; p < numel.size(); ++p) {
    total += uint64_t(numel[p]);
    out.push_back({"p" + std::to_string(p), {numel[p]}, numel[p]});
  }
  return out.empty() || total > (1u << 24) ? small : out;
}

void fix_container_checksum(std::vector<uint8_t>& b) {
  if (b.size() < 8) return;
  const uint64_t h = fnv1a64(b.data(), b.size() - 8);
  std::memcpy(b.data() + b.size() - 8, &h, 8);
}

// Recomputes the rank file's header checksum (and, when `chunks`, its chunk checksums).
bool fix_rank_file(std::vector<uint8_t>& b, bool chunks) {
  uint64_t hb = 0;
  try {
    hb = rank_file_header_bytes(b, b.size(), "fuzz");
  } catch (const Error&) {
    return false;
  }
  if (chunks) {
    uint64_t n_pieces, chunk, data;
    std::memcpy(&n_pieces, b.data() + 16, 8);
    std::memcpy(&chunk, b.data() + 24, 8);
    std::memcpy(&data, b.data() + 32, 8);
    const uint64_t n_chunks = data == 0 ? 0 : (data - 1) / chunk + 1;
    for (uint64_t c = 0; c < n_chunks; ++c) {
      const uint64_t start = c * chunk, len = std::min(chunk, data - start);
      const uint64_t h = fnv1a64(b.data() + hb + start, len);
      std::memcpy(b.data() + 40 + 24 * n_pieces + 8 * c, &h, 8);
    }
  }
  const uint64_t h = fnv1a64(b.data(), hb - 8);
  std::memcpy(b.data() + hb - 8, &h, 8);
  return true;
}

template <class Fn>
void expect_only_mxdp_errors(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not an mxdp::Error: %s\n", e.what());
    std::abort();
  }
}

// A directory in memory (/dev/shm) for the step-directory mode, removed at exit.
char g_scratch[64];
std::string scratch_dir() {
  if (!g_scratch[0]) {
    std::snprintf(g_scratch, sizeof g_scratch, "%s/mxdp_fuzz_XXXXXX",
                  std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp");
    if (!::mkdtemp(g_scratch)) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(g_scratch, ec);
    });
  }
  return g_scratch;
}

void read_step_directory(const std::vector<uint8_t>& rank_file) {
  const std::string dir = scratch_dir() + "/step.ckpt";
  std::filesystem::create_directories(dir);
  write_file_atomic(dir + "/" + rank_file_name(0), rank_file);
  CheckpointManifest m;
  m.version = 1;
  m.iteration = 2;
  m.params = params_for(rank_file);
  m.chunk_bytes = 64;
  if (rank_file.size() >= 32) std::memcpy(&m.chunk_bytes, rank_file.data() + 24, 8);
  uint64_t hb = 0;
  try {
    hb = rank_file_header_bytes(rank_file, rank_file.size(), "fuzz");
  } catch (const Error&) {
  }
  uint64_t sum = 0;
  if (hb >= 8) std::memcpy(&sum, rank_file.data() + hb - 8, 8);
  m.files = {{rank_file_name(0), rank_file.size(), sum}};
  if (m.chunk_bytes < 1 || m.chunk_bytes > (uint64_t(1) << 30)) m.chunk_bytes = 64;
  write_file_atomic(dir + "/" + kManifestName, serialize_manifest(m));
  const CheckpointData c = read_checkpoint(dir);
  (void)c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 4;
  std::vector<uint8_t> b(data + 1, data + size);
  for (int fixed = 0; fixed < 2; ++fixed) {
    if (fixed) {
      if (mode <= 1) fix_container_checksum(b);
      else if (!fix_rank_file(b, /*chunks=*/true)) break;
    }
    switch (mode) {
      case 0: expect_only_mxdp_errors([&] { deserialize_checkpoint(b, "fuzz.ckpt"); }); break;
      case 1: expect_only_mxdp_errors([&] { parse_manifest(b, "fuzz/manifest"); }); break;
      case 2: expect_only_mxdp_errors([&] { parse_rank_file_header(b, b.size(), params_for(b), "fuzz.bin"); }); break;
      case 3: expect_only_mxdp_errors([&] { read_step_directory(b); }); break;
    }
  }
  return 0;
}
