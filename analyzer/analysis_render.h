// What the renderers of an Analysis share (analysis_text.cpp, analysis_json.cpp,
// analysis_junit.cpp, analysis_render.cpp): caps on what is listed, rank ranges, and the context
// a rendering reads (the analysis, its schedule, the details read on demand). Internal to analyzer/.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "analysis.h"

namespace lockstep::render {

inline constexpr size_t kMaxListedOdd = 64;      // odd ranks listed by number in JSON
inline constexpr size_t kMaxListedGroups = 8;    // groups of a finding listed

// Rank ranges, at most kMaxRangeSegments (identity.h) segments ("0-3,7,... (+N more)").
std::string capped_ranges(std::vector<int> r);
// "2 processes, 1 communicator, 47296 ops", and when the size cap retired rows
// "..., 47296 ops retained (72704 retired by the size cap)": the count is the files', not the job's.
std::string counts_phrase(const Analysis& a);
// What the verdict rests on when the size cap retired history: "" when nothing was retired.
std::string window_note(const Analysis& a);
// "completed", "in flight", or "issued" when the process recorded no completion at all.
std::string op_state(const Schedule& s, int proc, const SchedOp& o);
std::vector<int> ranks_of(const Schedule& s, const std::vector<int>& procs);
// The same, each rank once, ascending (files that claim one rank: the rank once).
std::vector<int> distinct_ranks_of(const Schedule& s, const std::vector<int>& procs);
// "rank 1 is behind: has not issued collective #7 on comm 3f2a9c01 yet (still running)"
std::string unproven_line(const Analysis& a, const Unproven& u);

struct Ctx {
  const Analysis& a;
  const Schedule& s;
  TraceDetails& details;
  const ReportOptions& opt;

  int rank(int proc) const { return display_rank(s, proc); }
  const GlobalComm& comm(int g) const { return a.index.comms[g]; }
  // identity.h comm_label, and how many of its ranks were traced when not all.
  std::string comm_label(int g) const {
    const GlobalComm& c = comm(g);
    std::string l = lockstep::comm_label(c.hash, c.role);
    if (c.members.size() < static_cast<size_t>(c.nranks))
      l += " (" + std::to_string(c.members.size()) + " of " + std::to_string(c.nranks) + " ranks traced)";
    return l;
  }
  // The label of a process's communicator `local` (its index in info.comms).
  std::string local_comm_label(int proc, int local) const {
    const Comm& cm = s.procs[proc].info.comms[local];
    const int g = local >= 0 && static_cast<size_t>(proc) < a.index.per_proc.size() &&
                          static_cast<size_t>(local) < a.index.per_proc[proc].size()
                      ? a.index.per_proc[proc][local].gcomm
                      : -1;
    return lockstep::comm_label(cm.hash, g < 0 ? "" : comm(g).role);
  }
  const SchedOp& sop(const Side& sd) const { return s.procs[sd.proc].ops[sd.op]; }
  // Rank ranges of many processes, at most kMaxRangeSegments segments ("0-3,7, ... (+N more)").
  std::string ranges(const std::vector<int>& procs) const {
    std::vector<int> r;
    r.reserve(procs.size());
    for (int p : procs) r.push_back(rank(p));
    return capped_ranges(r);
  }
  static std::string hex(uint64_t v) {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
    return b;
  }
  std::optional<Op> full(const Side& sd) const {
    if (sd.op < 0) return std::nullopt;
    return details.op(sd.proc, sop(sd).call_index);
  }
  std::vector<Frame> stack_of(const Side& sd) const {
    auto o = full(sd);
    if (!o) return {};
    return trim_stack(details.stack(sd.proc, o->stack_id), opt.max_frames);
  }
  // Beside stack_of(sd) (`shown`): why it is empty, or cut short by a page that could not be
  // read; "" when it is whole (trace_details.h stack_note).
  std::string stack_note(const Side& sd, const std::vector<Frame>& shown) const {
    auto o = full(sd);
    if (!o) return shown.empty() ? "(its op row could not be read again from its file)" : "";
    return lockstep::stack_note(details, sd.proc, o->stack_id, shown);
  }
  // The newest op of a process on a comm, for members that never issued the op in question.
  std::string last_on(int proc, int g) const {
    int l = a.index.local_of(g, proc);
    if (l < 0) return "not a member";
    const ProcComm& pc = a.index.per_proc[proc][l];
    const int64_t last = last_op_on_comm(pc.colls, pc.p2p);
    if (last < 0) return "issued nothing on this comm";
    const SchedOp& o = s.procs[proc].ops[last];
    return "last issued " + std::string(vocab::name(s.sigs[o.sig].op)) + " seq " + std::to_string(o.seq) + (o.completed() ? " (completed)" : "");
  }
};

}  // namespace lockstep::render
