// Communicator: type helpers, options, backend choice. The backends are in
// comm_self.cpp, comm_mpi.cpp and cuda/comm_nccl.cpp.
#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "comm/comm_internal.h"
#include "comm/launcher.h"
#include "util/env.h"

namespace mxdp {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::U8: return 1;
  }
  MXDP_FAIL("unknown DType ", int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
    case DType::U8: return "u8";
  }
  return "?";
}

const char* redop_name(RedOp op) {
  switch (op) {
    case RedOp::Sum: return "sum";
    case RedOp::Avg: return "avg";
    case RedOp::Max: return "max";
  }
  return "?";
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::Auto: return "auto";
    case Backend::Self: return "self";
    case Backend::Mpi: return "mpi";
    case Backend::Nccl: return "nccl";
  }
  return "?";
}

namespace comm_detail {

bool launched_by_mpirun() {
  // Open MPI, MPICH/Hydra, PMIx-based launchers.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

Communicator::Options resolve_options(Communicator::Options opts) {
  if (const char* t = std::getenv("MXDP_COMM_TIMEOUT"); t && *t) {
    char* end = nullptr;
    double v = std::strtod(t, &end);
    MXDP_CHECK(end && *end == '\0' && v > 0, "MXDP_COMM_TIMEOUT must be a positive number of seconds, got '", t, "'");
    opts.timeout_s = v;
  }
  if (env_flag("MXDP_COMM_CHECK", false)) opts.check_sizes = true;
  MXDP_CHECK(opts.timeout_s > 0, "Communicator::Options::timeout_s must be > 0, got ", opts.timeout_s);
  return opts;
}

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::AllGather: return "all_gather";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Barrier: return "barrier";
  }
  return "?";
}

std::string OpDesc::str(int rank, int size) const {
  std::ostringstream os;
  os << op_kind_name(kind) << " #" << seq << " on rank " << rank << " of " << size << " (";
  switch (kind) {
    case OpKind::AllGather: os << count << " bytes per rank"; break;
    case OpKind::Broadcast: os << count << " bytes from root " << root; break;
    case OpKind::Barrier: os << "no data"; break;
    default:
      os << count << " x " << dtype_name(type) << " " << redop_name(op) << ", "
         << count * dtype_size(type) << " bytes" << (kind == OpKind::ReduceScatter ? " out" : "");
  }
  double age = std::chrono::duration<double>(std::chrono::steady_clock::now() - posted).count();
  os << ", posted " << age << " s ago)";
  return os.str();
}

void op_fields(const OpDesc& d, int64_t v[6]) {
  const int64_t f[6] = {int64_t(d.kind), int64_t(d.type), int64_t(d.op), int64_t(d.count), int64_t(d.root),
                        int64_t(d.seq)};
  std::copy(f, f + 6, v);
}

void check_reduction_type(DType t, RedOp op, const char* where) {
  MXDP_CHECK(t == DType::F32 || t == DType::BF16 || t == DType::F64, where,
             ": reductions take f32, bf16 or f64, got ", dtype_name(t));
  MXDP_CHECK(op == RedOp::Sum || op == RedOp::Avg || op == RedOp::Max, where, ": unknown RedOp ", int(op));
}

void divide_host(void* buf, size_t count, DType t, int n) {
  switch (t) {
    case DType::F32: {
      auto* p = static_cast<float*>(buf);
      const float d = float(n);
      for (size_t i = 0; i < count; ++i) p[i] = p[i] / d;
      return;
    }
    case DType::F64: {
      auto* p = static_cast<double*>(buf);
      const double d = double(n);
      for (size_t i = 0; i < count; ++i) p[i] = p[i] / d;
      return;
    }
    case DType::BF16: {
      auto* p = static_cast<uint16_t*>(buf);
      const float d = float(n);
      for (size_t i = 0; i < count; ++i) p[i] = codec::bf16_from_f32(codec::bf16_to_f32(p[i]) / d);
      return;
    }
    case DType::U8: break;
  }
  MXDP_FAIL("Avg is not defined for ", dtype_name(t));
}

}  // namespace comm_detail

namespace {
// The MPI world must be the one the launcher started (an Open MPI without
// Slurm's PMI support makes every srun task a world of its own).
void check_mpi_world(int mpi_size) {
  const LaunchInfo& l = this_launch();
  if (l.size <= 1 || l.size == mpi_size) return;
  MXDP_FAIL(launcher_name(l.launcher), " started ", l.size, " ranks but MPI_Init formed a world of ", mpi_size,
            ": this MPI cannot use the launcher's process manager (for srun: --mpi=pmix, with an MPI built for it), "
            "so each process would train alone");
}
}  // namespace

std::unique_ptr<Communicator> make_communicator(const Communicator::Options& in) {
  using namespace comm_detail;
  Communicator::Options opts = resolve_options(in);
  switch (opts.backend) {
    case Backend::Self: return make_self_communicator(opts);
    case Backend::Mpi: {
      check_cpu_launch(this_launch());
      auto c = make_mpi_communicator(opts);
      check_mpi_world(c->size());
      return c;
    }
    case Backend::Auto: {
      check_cpu_launch(this_launch());
      if (!launched_by_mpirun()) return make_self_communicator(opts);
      mpi_ensure_initialized();
      int size = 0;
      MXDP_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
      check_mpi_world(size);
      return size == 1 ? make_self_communicator(opts) : make_mpi_communicator(opts);
    }
    case Backend::Nccl:
#ifdef MXDP_HAVE_NCCL
      return make_nccl_communicator(opts);
#else
      MXDP_FAIL("the NCCL backend was asked for, but mxdp was built without CUDA/NCCL");
#endif
  }
  MXDP_FAIL("unknown Backend ", int(opts.backend));
}

namespace {
// What an exception says, never empty, and where it came from if mxdp's.
void caught(const std::exception& e, std::string& err, std::string& where) {
  err = e.what();
  if (err.empty()) err = "unknown error";
  if (const auto* me = dynamic_cast<const Error*>(&e)) where = me->where();
}
}  // namespace

void on_rank0(Communicator& comm, const std::function<void()>& fn,
              const std::function<void(void*, size_t)>& broadcast) {
  auto bcast = [&](void* p, size_t n) { broadcast ? broadcast(p, n) : comm.host_broadcast(p, n, 0); };
  std::string err, where;
  if (comm.rank() == 0) {
    try {
      fn();
    } catch (const std::exception& e) {
      caught(e, err, where);
    }
  }
  uint64_t n = err.size();
  bcast(&n, sizeof n);
  if (!n) return;
  err.resize(n);
  bcast(err.data(), n);
  throw Error(err, where, true);
}

void on_every_rank(Communicator& comm, const std::function<void()>& fn) {
  const int rank = comm.rank(), dp = comm.size();
  std::string err, where;
  try {
    fn();
  } catch (const std::exception& e) {
    caught(e, err, where);
  }
  std::vector<uint64_t> lens(dp, 0);
  lens[rank] = err.size();
  comm.host_all_gather(lens.data(), sizeof(uint64_t));
  int first = -1, failed = 0;
  for (int r = 0; r < dp; ++r)
    if (lens[r]) failed += 1, first = first < 0 ? r : first;
  if (first < 0) return;
  std::string msg(lens[first], '\0');
  if (rank == first) msg = err;
  comm.host_broadcast(msg.data(), msg.size(), first);
  // Name the rank only where it matters: when some ranks did not fail.
  if (failed < dp) msg = "on rank " + std::to_string(first) + ": " + msg;
  throw Error(msg, rank == first ? where : "", true);
}

}  // namespace mxdp
