// Runtime: the one place that decides where a job runs and builds what runs
// there — the communicator, the engine's memory ops and the model — so that the
// trainer, the sampler and the tools never branch on the device.
//
//   cpu : MPI (or self) communicator, host ops, the architecture's CPU model
//         (ModelSpec::build_cpu; GPT-2: the fp32 OpenMP GPT, gpt.h).
//   cuda: NCCL communicator (one process per GPU, device = local rank), CUDA
//         ops on one compute stream, the architecture's GPU model
//         (ModelSpec::build_cuda; GPT-2: the bf16 GPT, cuda/gpt_cuda.h) on
//         that same stream.
#pragma once

#include <memory>
#include <string>

#include "comm/comm.h"
#include "engine/engine_ops.h"
#include "models/registry.h"

namespace mxdp {

enum class Device : uint8_t { Cpu, Cuda };
const char* to_string(Device d);

// True when this binary was built with CUDA (and NCCL) and a GPU is visible.
bool cuda_available();
// "cpu", "cuda" or "auto" (cuda where available, else cpu). Throws mxdp::Error
// for anything else, or for "cuda" where it is not available (saying why).
Device resolve_device(const std::string& name);

// The communicator of a job on `d`: opts.backend Auto/Self/Mpi on the CPU
// (several ranks need an MPI world: started by torchrun or a plain srun, an
// error at once); on cuda, NCCL (opts.backend must be Auto or Nccl), over MPI
// under mpirun, over a TCP rendezvous under Slurm or torchrun
// (comm/launcher.h). Sets the process's GPU.
std::unique_ptr<Communicator> make_job_communicator(Device d, Communicator::Options opts);

// The name of the current GPU (cudaDeviceProp::name, "NVIDIA H100 80GB HBM3"),
// "" on the CPU, in a build without CUDA or where the driver does not say.
std::string device_name(Device d);

// The engine's ops for `d` (cuda: work ordered on a new compute stream of the
// current GPU).
std::unique_ptr<EngineOps> make_engine_ops(Device d);

// The model of `cfg` (any registered architecture) on `d`, computing on ops'
// stream (memory in ops' space).
std::unique_ptr<LanguageModel> make_model(Device d, const ModelConfig& cfg, EngineOps& ops);

}  // namespace mxdp
