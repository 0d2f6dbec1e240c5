// Whether a member's file can say it never issued a seq on a communicator: the one rule that
// `stacks`, `ops` and `timeline --text` apply to a seq a file lacks, taken from the owners of
// the evidence (comm_index.h ProcComm: where the member's records stop being whole; hang.h
// trace_end: whether its history reaches its process's end), as `analyze` takes them.
#pragma once

#include <string>

#include "comm_index.h"
#include "hang.h"
#include "text_escape.h"

namespace lockstep {

// Why a member's file may lack seq `seq` although the member issued it: a hole in its records
// of the communicator (pc: the member's ProcComm), or a history that does not reach the
// process's end (trace_end: its recorder stopped; no exit record and not seen running; or still
// running here). Empty: the file is whole to the end, so a seq it lacks was never issued. A
// record we do not have is unknown, never "not issued". A recorder's hang timeout that fired
// anywhere in the job (any_marker) proves the job stalled: then a member still running here is
// whole up to the stall, as analyze takes it (a member behind); one not seen running lost its
// history all the same. The text starts "unknown: " and ends with a newline.
inline std::string seq_unknown_why(const Process& info, const ProcComm& pc, int64_t seq, bool any_marker) {
  if (!pc.whole() && seq > pc.complete_through_seq)
    return "unknown: its records of this comm are whole through seq " + std::to_string(pc.complete_through_seq) +
           " only (" + gap_cause_name(pc.gap) + "): seq " + std::to_string(seq) + " may have been issued and not recorded\n";
  const TraceEnd end = trace_end(info);
  if (end.stopped)
    return "unknown: its recorder stopped (" + printable(end.stop_reason.substr(0, 300)) +
           "): what it issued after that is not recorded\n";
  if (end.lost || (end.live && !any_marker))
    return "unknown: its trace ends without an exit record (still running, or killed after its last flush): seq " +
           std::to_string(seq) + " may have been issued after it\n";
  return "";
}

}  // namespace lockstep
