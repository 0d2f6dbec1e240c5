// examples/common/bootstrap.h: rank discovery from the launchers' variables and the file-based
// ncclUniqueId exchange (run here as rank 0 and rank 1 of one process, on the fixture NCCL).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "common/bootstrap.h"

namespace {

namespace le = lockstep_examples;

void clear_rank_env() {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "LOCKSTEP_RENDEZVOUS_DIR", "LOCKSTEP_LAUNCH_ID"})
    unsetenv(v);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Bootstrap, ReadsTorchrunSlurmAndOpenMpiVariables) {
  clear_rank_env();
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "1", 1);
  auto w = le::world_from_env();
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  clear_rank_env();
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  w = le::world_from_env();
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_rank, 2);
  setenv("RANK", "1", 1);  // torchrun/lockstep-launch variables win
  setenv("WORLD_SIZE", "2", 1);
  w = le::world_from_env();
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.world_size, 2);
  clear_rank_env();
}

TEST(Bootstrap, MissingOrInconsistentVariablesGiveClearErrors) {
  clear_rank_env();
  EXPECT_NE(error_of([] { le::world_from_env(); }).find("set RANK and WORLD_SIZE"), std::string::npos);
  setenv("RANK", "0", 1);
  EXPECT_NE(error_of([] { le::world_from_env(); }).find("not the world size"), std::string::npos);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "2", 1);
  EXPECT_NE(error_of([] { le::world_from_env(); }).find("invalid rank 2 for world size 2"), std::string::npos);
  setenv("RANK", "x", 1);
  EXPECT_NE(error_of([] { le::world_from_env(); }).find("RANK='x' is not an integer"), std::string::npos);
  setenv("RANK", "1", 1);
  EXPECT_NE(error_of([] { le::exchange_unique_id("t"); }).find("LOCKSTEP_RENDEZVOUS_DIR is not set"), std::string::npos);
  clear_rank_env();
}

TEST(Bootstrap, RankZeroPublishesTheIdAndOthersReadTheSameBytes) {
  clear_rank_env();
  std::string dir = (std::filesystem::temp_directory_path() / ("lockstep-bootstrap-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  setenv("LOCKSTEP_RENDEZVOUS_DIR", dir.c_str(), 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "1", 1);
  // Before rank 0 publishes: rank 1 times out with a message naming the file.
  std::string err = error_of([] { le::exchange_unique_id("world", 0.05); });
  EXPECT_NE(err.find("no unique id at " + dir + "/world.id"), std::string::npos) << err;
  setenv("RANK", "0", 1);
  ncclUniqueId a = le::exchange_unique_id("world");
  EXPECT_TRUE(std::filesystem::exists(dir + "/world.id"));
  setenv("RANK", "1", 1);
  ncclUniqueId b = le::exchange_unique_id("world");
  EXPECT_EQ(std::memcmp(a.internal, b.internal, sizeof a.internal), 0);
  // A launch id keeps a later run from reading this run's file.
  setenv("LOCKSTEP_LAUNCH_ID", "next-run", 1);
  err = error_of([] { le::exchange_unique_id("world", 0.05); });
  EXPECT_NE(err.find("world.next-run.id"), std::string::npos) << err;
  std::filesystem::remove_all(dir);
  clear_rank_env();
}

}  // namespace
