// Launchers: who started this process, and where its job meets.
//
// discover_launch() is a pure function of an environment map (tests pass
// their own), in a fixed precedence:
//   1. Open MPI   OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE,NODE_RANK}
//   2. torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
//                 MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE,
//                 only when torchrun's agent started the process
//                 (TORCHELASTIC_RUN_ID): the nearer launcher of
//                 `srun torchrun ...`, whose tasks also carry Slurm's variables
//   3. Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//                 SLURM_TASKS_PER_NODE, SLURM_JOB_NODELIST (the SLURM_STEP_*
//                 forms first where srun set them: a step may be smaller
//                 than its allocation)
//   4. torchrun's variables set by hand (RANK and WORLD_SIZE, no agent)
//   5. PMI        PMI_RANK, PMI_SIZE (MPICH's Hydra, Intel MPI)
// and otherwise None: one rank.
//
// The rendezvous (rendezvous.h) of a job launched without MPI listens on
// rdzv_port of rank 0's host, reached at rdzv_addr:
//   torchrun : MASTER_ADDR:MASTER_PORT; under TORCHELASTIC_USE_AGENT_STORE=True
//              the agent's store already listens on MASTER_PORT, so MASTER_PORT+1
//   Slurm    : MASTER_ADDR if set, else the first host of the step's node list;
//              MASTER_PORT if set, else 29500 + SLURM_JOB_ID mod 1000
//   MXDP_RDZV_PORT=<port> overrides the port under every launcher.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace mxdp {

enum class Launcher : uint8_t { None, OpenMpi, Slurm, Torchrun, Pmi };
const char* launcher_name(Launcher l);  // "none", "Open MPI", "Slurm", "torchrun", "PMI"

using EnvMap = std::map<std::string, std::string>;

struct LaunchInfo {
  Launcher launcher = Launcher::None;
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // processes of this host (the GPU is local_rank)
  int node_rank = 0;
  // An MPI world spans the job: MPI_Init gives every process its rank (Open
  // MPI, PMI, or srun with a PMI plugin: PMIX_RANK / PMI_RANK in the task).
  bool mpi_world = false;
  // Where the TCP rendezvous meets (Slurm, torchrun); empty/0 otherwise.
  std::string rdzv_addr;
  int rdzv_port = 0;
  std::string rdzv_origin;  // which variables gave them, for messages
  bool agent_store = false;  // torchrun's agent holds MASTER_PORT

  // "torchrun: rank 0 of 2 (local 0 of 2), rendezvous 127.0.0.1:29511 (MASTER_ADDR:MASTER_PORT)"
  std::string describe() const;
};

// The launch described by env. Throws mxdp::Error naming the variable when a
// launcher's variables are malformed or contradict each other.
LaunchInfo discover_launch(const EnvMap& env);

// The first host of a Slurm host list: "gpu[07-09,12],cpu3" -> "gpu07".
std::string slurm_first_host(const std::string& nodelist);
// Tasks on node `node` of a Slurm tasks-per-node list: "4(x2),3", node 2 -> 3.
// -1 when the list does not reach that node.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

// This process's environment, and its launch (discovered once, cached).
EnvMap process_environment();
const LaunchInfo& this_launch();

// A CPU job of more than one rank communicates over MPI: throws mxdp::Error,
// saying so, when `l` launched several ranks without an MPI world.
void check_cpu_launch(const LaunchInfo& l);

}  // namespace mxdp
