// `lockstep shrink`: from a trace whose schedule can deadlock (the model checker's "deadlock" or
// "may deadlock"), a minimal schedule that deadlocks the same way: fewest ranks (re-ranked,
// communicators rebuilt), communicators, ops and smallest counts, every candidate decided by
// the model checker (analyzer/model_check.h). docs/shrink.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model_check.h"
#include "trace_model.h"

namespace lockstep::shrink {

// What makes two deadlocks the same bug (docs/shrink.md "Signature"):
//  - the verdict (deadlock / may deadlock);
//  - kind "mismatch": the first collective whose members disagree: which argument differs
//    (op_type > root > redop > dtype > count > other, the first that differs) and the sorted
//    set of op types its members issued;
//  - else kind "cycle": field "issued" when every op in the wait-for cycle was issued, else
//    "never_issued" (a rank waits for an op its peer never issues: a schedule cut short); and the wait-for cycle as a cyclic sequence of (communicator, op type),
//    consecutive steps on one communicator merged, communicators renamed c0, c1... by first
//    appearance, rotated to the smallest such sequence (so the ranks in the cycle, their number
//    and the communicators' identities may change; the op types and the cross-communicator
//    order may not);
//  - else kind "stuck": the sorted set of op types the blocked ranks are blocked in.
struct Signature {
  model::Verdict verdict = model::Verdict::kCanComplete;
  std::string kind;               // mismatch | cycle | stuck | none
  std::string field;              // mismatch: op_type | root | redop | dtype | count | other;
                                  // cycle: issued | never_issued
  std::vector<std::string> steps; // mismatch/stuck: op types; cycle: "c0 all_gather", ...
  int comms = 0;                  // cycle: distinct communicators in it
  std::string text() const;       // one line
  bool same_bug(const Signature& o) const {  // everything but the verdict
    return kind == o.kind && field == o.field && steps == o.steps && comms == o.comms;
  }
  bool operator==(const Signature& o) const { return verdict == o.verdict && same_bug(o); }
};

Signature signature_of(const lockstep::Schedule& schedule, const model::Result& result);

struct Options {
  int max_rounds = 3;  // phases are repeated while a round removes something
  std::function<void(const std::string&)> progress;  // phase lines, may be empty
};

struct Size {
  int ranks = 0, comms = 0, ops = 0, waits = 0;
  int64_t max_count = 0;
};

struct Result {
  Signature signature;             // of the original
  model::Result original_check;
  Trace minimal;                   // global ranks 0..n-1, every communicator a root communicator
  model::Result minimal_check;     // of `minimal`
  bool forced_one_stream = false;  // "may deadlock": each rank's ops put on one stream, the
                                   // serialized interleaving made real (then it deadlocks)
  Size before, after;
  std::vector<std::string> removed;  // what was removed, one line per phase ("ranks: 4094 of 4096 (...)")
  std::vector<int> kept_ranks;     // original global rank of each rank of `minimal`
  int checks = 0;                  // model checks run
  double seconds = 0;
};

// The rows of schedule.procs[proc] (its ops and waits): load_process_file of its path, or rows in
// memory. Read once per process.
using ProcessRows = std::function<Process(size_t proc)>;

// Throws std::runtime_error when the trace's schedule can complete (nothing to shrink) or
// cannot be modelled. The schedule as load_schedule gives it with LoadOptions::host_waits.
// Candidates and the minimal reproducer are subsets of the trace's rows (Result::minimal), the
// form the emitters and the trace writer take, each indexed by schedule_from_trace for its check.
Result shrink(const lockstep::Schedule& schedule, const ProcessRows& rows, const Options& options = {});
// Rows in memory (tests, shrink_bench).
Result shrink(const Trace& trace, const Options& options = {});

Size size_of(const Trace& trace);
Size size_of(const lockstep::Schedule& schedule);

}  // namespace lockstep::shrink
