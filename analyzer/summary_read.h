// What a summary-first read (trace_loader.h LoadOptions::summary_first) did not read, named in
// every output format: the collectives before each communicator's cut, known by checkpoint
// digest only, and the order across communicators there, not checked. docs/scaling.md.
#pragma once

#include <cstdint>
#include <string>

#include "analysis.h"
#include "schedule.h"

namespace lockstep {

struct UnreadSummary {
  bool summary_first = false;  // the read was asked to be summary-first
  int64_t ops_not_read = 0;    // sequenced ops in no SchedOp
  int64_t files_cut = 0;       // files read from a cut (the others whole)
  int64_t comms_cut = 0;       // communicators whose members were read from a common cut
  int64_t cut_min = 0, cut_max = 0;  // the cuts' collective ordinals (0 when none)
  Schedule::SummaryUse summaries;    // node summaries used and ignored (node_summary.h)
  // What the files prove of the collectives not read beyond their signatures' digest
  // (prove_unread); both true when nothing was cut.
  bool order_proven = true;
  std::string order_open;       // when not: why, for the evidence
  bool all_to_all_proven = true;
  std::string all_to_all_open;  // when not: why
};
UnreadSummary unread_summary(const Schedule& s, const Analysis& a);

// The checkpoint digests prove each cut communicator's collectives before its cut the same on
// every member, signature by signature (op_digest.h). Two things a full read checks there they
// do not hold:
//  - the order in which each rank issued them across communicators (an order inversion, a latent
//    deadlock the run got past): proven when every communicator with collectives has the same id
//    in every member's file and, at each cut, every member's order digest (op_digest.h
//    order_step) agrees: then every member issued every collective before the cut in the same
//    order across communicators, and no inversion hides there;
//  - an all-to-all's fields past its op and dtype (its count, its per-peer splits): proven when
//    every member's file holds one all-to-all signature on that communicator, the same, without
//    per-peer parts (SchedProcess::UnreadPrefix::all_to_all).
struct UnreadProof {
  bool order = true, all_to_all = true;
  std::string order_open, all_to_all_open;  // why not, naming a communicator and ranks
};
UnreadProof prove_unread(const Schedule& s, const CommIndex& idx);

// report_json (an object, as render_json writes it) with "key": value added as its last member,
// spliced into the text: a report of 100,000 ranks is not parsed into a DOM again (several GB).
// indent: the report's (2, or -1 for compact). report_json unchanged when it is not an object.
std::string add_json_member(std::string report_json, const std::string& key, const std::string& value_json,
                            int indent);

// "read: ..." (no newline), empty when everything was read and no node summary was found; a
// line for the node summaries used, and one for each ignored, follow the first.
std::string unread_text(const UnreadSummary& u);
// The collectives not read, "#1..1024" or "#1..(1024 to 5120)" when the cuts differ.
std::string unread_range(int64_t cut_min, int64_t cut_max);
// report_json with a "reading" object added (mode, what was not read; "text": the read line,
// empty when everything was read). indent: nlohmann's dump indent (-1: compact).
std::string add_unread_json(std::string report_json, const UnreadSummary& u, int indent = 2);

}  // namespace lockstep
