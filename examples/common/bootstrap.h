// Rank discovery and ncclUniqueId exchange for the examples and tests, the way a launcher-run
// job does it without MPI: rank and world size from the environment (lockstep-launch/torchrun:
// RANK/WORLD_SIZE, Slurm: SLURM_PROCID/SLURM_NTASKS, Open MPI: OMPI_COMM_WORLD_*), and the id
// through a file in a directory all ranks share ($LOCKSTEP_RENDEZVOUS_DIR).
// Header-only, so it builds the same against the fixture and a real NCCL.
#pragma once

#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace lockstep_examples {

struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
};

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end) throw std::runtime_error(std::string("environment variable ") + name + "='" + v + "' is not an integer");
  return int(x);
}

// Throws std::runtime_error if no launcher variables are set or they are inconsistent.
inline WorldInfo world_from_env() {
  WorldInfo w;
  if (std::getenv("RANK")) {
    w.rank = env_int("RANK", 0);
    w.world_size = env_int("WORLD_SIZE", -1);
    w.local_rank = env_int("LOCAL_RANK", w.rank);
  } else if (std::getenv("SLURM_PROCID")) {
    w.rank = env_int("SLURM_PROCID", 0);
    w.world_size = env_int("SLURM_NTASKS", -1);
    w.local_rank = env_int("SLURM_LOCALID", w.rank);
  } else if (std::getenv("OMPI_COMM_WORLD_RANK")) {
    w.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    w.world_size = env_int("OMPI_COMM_WORLD_SIZE", -1);
    w.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", w.rank);
  } else {
    throw std::runtime_error("no rank in the environment: set RANK and WORLD_SIZE (or run under lockstep-launch, "
                             "torchrun, srun or mpirun)");
  }
  if (w.world_size == -1)
    throw std::runtime_error("the rank is set in the environment but not the world size (WORLD_SIZE, SLURM_NTASKS or "
                             "OMPI_COMM_WORLD_SIZE)");
  if (w.world_size < 1 || w.rank < 0 || w.rank >= w.world_size)
    throw std::runtime_error("invalid rank " + std::to_string(w.rank) + " for world size " +
                             std::to_string(w.world_size));
  return w;
}

// Rank 0 makes the id and publishes it as $LOCKSTEP_RENDEZVOUS_DIR/<name>.id (written to a
// temporary file, then renamed, so readers never see half of it); the others poll for it.
// Under lockstep-launch the file name also carries $LOCKSTEP_LAUNCH_ID, so a file left by an
// earlier run in a reused directory is never read; other launchers need a fresh directory.
inline ncclUniqueId exchange_unique_id(const char* name, double timeout_s = 60) {
  const char* dir = std::getenv("LOCKSTEP_RENDEZVOUS_DIR");
  if (!dir || !*dir)
    throw std::runtime_error("LOCKSTEP_RENDEZVOUS_DIR is not set: it must name a directory shared by all ranks");
  WorldInfo w = world_from_env();
  std::string path = std::string(dir) + "/" + name;
  if (const char* launch = std::getenv("LOCKSTEP_LAUNCH_ID"); launch && *launch) path += std::string(".") + launch;
  path += ".id";
  ncclUniqueId id{};
  if (w.rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) throw std::runtime_error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(id.internal, sizeof id.internal);
      if (!f.good()) throw std::runtime_error("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
    return id;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    std::ifstream f(path, std::ios::binary);
    if (f.good()) {
      f.read(id.internal, sizeof id.internal);
      if (f.gcount() == sizeof id.internal) return id;
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("rank " + std::to_string(w.rank) + ": no unique id at " + path + " after " +
                               std::to_string(int(timeout_s)) + " s (is rank 0 running, with the same "
                               "LOCKSTEP_RENDEZVOUS_DIR?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace lockstep_examples
