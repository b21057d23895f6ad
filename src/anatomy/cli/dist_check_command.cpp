// dist_check_command.cpp: `anatomy dist-check` (hidden), the multi-process
// machinery without GPUs: read the environment, rendezvous through the store,
// pass a 128-byte blob from rank 0 to every rank (as the NCCL unique id will
// travel), meet at a barrier and print "rank r of w: ok, blob <hash>". With
// --fail-rank K rank K exits with code 7 right after the rendezvous, as a
// crashed rank would (no goodbye). A hang comes in two kinds. With --hang-rank
// K rank K freezes whole: its heartbeats stop too, as a stopped process, a
// frozen host or a cut network would look; the store declares it dead once
// it has been silent for the timeout. With --stall-rank K only its main thread
// stops (its watchdog thread still sends heartbeats), as a rank stuck in a
// deadlock would: it is alive, and the others learn of it when it misses the
// barrier. Either way the other ranks end within --timeout with an error
// naming rank K.
#include <unistd.h>

#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "anatomy/cli/commands.h"
#include "anatomy/cli/engine_flags.h"
#include "anatomy/core/error.h"
#include "anatomy/core/hash.h"
#include "anatomy/distributed/store.h"

namespace anatomy::cli {

namespace {

struct DistCheckFlags {
  int fail_rank = -1;
  int hang_rank = -1;
  int stall_rank = -1;
  double timeout = 0.0;  // 0: ANATOMY_DIST_TIMEOUT, or its default
};

constexpr size_t kBlobBytes = 128;  // the size of an ncclUniqueId

}  // namespace

Command add_dist_check_command(CLI::App& app) {
  auto f = std::make_shared<DistCheckFlags>();
  app.add_option("--fail-rank", f->fail_rank, "This rank exits with code 7 after the rendezvous")
      ->check(non_negative_number());
  app.add_option("--hang-rank", f->hang_rank, "This rank freezes after the rendezvous (no heartbeats, no progress)")
      ->check(non_negative_number());
  app.add_option("--stall-rank", f->stall_rank, "This rank stops after the rendezvous but keeps its heartbeats")
      ->check(non_negative_number());
  app.add_option("--timeout", f->timeout, "Seconds to wait for the other ranks (default: ANATOMY_DIST_TIMEOUT or 60)")
      ->check(positive_number());

  return [f]() -> int {
    distributed::DistEnvironment env = distributed::read_dist_environment();
    const EngineOptions options = resolve_engine_options(EngineFlags{});  // ANATOMY_DIST_TIMEOUT, as a launcher sets it
    if (options.distributed_timeout_seconds > 0.0) env.timeout_seconds = options.distributed_timeout_seconds;
    if (f->timeout > 0.0) env.timeout_seconds = f->timeout;
    for (const auto& [flag, rank] : {std::pair{"--fail-rank", f->fail_rank}, std::pair{"--hang-rank", f->hang_rank},
                                     std::pair{"--stall-rank", f->stall_rank}})
      if (rank >= env.world_size) fail("{} {} is not a rank of this world of {}", flag, rank, env.world_size);
    const distributed::Seconds timeout(env.timeout_seconds);

    distributed::DistSession session = distributed::rendezvous(env, timeout);
    distributed::StoreClient& store = session.store();
    store.start_watchdog(timeout);

    if (env.rank == f->fail_rank) {
      fmt::print("rank {} of {}: exiting with code 7 (--fail-rank)\n", env.rank, env.world_size);
      std::fflush(stdout);
      ::_exit(7);  // as a crash: no goodbye, no destructors
    }
    if (env.rank == f->hang_rank) {
      fmt::print("rank {} of {}: freezing (--hang-rank)\n", env.rank, env.world_size);
      std::fflush(stdout);
      store.freeze_heartbeats_for_testing();
      while (true) ::pause();
    }
    if (env.rank == f->stall_rank) {
      fmt::print("rank {} of {}: stalling (--stall-rank)\n", env.rank, env.world_size);
      std::fflush(stdout);
      while (true) ::pause();  // the watchdog ends the process once the others have failed
    }

    const std::string key = "dist-check/blob";
    if (env.rank == 0) {
      std::random_device random;
      std::string blob(kBlobBytes, '\0');
      for (char& c : blob) c = static_cast<char>(random() & 0xff);
      store.set(key, blob);
    }
    const std::string blob = store.get(key, timeout);
    if (blob.size() != kBlobBytes)
      fail("rank {} received a blob of {} bytes from rank 0, not {}", env.rank, blob.size(), kBlobBytes);
    store.barrier("dist-check", timeout);
    fmt::print("rank {} of {}: ok, blob {:016x}\n", env.rank, env.world_size, fnv1a64(blob));
    std::fflush(stdout);
    session.finish();
    return 0;
  };
}

}  // namespace anatomy::cli
