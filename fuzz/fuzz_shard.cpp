// libFuzzer harness: the token shard reader (data.h, check_shard_bytes: what
// TokenDataset checks on open) on untrusted bytes, as they are and with the
// header's count and payload checksum made valid. Only mxdp::Error may escape.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "util/check.h"
#include "data/data.h"

using namespace mxdp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> b(data, data + size);
  for (int fixed = 0; fixed < 2; ++fixed) {
    if (fixed) {
      if (b.size() < kShardHeaderBytes) break;
      const uint64_t count = (b.size() - kShardHeaderBytes) / 2;
      b.resize(kShardHeaderBytes + 2 * count);
      std::memcpy(b.data() + 24, &count, 8);
      const uint64_t h = fnv1a64(b.data() + kShardHeaderBytes, 2 * count);
      std::memcpy(b.data() + 32, &h, 8);
    }
    try {
      check_shard_bytes(b, "fuzz.bin");
    } catch (const Error&) {
    } catch (const std::exception& e) {
      std::fprintf(stderr, "not an mxdp::Error: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
