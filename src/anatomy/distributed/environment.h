// environment.h: where this process stands in a multi-process run — its rank,
// the world's size, its rank on this node, and where the store of rank 0
// listens — read from the variables that the usual launchers set:
//
//   torchrun / anatomy launch   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//                               MASTER_ADDR, MASTER_PORT
//   Slurm (srun)                SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//                               SLURM_TASKS_PER_NODE / SLURM_NTASKS_PER_NODE,
//                               SLURM_JOB_NODELIST / SLURM_NODELIST (master: its first host)
//   Open MPI (mpirun)           OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                               OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//
// in that order of precedence; with none of them the process is a world of one
// ("single"). MASTER_ADDR and MASTER_PORT override what a launcher implies.
// Open MPI on one node (LOCAL_SIZE = SIZE) needs no MASTER_ADDR: 127.0.0.1.
//
// Under torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True) MASTER_PORT is
// the agent's own TCP store, so rank 0's store listens at MASTER_PORT + 1
// instead (MASTER_PORT - 1 for 65535); ANATOMY_STORE_PORT overrides the port
// of the store under every launcher. ANATOMY_JOB_SECRET is the secret every
// rank must know to join the store (store.h, job_secret.h).
//
// A Slurm batch script's own process (SLURM_PROCID set, SLURM_NTASKS > 1, but
// no SLURM_STEP_ID: it is the batch step, not a task of srun) is one process
// where SLURM_NTASKS are expected: it stops at once, saying to start the ranks
// with srun, rather than wait for ranks that never come.
// A malformed or inconsistent value is one Error naming the variable. How
// long to wait for another rank is the engine's option
// (EngineOptions::distributed_timeout_seconds, which the command line reads,
// ANATOMY_DIST_TIMEOUT included).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace anatomy::distributed {

inline constexpr int kDefaultMasterPort = 29500;
inline constexpr double kDefaultTimeoutSeconds = 60.0;
inline constexpr const char* kJobSecretVariable = "ANATOMY_JOB_SECRET";
inline constexpr size_t kMinJobSecretLength = 16;

struct DistEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // rank among the processes of this node (picks the GPU)
  int local_world_size = 1;  // processes on this node
  std::string master_addr = "127.0.0.1";  // host of rank 0, whose store everyone joins
  int master_port = kDefaultMasterPort;
  int store_port = 0;  // where rank 0's store listens when not MASTER_PORT (torchrun's agent has that one)
  std::string job_secret;               // ANATOMY_JOB_SECRET, or empty (see job_secret.h)
  std::string runtime_dir;              // XDG_RUNTIME_DIR, or empty: where a secret file may go
  std::string source = "single";  // "torchrun", "slurm", "openmpi" or "single"
  double timeout_seconds = kDefaultTimeoutSeconds;  // how long to wait for another rank (set by the caller)

  bool distributed() const { return world_size > 1; }
  // The port of rank 0's store.
  int store() const { return store_port > 0 ? store_port : master_port; }
  // "127.0.0.1:29500": the store's address
  std::string master() const { return master_addr + ":" + std::to_string(store()); }
};

using EnvMap = std::map<std::string, std::string>;

// The environment as `env` describes it (a pure function: the tests' entry point).
DistEnvironment read_dist_environment(const EnvMap& env);
// The same of this process's environment.
DistEnvironment read_dist_environment();
// This process's environment as a map.
EnvMap process_environment();

// The hosts of a Slurm node list, in order: "gpu[01-04,07]" -> gpu01 gpu02 gpu03
// gpu04 gpu07; "node1,node2"; "a[1-2]-ib,b7"; "rack[1-2]-n[1-2]" (every
// combination). `variable` names the list in errors.
std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist,
                                               const std::string& variable = "SLURM_JOB_NODELIST");

}  // namespace anatomy::distributed
