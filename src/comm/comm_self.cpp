// Self: the one-rank communicator (mxdp run without mpirun). Every collective
// is a copy of host memory and is complete when it returns, so callers never
// branch on the world size. Avg divides by 1, which is exact: a copy.
#include <cstring>

#include "comm/comm_internal.h"

namespace mxdp::comm_detail {
namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class SelfComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Backend backend() const override { return Backend::Self; }
  bool device_memory() const override { return false; }

  std::unique_ptr<Work> all_gather_async(const void* in, void* out, size_t bytes, void*) override {
    MXDP_CHECK(bytes == 0 || (in && out), "all_gather: null buffer with ", bytes, " bytes");
    if (in != out && bytes) std::memmove(out, in, bytes);  // (null + 0 bytes: UB for memmove)
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count, DType t, RedOp op,
                                             void*) override {
    check_reduction_type(t, op, "reduce_scatter");
    const size_t bytes = count * dtype_size(t);
    MXDP_CHECK(bytes == 0 || (in && out), "reduce_scatter: null buffer with ", count, " elements");
    MXDP_CHECK(!overlaps(in, bytes, out, bytes), "reduce_scatter: in and out overlap");
    if (bytes) std::memcpy(out, in, bytes);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> all_reduce_async(const void* in, void* out, size_t count, DType t, RedOp op,
                                         void*) override {
    check_reduction_type(t, op, "all_reduce");
    const size_t bytes = count * dtype_size(t);
    MXDP_CHECK(bytes == 0 || (in && out), "all_reduce: null buffer with ", count, " elements");
    MXDP_CHECK(in == out || !overlaps(in, bytes, out, bytes), "all_reduce: in and out overlap but differ");
    if (in != out && bytes) std::memcpy(out, in, bytes);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> broadcast_async(void* buf, size_t bytes, int root, void*) override {
    MXDP_CHECK(root == 0, "broadcast: root ", root, " out of range for 1 rank");
    MXDP_CHECK(bytes == 0 || buf, "broadcast: null buffer with ", bytes, " bytes");
    return std::make_unique<DoneWork>();
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const Communicator::Options&) {
  return std::make_unique<SelfComm>();
}

}  // namespace mxdp::comm_detail
