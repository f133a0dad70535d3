#include "train/runtime.h"

#include "comm/launcher.h"
#include "util/check.h"

#ifdef MXDP_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "engine/cuda/engine_ops_cuda.h"
#endif

namespace mxdp {

const char* to_string(Device d) { return d == Device::Cpu ? "cpu" : "cuda"; }

namespace {
std::string cuda_missing_reason() {
#if !defined(MXDP_HAVE_CUDA)
  return "this mxdp was built without CUDA (no nvcc at configure time)";
#elif !defined(MXDP_HAVE_NCCL) || !defined(MXDP_HAVE_CUDNN)
  return "this mxdp was built without NCCL or cuDNN (see the cmake output)";
#else
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable GPU: ") + cudaGetErrorString(e);
  if (n == 0) return "no GPU is visible";
  return "";
#endif
}
}  // namespace

bool cuda_available() { return cuda_missing_reason().empty(); }

Device resolve_device(const std::string& name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "auto") return cuda_available() ? Device::Cuda : Device::Cpu;
  MXDP_CHECK(name == "cuda", "--device must be cpu, cuda or auto, got '", name, "'");
  const std::string why = cuda_missing_reason();
  MXDP_CHECK(why.empty(), "--device cuda: ", why);
  return Device::Cuda;
}

std::unique_ptr<Communicator> make_job_communicator(Device d, Communicator::Options opts) {
  if (d == Device::Cuda) {
    MXDP_CHECK(opts.backend == Backend::Auto || opts.backend == Backend::Nccl, "--device cuda communicates over NCCL; --backend ",
               backend_name(opts.backend), " works on host memory (use --device cpu for it)");
    opts.backend = Backend::Nccl;
  } else {
    MXDP_CHECK(opts.backend != Backend::Nccl, "the NCCL backend needs --device cuda");
    check_cpu_launch(this_launch());  // several ranks without MPI: stop now, whatever the backend
  }
  return make_communicator(opts);
}

std::string device_name(Device d) {
#ifdef MXDP_HAVE_CUDA
  if (d != Device::Cuda) return "";
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) return prop.name;
  (void)cudaGetLastError();  // a failed query leaves no error behind for the next CUDA call
  return "";
#else
  (void)d;
  return "";
#endif
}

std::unique_ptr<EngineOps> make_engine_ops(Device d) {
#ifdef MXDP_HAVE_CUDA
  if (d == Device::Cuda) return cuda::make_cuda_ops();
#endif
  MXDP_CHECK(d == Device::Cpu, "device ", to_string(d), " is not available in this build");
  return make_cpu_ops();
}

std::unique_ptr<LanguageModel> make_model(Device d, const ModelConfig& cfg, EngineOps& ops) {
  const ModelSpec& spec = cfg.spec();
#if defined(MXDP_HAVE_CUDA) && defined(MXDP_HAVE_CUDNN)
  if (d == Device::Cuda) {
    MXDP_CHECK(ops.device_memory(), "the GPU ", spec.name, " model needs device-memory ops");
    MXDP_CHECK(spec.build_cuda, "model ", spec.name, " has no GPU implementation in this build");
    return spec.build_cuda(cfg, ops.stream());
  }
#endif
  MXDP_CHECK(d == Device::Cpu, "device ", to_string(d), " is not available in this build");
  MXDP_CHECK(!ops.device_memory(), "the CPU ", spec.name, " model needs host-memory ops");
  return spec.build_cpu(cfg);
}

}  // namespace mxdp
