// lockstep ops DIR --rank R [--around N]: one rank's ops in call order.
#include <algorithm>
#include <climits>
#include <iostream>
#include <optional>

#include "analyze_common.h"
#include "commands.h"
#include "comm_index.h"
#include "exit_codes.h"
#include "seq_evidence.h"
#include "trace_validation.h"

namespace lockstep::cli {
namespace {

struct OpsArgs {
  std::string dir;
  int rank = 0;
  int64_t around = -1;
  std::string comm;
  int window = 10;
};

// One file's listing of the rank (headers.procs[i]). `notes`: what the evidence does not cover
// about this file (dropped records, a stopped recorder, a contradiction), said above the table.
// Returns the exit code: 0 listed, 2 input error, 4 listed with notes, or the seq asked for is
// unknown (its record may have been dropped).
int list_file(const OpsArgs& a, const Schedule& headers, size_t file, const std::vector<std::string>& notes) {
  const std::string& path = headers.procs[file].info.path;
  Process p;
  try {
    p = load_process_file(path);
  } catch (const LoadError& e) {
    std::cerr << "lockstep ops: " << printable(e.what()) << "\n";
    return kExitUsage;
  }
  auto roles = comm_roles(p);
  auto families = comm_families(p);
  // Where the file's records of each communicator stop being whole (comm_index.h, as analyze
  // reads them): asked only when the file is not whole to its end, or a seq is not in it.
  std::optional<Schedule> sched;
  std::optional<CommIndex> sidx;
  auto proc_comm = [&](size_t c) -> const ProcComm* {
    if (!sched) {
      sched = load_schedule_of(headers, {static_cast<int>(file)});
      sidx = build_comm_index(*sched);
    }
    if (sched->procs.size() != 1 || sidx->per_proc.empty()) return nullptr;
    const Process& info = sched->procs[0].info;
    for (size_t k = 0; k < info.comms.size() && k < sidx->per_proc[0].size(); ++k)
      if (info.comms[k].hash == p.comms[c].hash) return &sidx->per_proc[0][k];
    return nullptr;
  };
  bool any_marker = false;
  for (const SchedProcess& h : headers.procs) any_marker |= !h.info.hangs.empty();
  // The communicators --comm names (identity.h: role, commName or hash prefix); all without it.
  std::vector<bool> comm_on(p.comms.size(), a.comm.empty());
  const std::vector<int> selected = select_comms(
      a.comm, static_cast<int>(p.comms.size()), [&](int i) -> const std::string& { return roles[i]; },
      [&](int i) -> const std::string& { return families[i]; }, [&](int i) -> const Comm& { return p.comms[i]; });
  for (int c : selected) comm_on[c] = true;
  if (!a.comm.empty() && selected.empty()) {
    std::cerr << "lockstep ops: no communicator of rank " << a.rank << " matches '" << printable(a.comm) << "'; its communicators:\n";
    for (size_t c = 0; c < p.comms.size(); ++c)
      std::cerr << "  " << printable(comm_label(p.comms[c].hash, roles[c])) << "\n";
    return kExitUsage;
  }
  size_t center = p.ops.size();
  if (a.around >= 0) {
    for (size_t i = 0; i < p.ops.size() && center == p.ops.size(); ++i) {
      const Op& o = p.ops[i];
      if (o.seq != a.around || o.comm < 0) continue;
      if (comm_on[o.comm]) center = i;
    }
    if (center == p.ops.size()) {
      // A seq the size cap retired was issued: said per communicator, with what the file keeps (G7).
      // A seq past a hole in the records (dropped), or past the end of a history that does not
      // reach the process's end, is unknown (seq_evidence.h, as stacks and analyze say).
      std::vector<std::string> retired, unknown;
      for (size_t c = 0; c < p.comms.size(); ++c) {
        if (!comm_on[c]) continue;
        int64_t kept = 0, kept_first = INT64_MAX, kept_last = 0;
        for (const Op& o : p.ops)
          if (o.comm == static_cast<int>(c) && o.seq > 0) {
            ++kept;
            kept_first = std::min<int64_t>(kept_first, o.seq);
            kept_last = std::max<int64_t>(kept_last, o.seq);
          }
        const std::string label = printable(comm_label(p.comms[c].hash, roles[c]));
        const std::string note = retired_seq_text(p, p.comms[c], a.around, kept, kept_first, kept_last);
        if (!note.empty()) {
          retired.push_back(label + ": " + note);
          continue;
        }
        std::string why;
        try {
          if (const ProcComm* pc = proc_comm(c)) why = seq_unknown_why(p, *pc, a.around, any_marker);
        } catch (const LoadError& e) {
          why = "unknown: its records could not be read as analyze reads them (" + printable(e.what()) + ")\n";
        }
        if (!why.empty()) unknown.push_back(label + ": " + why.substr(0, why.size() - 1));
      }
      for (const auto& n : notes) std::cerr << "incomplete: " << printable(n) << "\n";
      if (!unknown.empty() && retired.empty()) {
        std::cerr << "lockstep ops: rank " << a.rank << "'s file holds no op with seq " << a.around
                  << (a.comm.empty() ? "" : " on comm " + printable(a.comm)) << ", and its records cannot say it never issued it\n";
        for (const auto& u : unknown) std::cerr << "  " << u << "\n";
        return kExitIncomplete;
      }
      std::cerr << "lockstep ops: rank " << a.rank << (retired.empty() ? " has no op" : "'s file holds no op")
                << " with seq " << a.around << (a.comm.empty() ? "" : " on comm " + printable(a.comm)) << "\n";
      for (const auto& r : retired) std::cerr << "  " << r << "\n";
      for (const auto& u : unknown) std::cerr << "  " << u << "\n";
      return unknown.empty() ? kExitUsage : kExitIncomplete;
    }
  }
  size_t lo = center > static_cast<size_t>(a.window) ? center - a.window : 0;
  size_t hi = std::min(p.ops.size(), center + a.window + 1);
  std::cout << "rank " << a.rank << " (" << printable(process_label(p)) << "): " << p.ops.size() << " ops";
  if (a.around < 0) std::cout << ", the last " << hi - lo;
  std::cout << "\n";
  // What the listing does not cover, before it: never a listing that looks whole when it is not.
  for (const auto& n : notes) std::cout << "  incomplete: " << printable(n) << "\n";
  // Each communicator's records as analyze reads them (comm_index.h): a hole (dropped records)
  // or a file that contradicts itself (a seq missing though nothing was dropped, seqs out of
  // call order) is said, and makes the listing incomplete (exit 4).
  bool gaps = false;
  try {
    for (size_t c = 0; c < p.comms.size(); ++c)
      if (const ProcComm* pc = proc_comm(c); pc && !pc->whole()) {
        const bool contradicts = pc->gap == GapCause::kSeqMissing || pc->gap == GapCause::kSeqOrder;
        std::cout << "  " << printable(comm_label(p.comms[c].hash, roles[c])) << ": records whole through seq "
                  << pc->complete_through_seq << " only (" << gap_cause_name(pc->gap) << "): "
                  << (contradicts ? "the file contradicts itself there (edited or damaged?): what follows is unknown\n"
                                  : "an op missing after it may have been issued and not recorded\n");
        gaps = true;
      }
  } catch (const LoadError&) {
  }
  // The communicators the listing shows, by their labels (identity.h); the column has the hash.
  std::vector<bool> listed(p.comms.size(), false);
  for (size_t i = lo; i < hi; ++i)
    if (p.ops[i].comm >= 0 && static_cast<size_t>(p.ops[i].comm) < p.comms.size()) listed[p.ops[i].comm] = true;
  for (size_t c = 0; c < p.comms.size(); ++c)
    if (listed[c]) std::cout << "  " << printable(comm_label(p.comms[c].hash, roles[c])) << "\n";
  const bool completion_known = std::any_of(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.completed; });
  std::cout << "  call      comm          seq  op [state]\n";
  for (size_t i = lo; i < hi; ++i) {
    const Op& o = p.ops[i];
    Signature sig{o.op, o.dtype, o.count, o.root, o.peer, o.redop, o.parts, classify_op(o.op)};
    std::string comm = o.comm >= 0 ? short_hash(p.comms[o.comm].hash) : "?";
    char line[64];
    std::snprintf(line, sizeof line, "%s %-9lld %-8s %8s  ", i == center ? ">" : " ", static_cast<long long>(o.call_index),
                  comm.c_str(), o.seq > 0 ? std::to_string(o.seq).c_str() : "-");
    // The progress word (identity.h), after the state when it is not plain enqueued work.
    std::string state = progress_word(o.state, o.completed, completion_known);
    if (vocab::enqueued_work(o.state) && o.state != vocab::State::Enqueued) state = vocab::name(o.state) + (", " + state);
    if (o.rc != 0) state += ", rc=" + std::to_string(o.rc);
    std::cout << line << describe_signature(sig) << "  [" << state << "]"
              << (o.thread_name.empty() ? "" : "  " + printable(o.thread_name)) << "\n";
  }
  return notes.empty() && !gaps ? kExitOk : kExitIncomplete;
}

int ops(const OpsArgs& a) {
  std::vector<size_t> files;  // every file that claims the rank
  Schedule headers;
  try {
    // Headers to find the rank's file; then that one process's rows.
    headers = load_headers(a.dir, {.use_summaries = true});
    for (size_t i = 0; i < headers.procs.size(); ++i)
      if (display_rank(headers, static_cast<int>(i)) == a.rank) files.push_back(i);
  } catch (const LoadError& e) {
    std::cerr << "lockstep ops: " << printable(e.what()) << "\n";
    explain_no_trace_file(a.dir);
    return kExitUsage;
  }
  if (files.empty()) {
    // The rank's file may be one of those the loader could not use: say which, and why.
    print_skipped(headers.skipped);
    std::cerr << "lockstep ops: no usable trace of rank " << a.rank << " in " << printable(a.dir)
              << (headers.skipped.empty() ? "" : " (its file may be one of the skipped files above)") << "\n";
    return kExitUsage;
  }
  // What the evidence does not cover about these files, decided where analyze decides it
  // (trace_validation.h): contradictions (two files claim the rank, a copied file, ...) and each
  // file's own gaps (dropped records, a stopped recorder).
  std::vector<const Process*> infos;
  for (const SchedProcess& h : headers.procs) infos.push_back(&h.info);
  const CommJoin join = join_comms(infos);
  const std::vector<EvidenceIssue> evidence = validate_evidence(infos, headers.skipped, comm_labeler(join.comms));
  std::vector<std::string> notes;
  for (const EvidenceIssue& e : evidence) {
    const bool about = std::any_of(e.procs.begin(), e.procs.end(), [&](int p) {
      return std::find(files.begin(), files.end(), static_cast<size_t>(p)) != files.end();
    });
    if (about && (e.contradictory || e.procs.size() == 1))
      notes.push_back(e.detail + (e.contradictory ? ": which file is the rank's history is unknown" : ""));
  }
  if (files.size() == 1) return list_file(a, headers, files[0], notes);
  // Several files claim the rank: each is listed, named; none is picked as the rank's.
  std::cout << "rank " << a.rank << " is claimed by " << files.size() << " files; which is its history is unknown, each is listed:\n";
  int worst = kExitUsage;
  for (size_t f : files) {
    std::cout << "\n" << printable(headers.procs[f].info.shown_path()) << ":\n";
    std::cout.flush();
    const int rc = list_file(a, headers, f, notes);
    if (rc != kExitUsage) worst = kExitIncomplete;
  }
  return worst;
}

}  // namespace

void add_ops_command(Command& app, int* exit_code) {
  auto args = std::make_shared<OpsArgs>();
  auto* sub = app.add_subcommand("ops", "List one rank's ops in call order (default: the last ones)");
  sub->footer("Exit code: 0 listed, 2 input error (no usable trace of that rank, no such seq or communicator, a seq the size cap retired; skipped files are named), 4 listed, but the rank's file is not whole (dropped records, a stopped recorder, a seq missing or out of call order) or contradicts another (two files claim the rank: each is listed), or the seq asked for is unknown (its record may have been dropped); named above the listing.");
  sub->add_option("dir", args->dir, "Trace directory")->required();
  sub->add_option("--rank", args->rank, "Global rank")->required();
  sub->add_option("--around", args->around, "Centre the listing on the op with this seq");
  sub->add_option("--comm", args->comm, "With --around: the communicator (hash prefix, role or commName)");
  sub->add_option("--window", args->window, "Ops shown on each side (default 10)");
  sub->callback([args, exit_code] { *exit_code = ops(*args); });
}

}  // namespace lockstep::cli
