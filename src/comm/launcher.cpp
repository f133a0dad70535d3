// Launchers: rank discovery from the environment (launcher.h).
#include "comm/launcher.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "util/check.h"

extern char** environ;

namespace mxdp {

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::None: return "none";
    case Launcher::OpenMpi: return "Open MPI";
    case Launcher::Slurm: return "Slurm";
    case Launcher::Torchrun: return "torchrun";
    case Launcher::Pmi: return "PMI";
  }
  return "?";
}

namespace {

const std::string* find(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}
bool has(const EnvMap& env, const char* name) { return find(env, name) != nullptr; }

// The integer value of env[name]; `fallback` when unset (required: an error).
int int_var(const EnvMap& env, const char* name, int lo, int fallback, bool required = false) {
  const std::string* s = find(env, name);
  if (!s) {
    if (required) MXDP_FAIL("the launcher set no ", name, ", which it must set with the other ones");
    return fallback;
  }
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(s->c_str(), &end, 10);
  if (s->empty() || *end != '\0' || errno || v < lo || v > INT_MAX)
    MXDP_FAIL(name, "='", *s, "' is not an integer >= ", lo);
  return int(v);
}

// The first of names that is set (for the SLURM_STEP_* forms), or nullptr.
const char* first_set(const EnvMap& env, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (has(env, n)) return n;
  return nullptr;
}

void check_rank(const LaunchInfo& l, const char* rank_var, const char* size_var) {
  if (l.rank >= l.size)
    MXDP_FAIL(rank_var, "=", l.rank, " but ", size_var, "=", l.size, ": a rank must be below the number of ranks");
  if (l.local_rank >= l.local_size)
    MXDP_FAIL("local rank ", l.local_rank, " is not below the ", l.local_size,
              " processes of this host that the launcher reports");
}

// MXDP_RDZV_PORT, when set, wins over the launcher's port.
void apply_port_override(const EnvMap& env, LaunchInfo& l) {
  if (!has(env, "MXDP_RDZV_PORT")) return;
  l.rdzv_port = int_var(env, "MXDP_RDZV_PORT", 1, 0);
  if (l.rdzv_port > 65535) MXDP_FAIL("MXDP_RDZV_PORT=", l.rdzv_port, " is not a TCP port (1..65535)");
  l.rdzv_origin += ", port from MXDP_RDZV_PORT";
}

int tcp_port(const EnvMap& env, const char* name) {
  const int p = int_var(env, name, 1, 0, true);
  if (p > 65535) MXDP_FAIL(name, "=", p, " is not a TCP port (1..65535)");
  return p;
}

LaunchInfo open_mpi(const EnvMap& env) {
  LaunchInfo l;
  l.launcher = Launcher::OpenMpi;
  l.mpi_world = true;
  l.size = int_var(env, "OMPI_COMM_WORLD_SIZE", 1, 1, true);
  l.rank = int_var(env, "OMPI_COMM_WORLD_RANK", 0, 0, true);
  l.local_rank = int_var(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 0);
  l.local_size = int_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, l.size);
  l.node_rank = int_var(env, "OMPI_COMM_WORLD_NODE_RANK", 0, 0);
  check_rank(l, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  return l;
}

LaunchInfo torchrun(const EnvMap& env) {
  LaunchInfo l;
  l.launcher = Launcher::Torchrun;
  l.size = int_var(env, "WORLD_SIZE", 1, 1, true);
  l.rank = int_var(env, "RANK", 0, 0, true);
  // Set by hand without LOCAL_*: one host.
  l.local_rank = int_var(env, "LOCAL_RANK", 0, l.rank);
  l.local_size = int_var(env, "LOCAL_WORLD_SIZE", 1, has(env, "LOCAL_RANK") ? l.local_rank + 1 : l.size);
  l.node_rank = int_var(env, "GROUP_RANK", 0, 0);
  check_rank(l, "RANK", "WORLD_SIZE");
  const std::string* addr = find(env, "MASTER_ADDR");
  const bool need = l.size > 1 || addr || has(env, "MASTER_PORT");
  if (need) {
    if (!addr || addr->empty() || !has(env, "MASTER_PORT"))
      MXDP_FAIL("RANK=", l.rank, " WORLD_SIZE=", l.size,
                " needs MASTER_ADDR and MASTER_PORT too: the address and port where rank 0 meets the others");
    l.rdzv_addr = *addr;
    l.rdzv_port = tcp_port(env, "MASTER_PORT");
    l.rdzv_origin = "MASTER_ADDR:MASTER_PORT";
    const std::string* store = find(env, "TORCHELASTIC_USE_AGENT_STORE");
    l.agent_store = store && (*store == "True" || *store == "true" || *store == "1");
    if (l.agent_store) {
      if (l.rdzv_port == 65535) MXDP_FAIL("MASTER_PORT=65535 leaves no port above it for mxdp's rendezvous (torchrun's agent holds MASTER_PORT); set MXDP_RDZV_PORT");
      l.rdzv_port += 1;
      l.rdzv_origin = "MASTER_ADDR:MASTER_PORT+1, torchrun's agent store holds MASTER_PORT";
    }
    apply_port_override(env, l);
  }
  return l;
}

LaunchInfo slurm(const EnvMap& env) {
  LaunchInfo l;
  l.launcher = Launcher::Slurm;
  const char* ntasks = first_set(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"});
  if (!ntasks) MXDP_FAIL("SLURM_PROCID is set but not SLURM_NTASKS: run mxdp as the tasks of an srun");
  l.size = int_var(env, ntasks, 1, 1, true);
  l.rank = int_var(env, "SLURM_PROCID", 0, 0, true);
  l.node_rank = int_var(env, "SLURM_NODEID", 0, 0);
  l.local_rank = int_var(env, "SLURM_LOCALID", 0, 0);
  l.local_size = l.size;  // without a tasks-per-node list: one node
  if (const char* tpn = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
    const int n = slurm_tasks_on_node(env.at(tpn), l.node_rank);
    if (n < 1) MXDP_FAIL(tpn, "='", env.at(tpn), "' has no task count for SLURM_NODEID=", l.node_rank);
    l.local_size = n;
  }
  check_rank(l, "SLURM_PROCID", ntasks);
  // srun with a PMI plugin (--mpi=pmix or pmi2) lets MPI_Init form the world.
  l.mpi_world = has(env, "PMIX_RANK") || has(env, "PMI_RANK");

  if (const std::string* a = find(env, "MASTER_ADDR"); a && !a->empty()) {
    l.rdzv_addr = *a;
    l.rdzv_origin = "MASTER_ADDR";
  } else {
    const char* list = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
    if (!list) MXDP_FAIL("Slurm set no SLURM_JOB_NODELIST, so rank 0's host is unknown; set MASTER_ADDR");
    l.rdzv_addr = slurm_first_host(env.at(list));
    l.rdzv_origin = std::string("first host of ") + list;
  }
  if (has(env, "MASTER_PORT")) {
    l.rdzv_port = tcp_port(env, "MASTER_PORT");
    l.rdzv_origin += ", MASTER_PORT";
  } else {
    const char* job_var = first_set(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
    const int job = job_var ? int_var(env, job_var, 0, 0) : 0;
    l.rdzv_port = 29500 + job % 1000;
    l.rdzv_origin += ", port 29500 + SLURM_JOB_ID mod 1000";
  }
  apply_port_override(env, l);
  return l;
}

LaunchInfo pmi(const EnvMap& env) {
  LaunchInfo l;
  l.launcher = Launcher::Pmi;
  l.mpi_world = true;
  l.size = int_var(env, "PMI_SIZE", 1, 1, true);
  l.rank = int_var(env, "PMI_RANK", 0, 0, true);
  l.local_rank = int_var(env, "MPI_LOCALRANKID", 0, 0);
  l.local_size = int_var(env, "MPI_LOCALNRANKS", 1, l.size);
  check_rank(l, "PMI_RANK", "PMI_SIZE");
  return l;
}

}  // namespace

LaunchInfo discover_launch(const EnvMap& env) {
  if (has(env, "OMPI_COMM_WORLD_SIZE") || has(env, "OMPI_COMM_WORLD_RANK")) return open_mpi(env);
  const bool torch_vars = has(env, "RANK") || has(env, "WORLD_SIZE");
  if (torch_vars && has(env, "TORCHELASTIC_RUN_ID")) return torchrun(env);
  if (has(env, "SLURM_PROCID")) return slurm(env);
  if (torch_vars) return torchrun(env);
  if (has(env, "PMI_SIZE") || has(env, "PMI_RANK")) return pmi(env);
  return {};
}

std::string LaunchInfo::describe() const {
  if (launcher == Launcher::None) return "none (one process)";
  std::ostringstream os;
  os << launcher_name(launcher) << ": rank " << rank << " of " << size << " (local " << local_rank << " of "
     << local_size << ")";
  if (rdzv_port && size > 1) os << ", rendezvous " << rdzv_addr << ":" << rdzv_port << " (" << rdzv_origin << ")";
  return os.str();
}

std::string slurm_first_host(const std::string& nodelist) {
  // The first top-level item: commas inside brackets belong to the range.
  size_t end = 0;
  for (int depth = 0; end < nodelist.size(); ++end) {
    const char c = nodelist[end];
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
  }
  const std::string item = nodelist.substr(0, end);
  const size_t open = item.find('[');
  if (open == std::string::npos) {
    if (item.empty()) MXDP_FAIL("the Slurm node list '", nodelist, "' names no host");
    return item;
  }
  const size_t close = item.find(']', open);
  if (close == std::string::npos) MXDP_FAIL("the Slurm node list '", nodelist, "' has an unclosed '['");
  const std::string ranges = item.substr(open + 1, close - open - 1);
  const std::string first = ranges.substr(0, ranges.find_first_of(",-"));  // keeps zero padding
  if (first.empty()) MXDP_FAIL("the Slurm node list '", nodelist, "' has an empty range");
  return item.substr(0, open) + first + item.substr(close + 1);
}

int slurm_tasks_on_node(const std::string& list, int node) {
  int seen = 0;
  std::istringstream is(list);
  std::string item;
  while (std::getline(is, item, ',')) {
    int count = 0, repeat = 1;
    char x = 0;
    std::istringstream it(item);
    if (!(it >> count) || count < 0) return -1;
    if (it.peek() == '(') {
      it.get();
      if (!(it >> x >> repeat) || x != 'x' || it.get() != ')' || repeat < 1) return -1;
    }
    if (node < seen + repeat) return count;
    seen += repeat;
  }
  return -1;
}

EnvMap process_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

const LaunchInfo& this_launch() {
  static const LaunchInfo info = discover_launch(process_environment());
  return info;
}

std::string launch_description() { return this_launch().describe(); }

void check_cpu_launch(const LaunchInfo& l) {
  if (l.size <= 1 || l.mpi_world) return;
  MXDP_FAIL(launcher_name(l.launcher), " started this process as rank ", l.rank, " of ", l.size,
            ", but CPU jobs of more than one rank communicate over MPI, which this launch has none of: start "
            "them with mpirun (or srun --mpi=pmix), or use --device cuda");
}

}  // namespace mxdp
