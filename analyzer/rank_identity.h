// Which global rank each process of a trace directory is, when the recorder could not tell:
// a process started without RANK/SLURM_PROCID/... (a PyTorch program passing rank and world
// size to init_process_group itself) records global rank -1. Its rank is then inferred from the
// communicators: its rank in the first root communicator (made from a unique id, not split)
// whose members include every process of the directory, marked "inferred:comm <hash>". Sources
// that disagree (RANK says 3, that communicator says 1; two processes claiming one rank) are
// reported in Process::rank_conflict, never resolved by guessing. Called once after loading.
#pragma once

#include <string>
#include <vector>

#include "schedule.h"
#include "trace_model.h"

namespace lockstep {

// Sets global_rank (when -1 and a spanning communicator says), global_rank_source (from the
// meta key, or "inferred:comm <hash>") and rank_conflict of every process.
void resolve_rank_identity(const std::vector<Process*>& procs);
void resolve_rank_identity(Schedule& s);

}  // namespace lockstep
