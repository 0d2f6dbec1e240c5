// The environment variables that name a process's global and local rank: one table, read by the
// recorder (meta global_rank / global_rank_source), replay (--rank-from-env, the worker) and any
// other component. Header-only and dependency-free, so including it links nothing.
// Note for other components: examples/common/bootstrap.h (RANK/SLURM_PROCID/OMPI_COMM_WORLD_RANK,
// with their world sizes) still has its own list; switch it to this table rather than add
// another. The launcher only sets RANK/LOCAL_RANK (no list to keep in step).
#pragma once

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>

namespace lockstep {

struct RankVariable {
  const char* name;
  const char* set_by;  // for documentation and messages
};

// In the order they are consulted: the first one set to a valid rank wins.
inline constexpr RankVariable kGlobalRankVariables[] = {
    {"LOCKSTEP_RANK", "the user (overrides every launcher's)"},
    {"RANK", "torchrun, lockstep-launch"},
    {"SLURM_PROCID", "Slurm (srun)"},
    {"OMPI_COMM_WORLD_RANK", "Open MPI"},
    {"PMI_RANK", "MPICH, Intel MPI (PMI)"},
    {"PMIX_RANK", "PMIx"},
    {"MV2_COMM_WORLD_RANK", "MVAPICH2"},
};

inline constexpr RankVariable kLocalRankVariables[] = {
    {"LOCAL_RANK", "torchrun, lockstep-launch"},
    {"SLURM_LOCALID", "Slurm (srun)"},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
    {"MPI_LOCALRANKID", "MPICH, Intel MPI"},
    {"MV2_COMM_WORLD_LOCAL_RANK", "MVAPICH2"},
};

// The job's size, beside the global rank (the shrink reproducer reads them in this order).
inline constexpr RankVariable kWorldSizeVariables[] = {
    {"WORLD_SIZE", "torchrun, lockstep-launch"},
    {"SLURM_NTASKS", "Slurm (srun)"},
    {"OMPI_COMM_WORLD_SIZE", "Open MPI"},
    {"PMI_SIZE", "MPICH, Intel MPI (PMI)"},
    {"MV2_COMM_WORLD_SIZE", "MVAPICH2"},
};

// The job's size beside each global rank variable, where the launcher sets one (and the
// recorder keeps it: meta launcher_<name in lower case>). A process's global rank from `rank`
// says the job has `size` ranks.
struct RankAndSize {
  const char* rank;
  const char* size;
};
inline constexpr RankAndSize kWorldSizeOfRank[] = {
    {"RANK", "WORLD_SIZE"},
    {"SLURM_PROCID", "SLURM_NTASKS"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"PMI_RANK", "PMI_SIZE"},
};

// The meta key under which the recorder keeps a launcher variable's value: "launcher_" and the
// variable's name in lower case ("SLURM_NTASKS" -> "launcher_slurm_ntasks").
inline constexpr const char kLauncherMetaPrefix[] = "launcher_";
inline std::string launcher_meta_key(const char* variable) {
  std::string key = kLauncherMetaPrefix;
  for (const char* c = variable; *c; ++c) key += char(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
  return key;
}

// A rank value: decimal digits only, 0..INT_MAX (no sign, no spaces, no trailing text).
inline bool parse_rank_value(const char* s, int* out) {
  if (!s || *s < '0' || *s > '9') return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > INT_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

struct RankFromEnv {
  int rank = -1;                // -1: none of the variables holds a valid rank
  const char* source = "";      // the variable it came from
};

// The first variable of `table` that holds a valid rank. getenv_fn: const char*(const char*).
template <typename Table, typename Getenv>
RankFromEnv rank_from_env(const Table& table, Getenv getenv_fn) {
  RankFromEnv r;
  for (const RankVariable& v : table) {
    int value = -1;
    if (parse_rank_value(getenv_fn(v.name), &value)) {
      r.rank = value;
      r.source = v.name;
      return r;
    }
  }
  return r;
}

inline RankFromEnv global_rank_from_env() {
  return rank_from_env(kGlobalRankVariables, [](const char* n) { return std::getenv(n); });
}
inline RankFromEnv local_rank_from_env() {
  return rank_from_env(kLocalRankVariables, [](const char* n) { return std::getenv(n); });
}

// "LOCKSTEP_RANK, RANK, SLURM_PROCID, ..." for messages.
template <typename Table>
std::string rank_variable_list(const Table& table) {
  std::string s;
  for (const RankVariable& v : table) s += (s.empty() ? "" : ", ") + std::string(v.name);
  return s;
}

}  // namespace lockstep
