// environment.cpp: DistEnvironment from torchrun-style, Slurm or Open MPI
// variables (see environment.h for the precedence).
#include "anatomy/distributed/environment.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "anatomy/core/error.h"

extern char** environ;

namespace anatomy::distributed {

namespace {

// The value of `name`, if set. A variable set to the empty string is an error:
// it is a mistake far more often than a deliberate "unset".
std::optional<std::string> lookup(const EnvMap& env, const std::string& name) {
  const auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  if (it->second.empty()) fail("{} is set but empty", name);
  return it->second;
}

bool has(const EnvMap& env, const std::string& name) { return env.count(name) != 0; }

// A decimal integer in [min, max], digits only.
int parse_int(const std::string& name, const std::string& value, int min, int max = 1 << 30) {
  bool digits = !value.empty() && value.size() <= 10;
  for (char c : value) digits = digits && c >= '0' && c <= '9';
  const long long n = digits ? std::stoll(value) : -1;
  if (!digits || n < min || n > max) {
    if (max == (1 << 30)) fail("{}={} is not an integer of at least {}", name, value, min);
    fail("{}={} is not an integer in [{}, {}]", name, value, min, max);
  }
  return static_cast<int>(n);
}

std::optional<int> int_var(const EnvMap& env, const std::string& name, int min, int max = 1 << 30) {
  const auto value = lookup(env, name);
  if (!value) return std::nullopt;
  return parse_int(name, *value, min, max);
}

int required_int(const EnvMap& env, const std::string& name, const std::string& because, int min) {
  const auto value = int_var(env, name, min);
  if (!value) fail("{} is not set ({})", name, because);
  return *value;
}

// MASTER_PORT, or the default.
int master_port(const EnvMap& env) { return int_var(env, "MASTER_PORT", 1, 65535).value_or(kDefaultMasterPort); }

// The checks every source shares, with the variable names of that source.
void check_ranks(const DistEnvironment& e, const std::string& rank_var, const std::string& size_var,
                 const std::string& local_rank_var, const std::string& local_size_var) {
  if (e.rank >= e.world_size) fail("{}={} is not below {}={}", rank_var, e.rank, size_var, e.world_size);
  if (e.local_world_size > e.world_size)
    fail("{}={} exceeds {}={}", local_size_var, e.local_world_size, size_var, e.world_size);
  if (e.local_rank >= e.local_world_size)
    fail("{}={} is not below {}={}", local_rank_var, e.local_rank, local_size_var, e.local_world_size);
  if (e.local_rank > e.rank)
    fail("{}={} exceeds {}={} (a rank is never below its local rank)", local_rank_var, e.local_rank, rank_var,
         e.rank);
}

DistEnvironment from_torchrun(const EnvMap& env) {
  DistEnvironment e;
  e.source = "torchrun";
  if (!has(env, "RANK")) fail("WORLD_SIZE is set but RANK is not (torchrun-style launches set both)");
  if (!has(env, "WORLD_SIZE")) fail("RANK is set but WORLD_SIZE is not (torchrun-style launches set both)");
  e.world_size = *int_var(env, "WORLD_SIZE", 1);
  e.rank = *int_var(env, "RANK", 0);
  // Without the local variables the ranks are taken to share one node.
  e.local_world_size = int_var(env, "LOCAL_WORLD_SIZE", 1).value_or(e.world_size);
  e.local_rank = int_var(env, "LOCAL_RANK", 0).value_or(e.rank % e.local_world_size);
  check_ranks(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  if (const auto addr = lookup(env, "MASTER_ADDR")) e.master_addr = *addr;
  else if (e.world_size > 1)
    fail("MASTER_ADDR is not set: with WORLD_SIZE={} every rank needs the host of rank 0", e.world_size);
  e.master_port = master_port(env);
  // torchrun's agent serves its own TCP store at MASTER_PORT and tells its
  // workers so: ours goes next door, at a port every rank derives alike.
  if (const auto agent = lookup(env, "TORCHELASTIC_USE_AGENT_STORE"); agent && (*agent == "True" || *agent == "1")) {
    e.store_port = e.master_port == 65535 ? 65534 : e.master_port + 1;
  }
  return e;
}

// "2(x3),1" -> 2 2 2 1: tasks per node, as Slurm abbreviates them.
std::vector<int> expand_tasks_per_node(const std::string& name, const std::string& value) {
  std::vector<int> counts;
  size_t at = 0;
  while (at <= value.size()) {
    const size_t comma = value.find(',', at);
    const std::string item = value.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const size_t paren = item.find("(x");
    int count = 0, repeat = 1;
    if (paren == std::string::npos) {
      count = parse_int(name, item, 1);
    } else {
      if (item.back() != ')') fail("{}={} is malformed (expected counts like 2(x3),1)", name, value);
      bool ok = true;
      try {
        count = parse_int(name, item.substr(0, paren), 1);
        repeat = parse_int(name, item.substr(paren + 2, item.size() - paren - 3), 1, 1 << 20);
      } catch (const Error&) {
        ok = false;
      }
      if (!ok) fail("{}={} is malformed (expected counts like 2(x3),1)", name, value);
    }
    counts.insert(counts.end(), static_cast<size_t>(repeat), count);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return counts;
}

// Whether this process is a task of an srun step. Slurm sets SLURM_STEP_ID
// (and the older SLURM_STEPID) only for steps with a real number: its batch
// step (SLURM_BATCH_SCRIPT, 0xfffffffb; 0xfffffffe before 20.11) and its
// interactive step (0xfffffffa) have none, or show as such a number or a
// negative one when a site sets them anyway.
bool in_srun_step(const EnvMap& env) {
  for (const char* name : {"SLURM_STEP_ID", "SLURM_STEPID"}) {
    const auto it = env.find(name);
    if (it == env.end()) continue;
    const std::string& v = it->second;
    bool digits = !v.empty() && v.size() <= 10;
    for (char c : v) digits = digits && c >= '0' && c <= '9';
    return digits && std::stoll(v) < 0xfffffff0LL;
  }
  return false;
}

DistEnvironment from_slurm(const EnvMap& env) {
  DistEnvironment e;
  e.source = "slurm";
  e.rank = *int_var(env, "SLURM_PROCID", 0);
  e.world_size = required_int(env, "SLURM_NTASKS", "SLURM_PROCID is set: run the tasks with srun", 1);
  if (e.world_size > 1 && !in_srun_step(env)) {
    const auto job = lookup(env, "SLURM_JOB_ID");
    fail("this process is the batch script of Slurm job {} (SLURM_NTASKS={} but no SLURM_STEP_ID of an srun step): "
         "one process where {} ranks are expected, so the others would never come: start them with srun, as in "
         "`srun anatomy train ...`, or run `anatomy launch` in the script",
         job.value_or("?"), e.world_size, e.world_size);
  }
  e.local_rank = required_int(env, "SLURM_LOCALID", "SLURM_PROCID is set: run the tasks with srun", 0);
  // This node's task count: the step's layout, the job's, or the per-node request.
  std::string local_size_var = "SLURM_NTASKS";
  e.local_world_size = e.world_size;
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const auto value = lookup(env, name);
    if (!value) continue;
    const std::vector<int> counts = expand_tasks_per_node(name, *value);
    const int node = int_var(env, "SLURM_NODEID", 0).value_or(0);
    if (node >= static_cast<int>(counts.size()))
      fail("SLURM_NODEID={} is not below the {} nodes of {}={}", node, counts.size(), name, *value);
    e.local_world_size = counts[static_cast<size_t>(node)];
    local_size_var = std::string(name) + " (this node's count)";
    break;
  }
  if (local_size_var == "SLURM_NTASKS") {
    if (const auto per_node = int_var(env, "SLURM_NTASKS_PER_NODE", 1)) {
      e.local_world_size = *per_node;
      local_size_var = "SLURM_NTASKS_PER_NODE";
    } else if (const auto nodes = int_var(env, "SLURM_NNODES", 1); nodes && *nodes > 1) {
      e.local_world_size = std::max((e.world_size + *nodes - 1) / *nodes, e.local_rank + 1);
      local_size_var = "SLURM_NTASKS / SLURM_NNODES";
    }
  }
  check_ranks(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", local_size_var);
  if (const auto addr = lookup(env, "MASTER_ADDR")) {
    e.master_addr = *addr;
  } else {
    bool found = false;
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      const auto list = lookup(env, name);
      if (!list) continue;
      e.master_addr = expand_slurm_nodelist(*list, name).front();
      found = true;
      break;
    }
    if (!found && e.world_size > 1)
      fail("Slurm run with SLURM_NTASKS={}: neither MASTER_ADDR nor SLURM_JOB_NODELIST is set", e.world_size);
  }
  e.master_port = master_port(env);
  return e;
}

DistEnvironment from_openmpi(const EnvMap& env) {
  DistEnvironment e;
  e.source = "openmpi";
  e.rank = *int_var(env, "OMPI_COMM_WORLD_RANK", 0);
  e.world_size = required_int(env, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK is set", 1);
  e.local_world_size = int_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1).value_or(e.world_size);
  e.local_rank = int_var(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0).value_or(e.rank % e.local_world_size);
  check_ranks(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
              "OMPI_COMM_WORLD_LOCAL_SIZE");
  // One node: every rank reaches rank 0 on loopback. Several: they need its host.
  if (const auto addr = lookup(env, "MASTER_ADDR")) e.master_addr = *addr;
  else if (e.local_world_size < e.world_size)
    fail("MASTER_ADDR is not set: an Open MPI run on several nodes (OMPI_COMM_WORLD_SIZE={}, {} on this node) needs "
         "the host of rank 0 (mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port> -x ANATOMY_JOB_SECRET)",
         e.world_size, e.local_world_size);
  e.master_port = master_port(env);
  return e;
}

// Appends to `out` every host of one list item ("gpu[01-04]-ib"): the text
// before the first bracket, each value of the bracket, and the rest expanded
// recursively.
void expand_item(const std::string& item, const std::string& whole, const std::string& variable,
                 std::vector<std::string>& out) {
  auto malformed = [&](const std::string& why) {
    fail("{}={} is not a Slurm node list: {}", variable, whole, why);
  };
  const size_t open = item.find('[');
  if (open == std::string::npos) {
    if (item.find(']') != std::string::npos) malformed("']' without '['");
    out.push_back(item);
    return;
  }
  const size_t close = item.find(']', open);
  if (close == std::string::npos) malformed("'[' without ']'");
  const std::string prefix = item.substr(0, open);
  const std::string ranges = item.substr(open + 1, close - open - 1);
  const std::string rest = item.substr(close + 1);
  if (prefix.find(']') != std::string::npos || ranges.find('[') != std::string::npos) malformed("nested brackets");
  if (ranges.empty()) malformed("empty brackets");
  size_t at = 0;
  while (true) {
    const size_t comma = ranges.find(',', at);
    const std::string range = ranges.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const size_t dash = range.find('-');
    const std::string low = range.substr(0, dash);
    const std::string high = dash == std::string::npos ? low : range.substr(dash + 1);
    auto number = [&](const std::string& text) {
      bool ok = !text.empty() && text.size() <= 9;
      for (char c : text) ok = ok && c >= '0' && c <= '9';
      if (!ok) malformed("'" + range + "' is not a number or a range like 01-04");
      return std::stol(text);
    };
    const long first = number(low), last = number(high);
    if (last < first) malformed("the range '" + range + "' runs backwards");
    if (last - first > 100000) malformed("the range '" + range + "' is too long");
    for (long n = first; n <= last; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < low.size()) digits.insert(0, low.size() - digits.size(), '0');  // zero padding
      expand_item(prefix + digits + rest, whole, variable, out);
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist, const std::string& variable) {
  std::vector<std::string> hosts;
  // Split at the commas outside brackets.
  int depth = 0;
  std::string item;
  auto flush = [&] {
    if (item.empty()) fail("{}={} is not a Slurm node list: an empty host name", variable, nodelist);
    expand_item(item, nodelist, variable, hosts);
    item.clear();
  };
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) fail("{}={} is not a Slurm node list: unbalanced brackets", variable, nodelist);
    if (c == ',' && depth == 0) flush();
    else if (c == ' ' || c == '\t' || c == '\n') fail("{}={} is not a Slurm node list: a space", variable, nodelist);
    else item += c;
  }
  if (depth != 0) fail("{}={} is not a Slurm node list: '[' without ']'", variable, nodelist);
  flush();
  return hosts;
}

DistEnvironment read_dist_environment(const EnvMap& env) {
  DistEnvironment e;
  if (has(env, "RANK") || has(env, "WORLD_SIZE")) e = from_torchrun(env);
  else if (has(env, "SLURM_PROCID")) e = from_slurm(env);
  else if (has(env, "OMPI_COMM_WORLD_RANK")) e = from_openmpi(env);
  if (const auto port = int_var(env, "ANATOMY_STORE_PORT", 1, 65535)) e.store_port = *port;
  if (const auto secret = lookup(env, kJobSecretVariable)) {
    if (secret->size() < kMinJobSecretLength)
      fail("{} is {} characters long: give at least {} (such as 32 random hexadecimal digits: "
           "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n'))",
           kJobSecretVariable, secret->size(), kMinJobSecretLength);
    e.job_secret = *secret;
  }
  if (const auto it = env.find("XDG_RUNTIME_DIR"); it != env.end()) e.runtime_dir = it->second;
  return e;
}

EnvMap process_environment() {
  EnvMap env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string text = *entry;
    const size_t eq = text.find('=');
    if (eq != std::string::npos) env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return env;
}

DistEnvironment read_dist_environment() { return read_dist_environment(process_environment()); }

}  // namespace anatomy::distributed
