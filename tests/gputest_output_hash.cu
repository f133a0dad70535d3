// models/cuda/output_hash.h on the GPU against the formula it documents,
// computed here on the host one word at a time: random bytes of sizes around
// a word and a block, at an aligned and an odd address; one flipped byte or
// two swapped words change the hash; repeated runs give one value (the
// device sum's order varies, its result may not). Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu_arrays.h"
#include "gpu_test_util.h"
#include "models/cuda/output_hash.h"
#include "util/cuda_check.h"

namespace mxdp {
namespace {

using gputest::Dev;

// The header's formula, written out again: splitmix64's finalizer of each
// little-endian word xor its index times the golden ratio's constant, summed
// with wrap-around, plus the finalizer of the length.
uint64_t splitmix_final(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t host_hash(const uint8_t* p, size_t bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i * 8 < bytes; ++i) {
    uint64_t w = 0;
    for (size_t b = 0; b < 8 && i * 8 + b < bytes; ++b) w |= uint64_t(p[i * 8 + b]) << (8 * b);
    sum += splitmix_final(w ^ (uint64_t(i) * 0x9e3779b97f4a7c15ull));
  }
  return sum + splitmix_final(bytes);
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = uint8_t(g());
  return v;
}

uint64_t device_hash(const uint8_t* p, size_t bytes) { return cuda::output_hash(p, bytes, nullptr); }

constexpr size_t kSizes[] = {0, 1, 7, 8, 9, 4096 + 3, size_t(1) << 24};

TEST(GpuOutputHash, MatchesTheHostFormula) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (size_t bytes : kSizes) {
    for (size_t offset : {0, 1}) {  // an 8-byte aligned address, and an odd one (the byte-by-byte loads)
      SCOPED_TRACE(std::to_string(bytes) + " bytes at offset " + std::to_string(offset));
      const std::vector<uint8_t> h = random_bytes(bytes + offset, 1000 + bytes);
      const Dev<uint8_t> d(h);
      EXPECT_EQ(device_hash(d.p + offset, bytes), host_hash(h.data() + offset, bytes));
    }
  }
}

TEST(GpuOutputHash, OneFlippedByteChangesIt) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 g(7);
  for (size_t bytes : kSizes) {
    if (bytes == 0) continue;
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    std::vector<uint8_t> h = random_bytes(bytes, 2000 + bytes);
    Dev<uint8_t> d(h);
    const uint64_t before = device_hash(d.p, bytes);
    for (size_t at : {size_t(0), bytes - 1, size_t(g() % bytes)}) {
      const uint8_t was = h[at];
      h[at] ^= uint8_t(1u << (g() % 8));
      d.put(h);
      const uint64_t after = device_hash(d.p, bytes);
      EXPECT_NE(after, before) << "byte " << at;
      EXPECT_EQ(after, host_hash(h.data(), bytes)) << "byte " << at;
      h[at] = was;
    }
  }
}

TEST(GpuOutputHash, TwoSwappedWordsChangeIt) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::vector<uint8_t> h = random_bytes(4096, 3);
  Dev<uint8_t> d(h);
  const uint64_t before = device_hash(d.p, h.size());
  for (int b = 0; b < 8; ++b) std::swap(h[8 + b], h[800 + b]);  // words 1 and 100
  d.put(h);
  EXPECT_NE(device_hash(d.p, h.size()), before);
}

TEST(GpuOutputHash, SameOnEveryRun) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  const size_t bytes = (size_t(1) << 26) + 5;  // 64 MiB: every block's warps race for the sum
  const Dev<uint8_t> d(random_bytes(bytes, 4));
  gputest::Stream s;
  const uint64_t first = cuda::output_hash(d.p, bytes, s.s);
  for (int run = 0; run < 10; ++run) EXPECT_EQ(cuda::output_hash(d.p, bytes, s.s), first) << "run " << run;
  EXPECT_EQ(device_hash(d.p, bytes), first);  // the legacy stream too
}

}  // namespace
}  // namespace mxdp
