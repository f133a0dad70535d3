// Rank discovery from the environment (comm/launcher.h): each launcher's
// variables as that launcher sets them, written out by hand, and the answer
// worked out by hand; the precedence between launchers; malformed variables;
// and, end to end, a CPU job that torchrun's variables make a 2-rank job
// without MPI stops at once instead of training alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "comm/launcher.h"
#include "util/check.h"

namespace mxdp {
namespace {

std::string error_of(const EnvMap& env) {
  try {
    discover_launch(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Launcher, NoneIsOneRank) {
  const LaunchInfo l = discover_launch({{"HOME", "/root"}, {"PATH", "/bin"}});
  EXPECT_EQ(l.launcher, Launcher::None);
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.size, 1);
  EXPECT_FALSE(l.mpi_world);
  EXPECT_EQ(l.rdzv_port, 0);
}

TEST(Launcher, OpenMpi) {
  // mpirun -np 16 -H a:8,b:8, the 12th process (rank 11: host b, local 3).
  const LaunchInfo l = discover_launch({{"OMPI_COMM_WORLD_RANK", "11"},
                                        {"OMPI_COMM_WORLD_SIZE", "16"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"},
                                        {"OMPI_COMM_WORLD_NODE_RANK", "1"},
                                        // an allocation's variables are there too: Open MPI wins
                                        {"SLURM_PROCID", "0"},
                                        {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(l.launcher, Launcher::OpenMpi);
  EXPECT_EQ(l.rank, 11);
  EXPECT_EQ(l.size, 16);
  EXPECT_EQ(l.local_rank, 3);
  EXPECT_EQ(l.local_size, 8);
  EXPECT_EQ(l.node_rank, 1);
  EXPECT_TRUE(l.mpi_world);
  EXPECT_EQ(l.rdzv_port, 0);
}

TEST(Launcher, SlurmStep) {
  // srun -N 3 --ntasks-per-node=4 in job 123456: task 9 is on the third node, local 1.
  const LaunchInfo l = discover_launch({{"SLURM_PROCID", "9"},
                                        {"SLURM_NTASKS", "12"},
                                        {"SLURM_STEP_NUM_TASKS", "12"},
                                        {"SLURM_LOCALID", "1"},
                                        {"SLURM_NODEID", "2"},
                                        {"SLURM_TASKS_PER_NODE", "4(x3)"},
                                        {"SLURM_JOB_NODELIST", "gpu[007-009]"},
                                        {"SLURM_JOB_ID", "123456"}});
  EXPECT_EQ(l.launcher, Launcher::Slurm);
  EXPECT_EQ(l.rank, 9);
  EXPECT_EQ(l.size, 12);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 4);
  EXPECT_EQ(l.node_rank, 2);
  EXPECT_FALSE(l.mpi_world);  // no PMI plugin in the task: MPI would not span the job
  EXPECT_EQ(l.rdzv_addr, "gpu007");
  EXPECT_EQ(l.rdzv_port, 29500 + 456);  // 123456 mod 1000
}

TEST(Launcher, SlurmStepSmallerThanItsAllocation) {
  // An allocation of 8 tasks on "n1,n2"; this srun runs 3 tasks (2 on n2, 1 on n3... of its own list).
  const LaunchInfo l = discover_launch({{"SLURM_PROCID", "2"},
                                        {"SLURM_NTASKS", "8"},
                                        {"SLURM_STEP_NUM_TASKS", "3"},
                                        {"SLURM_NODEID", "1"},
                                        {"SLURM_LOCALID", "0"},
                                        {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                        {"SLURM_STEP_TASKS_PER_NODE", "2,1"},
                                        {"SLURM_JOB_NODELIST", "n[1-2]"},
                                        {"SLURM_STEP_NODELIST", "n2,n3"},
                                        {"MASTER_PORT", "40000"},
                                        {"PMIX_RANK", "2"}});
  EXPECT_EQ(l.size, 3);
  EXPECT_EQ(l.local_size, 1);
  EXPECT_EQ(l.rdzv_addr, "n2");
  EXPECT_EQ(l.rdzv_port, 40000);
  EXPECT_TRUE(l.mpi_world);  // srun --mpi=pmix
}

TEST(Launcher, SlurmMasterAddrAndPortOverride) {
  const LaunchInfo l = discover_launch({{"SLURM_PROCID", "0"},
                                        {"SLURM_NTASKS", "2"},
                                        {"SLURM_JOB_NODELIST", "a,b"},
                                        {"MASTER_ADDR", "10.1.2.3"},
                                        {"MXDP_RDZV_PORT", "31000"}});
  EXPECT_EQ(l.rdzv_addr, "10.1.2.3");
  EXPECT_EQ(l.rdzv_port, 31000);
  EXPECT_EQ(l.local_size, 2);  // no tasks-per-node list: one node
}

TEST(Launcher, Torchrun) {
  // torchrun --nnodes 2 --nproc_per_node 8, worker 13 (node 1, local 5), c10d agent store.
  const LaunchInfo l = discover_launch({{"RANK", "13"},
                                        {"WORLD_SIZE", "16"},
                                        {"LOCAL_RANK", "5"},
                                        {"LOCAL_WORLD_SIZE", "8"},
                                        {"GROUP_RANK", "1"},
                                        {"MASTER_ADDR", "node-a"},
                                        {"MASTER_PORT", "29500"},
                                        {"TORCHELASTIC_RUN_ID", "job7"},
                                        {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(l.launcher, Launcher::Torchrun);
  EXPECT_EQ(l.rank, 13);
  EXPECT_EQ(l.size, 16);
  EXPECT_EQ(l.local_rank, 5);
  EXPECT_EQ(l.local_size, 8);
  EXPECT_EQ(l.node_rank, 1);
  EXPECT_FALSE(l.mpi_world);
  EXPECT_TRUE(l.agent_store);
  EXPECT_EQ(l.rdzv_addr, "node-a");
  EXPECT_EQ(l.rdzv_port, 29501);  // the agent's store holds 29500
}

TEST(Launcher, TorchrunWithoutAgentStoreUsesMasterPort) {
  const LaunchInfo l = discover_launch({{"RANK", "1"},
                                        {"WORLD_SIZE", "2"},
                                        {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "2"},
                                        {"MASTER_ADDR", "127.0.0.1"},
                                        {"MASTER_PORT", "29511"},
                                        {"TORCHELASTIC_RUN_ID", "x"},
                                        {"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  EXPECT_FALSE(l.agent_store);
  EXPECT_EQ(l.rdzv_port, 29511);
}

TEST(Launcher, TorchrunInsideSlurmIsTorchrun) {
  // srun --ntasks-per-node=1 torchrun --nproc_per_node=8: the worker sees both.
  const LaunchInfo l = discover_launch({{"SLURM_PROCID", "1"},
                                        {"SLURM_NTASKS", "2"},
                                        {"SLURM_JOB_NODELIST", "a,b"},
                                        {"RANK", "12"},
                                        {"WORLD_SIZE", "16"},
                                        {"LOCAL_RANK", "4"},
                                        {"LOCAL_WORLD_SIZE", "8"},
                                        {"MASTER_ADDR", "a"},
                                        {"MASTER_PORT", "29500"},
                                        {"TORCHELASTIC_RUN_ID", "r"}});
  EXPECT_EQ(l.launcher, Launcher::Torchrun);
  EXPECT_EQ(l.rank, 12);
  EXPECT_EQ(l.size, 16);
}

TEST(Launcher, SlurmBeforeHandSetRank) {
  // Without torchrun's agent, a stray RANK does not hide srun's task id.
  const LaunchInfo l = discover_launch(
      {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a,b"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(l.launcher, Launcher::Slurm);
  EXPECT_EQ(l.rank, 1);
}

TEST(Launcher, BareRankAndWorldSize) {
  // RANK=1 WORLD_SIZE=2 by hand: one host, local rank = rank.
  const LaunchInfo l =
      discover_launch({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29511"}});
  EXPECT_EQ(l.launcher, Launcher::Torchrun);
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.size, 2);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 2);
  EXPECT_EQ(l.rdzv_port, 29511);
  // One rank needs no address.
  const LaunchInfo one = discover_launch({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}});
  EXPECT_EQ(one.size, 1);
  EXPECT_EQ(one.rdzv_port, 0);
}

TEST(Launcher, Pmi) {
  const LaunchInfo l = discover_launch(
      {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
  EXPECT_EQ(l.launcher, Launcher::Pmi);
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.size, 4);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 2);
  EXPECT_TRUE(l.mpi_world);
}

TEST(Launcher, MalformedVariablesAreNamed) {
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})
                .find("RANK=2 but WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("MASTER_ADDR and MASTER_PORT"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}})
                .find("MASTER_PORT=70000 is not a TCP port"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}}).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}}).find("SLURM_NTASKS"), std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).find("SLURM_JOB_NODELIST"), std::string::npos);
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "-1"}}).find("OMPI_COMM_WORLD_RANK"),
            std::string::npos);
}

TEST(Launcher, SlurmHostLists) {
  EXPECT_EQ(slurm_first_host("node1"), "node1");
  EXPECT_EQ(slurm_first_host("node1,node2"), "node1");
  EXPECT_EQ(slurm_first_host("gpu[07-09,12],cpu3"), "gpu07");
  EXPECT_EQ(slurm_first_host("gpu[12,07-09]"), "gpu12");
  EXPECT_EQ(slurm_first_host("rack[3-4]-n1"), "rack3-n1");
  EXPECT_EQ(slurm_first_host("a-b.example.org"), "a-b.example.org");
  EXPECT_THROW(slurm_first_host("gpu[07"), Error);
  EXPECT_THROW(slurm_first_host(""), Error);

  EXPECT_EQ(slurm_tasks_on_node("8", 0), 8);
  EXPECT_EQ(slurm_tasks_on_node("4(x2),3", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("4(x2),3", 1), 4);
  EXPECT_EQ(slurm_tasks_on_node("4(x2),3", 2), 3);
  EXPECT_EQ(slurm_tasks_on_node("4(x2),3", 3), -1);
  EXPECT_EQ(slurm_tasks_on_node("2,1(x3)", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("4(y2)", 0), -1);
}

TEST(Launcher, CpuJobsOfSeveralRanksNeedMpi) {
  EXPECT_NO_THROW(check_cpu_launch(discover_launch({})));
  EXPECT_NO_THROW(check_cpu_launch(discover_launch({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}})));
  EXPECT_NO_THROW(check_cpu_launch(discover_launch({{"RANK", "0"}, {"WORLD_SIZE", "1"}})));
  try {
    check_cpu_launch(discover_launch(
        {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29511"}}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 of 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MPI"), std::string::npos) << e.what();
  }
}

TEST(Launcher, DescribeNamesTheLauncher) {
  const LaunchInfo l = discover_launch({{"RANK", "0"},
                                        {"WORLD_SIZE", "2"},
                                        {"MASTER_ADDR", "127.0.0.1"},
                                        {"MASTER_PORT", "29511"},
                                        {"TORCHELASTIC_RUN_ID", "x"}});
  EXPECT_EQ(l.describe(),
            "torchrun: rank 0 of 2 (local 0 of 2), rendezvous 127.0.0.1:29511 (MASTER_ADDR:MASTER_PORT)");
  EXPECT_EQ(discover_launch({}).describe(), "none (one process)");
}

// The binary, started as rank 1 of a 2-rank torchrun job on the CPU: it must
// stop at once with the reason (it used to train alone, as a 1-rank job).
TEST(Launcher, CpuTrainOfTwoRanksWithoutMpiStops) {
  const std::string cmd =
      "env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMI_SIZE -u PMI_RANK -u SLURM_PROCID "
      "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 timeout 60 " MXDP_BINARY
      " train --device cpu --steps 1 --sample-tokens 0 --data " MXDP_SOURCE_DIR "/data/kjv.txt 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("rank 1 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("CPU jobs of more than one rank communicate over MPI"), std::string::npos) << out;
  EXPECT_EQ(out.find("step "), std::string::npos) << "it trained:\n" << out;
}

}  // namespace
}  // namespace mxdp
