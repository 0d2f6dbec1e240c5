// lockstep stacks DIR --comm C --seq N: every member's op and full stack at one point.
#include <algorithm>
#include <atomic>
#include <climits>
#include <optional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "analyze_common.h"
#include "commands.h"
#include "exit_codes.h"
#include "hang.h"
#include "identity.h"
#include "parallel_for.h"
#include "seq_evidence.h"
#include "summary_read.h"
#include "text_escape.h"
#include "trace_validation.h"

namespace lockstep::cli {
namespace {

struct StacksArgs {
  std::string dir;
  std::string comm;
  int64_t seq = 0;
  bool all_frames = false;
  bool per_rank = false;
  bool full_read = false;
};

// Members whose op, state, thread and stack are the same, as one entry: at 16,384 ranks the
// listing is the few distinct stacks with the ranks of each (as LLNL's STAT merges stack traces),
// not 16,384 copies of one. In the order of each entry's first rank.
struct Entry {
  std::vector<int> ranks;
  std::string body;  // after "rank R: "
  std::string file;  // a file that contradicts another (contradictory evidence): named, never grouped
};
void add_entry(std::vector<Entry>& out, std::map<std::string, size_t>& by_body, int rank, std::string body, bool per_rank,
               std::string file = "") {
  if (!file.empty()) {
    out.push_back({{rank}, std::move(body), std::move(file)});
    return;
  }
  auto it = per_rank ? by_body.end() : by_body.find(body);
  if (it != by_body.end()) {
    out[it->second].ranks.push_back(rank);
    return;
  }
  if (!per_rank) by_body.emplace(body, out.size());
  out.push_back({{rank}, std::move(body), ""});
}
void print_entries(const std::vector<Entry>& entries) {
  for (const Entry& e : entries) {
    // A strided group (every 8th rank of 16,384) as analyze lists ranks: the first segments and
    // how many more (--per-rank lists each).
    std::cout << "  " << ranks_phrase(e.ranks, "rank", kMaxRangeSegments);
    if (!e.file.empty()) std::cout << " (" << printable(e.file) << ", contradicted)";
    if (e.ranks.size() > 1) std::cout << " (" << e.ranks.size() << " members)";
    std::cout << ": " << e.body;
  }
}

int stacks(const StacksArgs& a) {
  // Headers first (cheap); then the rows of the matching communicators' members only (G12).
  std::optional<Schedule> loaded =
      load_or_explain("stacks", a.dir, [](const std::string& d) { return load_headers(d, {.use_summaries = true}); });
  if (!loaded) return kExitUsage;
  const Schedule& headers = *loaded;
  const CommIndex hidx = build_comm_index(headers);
  std::vector<int> matches = select_comms(
      a.comm, static_cast<int>(hidx.comms.size()), [&](int g) -> const std::string& { return hidx.comms[g].role; },
      [&](int g) -> const std::string& { return hidx.comms[g].family; }, [&](int g) -> const GlobalComm& { return hidx.comms[g]; });
  if (matches.empty()) {
    std::cerr << "lockstep stacks: no communicator matches '" << printable(a.comm) << "'; communicators:\n";
    for (auto& c : hidx.comms) std::cerr << "  " << printable(comm_label(c.hash, c.role)) << "\n";
    return kExitUsage;
  }
  if (matches.size() > 1 && match_comm(a.comm, hidx.comms[matches[0]].hash, hidx.comms[matches[0]].role,
                                        hidx.comms[matches[0]].family, hidx.comms[matches[0]].name) == CommMatch::kHashPrefix) {
    std::cerr << "lockstep stacks: '" << printable(a.comm) << "' matches " << matches.size() << " communicators; give more of the hash\n";
    return kExitUsage;
  }
  // Files that contradict each other (two files claim one rank or one comm rank, a copied file,
  // members that disagree on the size), decided where analyze decides them (trace_validation.h):
  // which file is the rank's history is unknown, so each is named and nothing is said as the rank's.
  std::vector<const Process*> infos;
  for (const SchedProcess& p : headers.procs) infos.push_back(&p.info);
  const std::vector<EvidenceIssue> evidence = validate_evidence(infos, headers.skipped, comm_labeler(hidx.comms));
  std::vector<char> contested(headers.procs.size(), 0);
  for (const EvidenceIssue& e : evidence)
    if (e.contradictory)
      for (int p : e.procs)
        if (p >= 0 && static_cast<size_t>(p) < contested.size()) contested[p] = 1;
  std::vector<int> members;
  for (int g : matches)
    for (const CommMember& m : hidx.comms[g].members) members.push_back(m.proc);
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  // What is said of each member of the shown communicators, read from one loaded schedule at a
  // time (the whole directory summary first, or the members' files in batches).
  struct MemberLine {
    int comm_rank = 0;
    int rank = 0;  // the global rank, else the file's place among the directory's headers (not the batch's)
    std::string body;
    int contested = -1;  // the header index of a file that contradicts another
  };
  struct Shown {
    GlobalComm gc;                    // members: every member read, for the untraced ones
    std::vector<MemberLine> lines;
    int64_t cut_min = INT64_MAX, cut_max = 0;  // collectives not read (summary first)
    int64_t looked_up = 0;  // members whose op was found in their unread prefix
  };
  std::vector<Shown> shown;
  for (int g : matches) {
    Shown& sh = shown.emplace_back();
    sh.gc = hidx.comms[g];
    sh.gc.members.clear();
  }
  // Ops found in a member's unread prefix by bisection (find_op_by_seq), and whether any was not.
  std::atomic<bool> lookups_failed = false;
  std::unordered_map<std::string, int> header_index;
  for (size_t i = 0; i < headers.procs.size(); ++i) header_index.emplace(headers.procs[i].info.path, static_cast<int>(i));
  std::vector<SkippedFile> skipped = headers.skipped;
  bool any = false;
  // A shown communicator in a loaded schedule's index; null: none of its members was loaded.
  auto find = [](const CommIndex& idx, const std::string& hash) -> const GlobalComm* {
    for (const GlobalComm& c : idx.comms)
      if (c.hash == hash) return &c;
    return nullptr;
  };
  // The collectives of a member's communicator that a summary-first read left unread.
  auto not_read = [](const SchedProcess& sp, int local) -> int64_t {
    return static_cast<size_t>(local) < sp.unread.size() ? sp.unread[local].collectives : 0;
  };
  bool unknown_member = false;  // a member lacks the seq and its records cannot say it never issued it
  bool any_marker = false;
  for (const SchedProcess& p : headers.procs) any_marker |= !p.info.hangs.empty();
  auto collect = [&](const Schedule& s, const CommIndex& idx) {
    for (Shown& sh : shown) {
      const GlobalComm* loaded = find(idx, sh.gc.hash);
      if (!loaded) continue;
      std::vector<const SchedOp*> hits;  // per line added here; null: said from the rows alone
      // Per line: the op is in the member's unread prefix, looked up in its file below
      // call_index lookup_below[k]; -1: not looked up.
      std::vector<int64_t> lookup_below;
      const size_t first_line = sh.lines.size();
      for (const CommMember& m : loaded->members) {
        const SchedProcess& sp = s.procs[m.proc];
        auto hp = header_index.find(sp.info.path);
        const int rank = hp == header_index.end() ? display_rank(s, m.proc) : shown_rank(headers.procs[hp->second].info, hp->second);
        sh.gc.members.push_back({m.proc, m.local, m.rank});
        const int64_t unread = not_read(sp, m.local);
        sh.cut_min = std::min(sh.cut_min, unread), sh.cut_max = std::max(sh.cut_max, unread);
        MemberLine& line = sh.lines.emplace_back();
        line.comm_rank = m.rank, line.rank = rank;
        if (hp != header_index.end() && contested[hp->second]) line.contested = hp->second;
        const SchedOp* hit = nullptr;
        for (auto* list : {&idx.of(m).colls, &idx.of(m).p2p})
          for (uint32_t i : *list)
            if (sp.ops[i].seq == a.seq) hit = &sp.ops[i];
        hits.push_back(hit);
        lookup_below.push_back(-1);
        if (hit) continue;
        if (a.seq <= unread) {
          // Before the member's cut: every op there is a collective whose seq is its ordinal
          // (the cut is proven only so), issued before the first of the rows read.
          int64_t below = kMaxCallIndex + 1;
          for (auto* list : {&idx.of(m).colls, &idx.of(m).p2p})
            for (uint32_t i : *list) below = std::min<int64_t>(below, sp.ops[i].call_index);
          lookup_below.back() = below;
          continue;
        }
        // Seqs the size cap retired were issued: said so, with what the file keeps (G7). The
        // collectives a summary-first read left unread count as kept: issued, not listed.
        const Comm& cm = sp.info.comms[m.local];
        int64_t kept = unread, kept_first = INT64_MAX, kept_last = 0;
        for (auto* list : {&idx.of(m).colls, &idx.of(m).p2p})
          for (uint32_t i : *list) {
            ++kept;
            kept_first = std::min<int64_t>(kept_first, sp.ops[i].seq);
            kept_last = std::max<int64_t>(kept_last, sp.ops[i].seq);
          }
        const std::string retired = retired_seq_text(sp.info, cm, a.seq, kept, kept_first, kept_last);
        const std::string unknown = retired.empty() ? seq_unknown_why(sp.info, idx.of(m), a.seq, any_marker) : "";
        unknown_member |= !unknown.empty();
        line.body = !retired.empty()   ? retired + "\n"
                    : !unknown.empty() ? unknown
                                       : "no op with seq " + std::to_string(a.seq) + " (issued " +
                                             std::to_string(issued_on_comm(cm, kept)) + " ops on this comm)\n";
      }
      // The op's details and stack from each file, the files in parallel, each thread with its
      // own connections: for a communicator of 16,384 ranks the opens are most of the time.
      std::vector<size_t> found;
      for (size_t k = 0; k < hits.size(); ++k)
        if (hits[k] || lookup_below[k] >= 0) found.push_back(k);
      any |= !found.empty();
      std::atomic<int64_t> looked_up = 0;
      parallel_for_with(
          found.size(), 0, [&] { return details_from_files(s); },
          [&](std::unique_ptr<TraceDetails>& details, size_t j) {
            const size_t k = found[j];
            const CommMember& m = loaded->members[k];
            const SchedOp* hit = hits[k];
            std::optional<Op> op;
            std::string what;
            bool completed = false;
            if (hit) {
              op = details->op(m.proc, hit->call_index);
              what = describe_signature(s.sigs[hit->sig]), completed = hit->completed();
            } else {
              op = find_op_by_seq(*details, m.proc, m.local, a.seq, 0, lookup_below[k] - 1);
              if (!op) {
                lookups_failed = true;
                return;
              }
              what = describe_signature(Signature{op->op, op->dtype, op->count, op->root, op->peer, op->redop, op->parts,
                                                  classify_op(op->op)});
              completed = op->completed;
              ++looked_up;
            }
            std::ostringstream body;
            body << what << "  " << progress_word(vocab::State::Enqueued, completed, s.procs[m.proc].completion_known);
            if (op && !op->thread_name.empty()) body << "  thread " << printable(op->thread_name);
            body << "\n";
            const auto raw = op ? details->stack(m.proc, op->stack_id) : std::vector<Frame>{};
            const auto frames = a.all_frames ? raw : trim_stack(raw, 32);
            for (auto& f : frames) body << "    " << (f.kind == vocab::FrameKind::Python ? "py " : "   ") << printable(format_frame(f)) << "\n";
            if (!op) body << "    (no stack recorded)\n";
            else if (const std::string note = stack_note(*details, m.proc, op->stack_id, frames); !note.empty())
              body << "    " << note << "\n";
            sh.lines[first_line + k].body = body.str();
          });
      sh.looked_up += looked_up;
    }
  };
  try {
    // A communicator of a large share of the job (a world or data-parallel one): the
    // summary-first read of the directory, node summaries where consistent, holds every file's
    // newest ops at a fraction of the cost of every row of its members. A member whose seq N lies
    // before its cut (the collectives there are not read) has that op looked up in its file by
    // bisection on call_index; if any lookup fails, every row of the members is read instead.
    bool done = false;
    if (!a.full_read && members.size() * 4 >= headers.procs.size()) {
      Schedule s = load_schedule(a.dir, {.summary_first = true, .use_summaries = true});
      collect(s, build_comm_index(s));
      if (!lookups_failed) {
        // The files listed as skipped: the headers' and the members' (as reading the members alone lists them).
        std::set<std::string> listed;
        for (int p : members) listed.insert(headers.procs[p].info.path);
        for (const SkippedFile& f : s.skipped)
          if (listed.count(f.path)) skipped.push_back(f);
        done = true;
      } else {
        for (Shown& sh : shown) {
          sh.lines.clear(), sh.gc.members.clear();
          sh.cut_min = INT64_MAX, sh.cut_max = 0, sh.looked_up = 0;
        }
        any = false;
      }
    }
    // Else, and for a small communicator, every row of the members' files, a batch of files at a
    // time: memory is one batch's rows (16,384 files of 10,000 ops at once: 4.2 GB).
    constexpr size_t kBatch = 1024;
    for (size_t b = 0; !done && b < members.size(); b += kBatch) {
      const std::vector<int> batch(members.begin() + static_cast<ptrdiff_t>(b),
                                   members.begin() + static_cast<ptrdiff_t>(std::min(members.size(), b + kBatch)));
      Schedule s = load_schedule_of(headers, batch);
      collect(s, build_comm_index(s));
      skipped.insert(skipped.end(), s.skipped.begin() + static_cast<ptrdiff_t>(std::min(s.skipped.size(), headers.skipped.size())),
                     s.skipped.end());
    }
  } catch (const LoadError& e) {
    std::cerr << "lockstep stacks: " << printable(e.what()) << "\n";
    return kExitUsage;
  }
  bool untraced = false;  // a member's op unknown: no usable file, or files that contradict
  for (Shown& sh : shown) {
    const GlobalComm& gc = sh.gc;
    std::cout << printable(comm_label(gc.hash, gc.role)) << " seq " << a.seq << " (" << plural(gc.nranks, "rank", "ranks") << "):\n";
    std::stable_sort(sh.lines.begin(), sh.lines.end(), [](const MemberLine& x, const MemberLine& y) {
      return std::tie(x.comm_rank, x.rank) < std::tie(y.comm_rank, y.rank);
    });
    std::vector<Entry> entries;
    std::map<std::string, size_t> by_body;
    std::set<int> contested_here;
    for (MemberLine& line : sh.lines) {
      if (line.contested >= 0) contested_here.insert(line.contested);
      add_entry(entries, by_body, line.rank, std::move(line.body), a.per_rank,
                line.contested >= 0 ? headers.procs[line.contested].info.shown_path() : "");
    }
    print_entries(entries);
    // The contradiction, as analyze names it: never shown as the members agreeing.
    for (const EvidenceIssue& e : evidence) {
      if (!e.contradictory ||
          std::none_of(e.procs.begin(), e.procs.end(), [&](int p) { return contested_here.count(p) > 0; }))
        continue;
      std::cout << "  contradictory: " << printable(e.detail) << ": which file is the rank's history is unknown\n";
      untraced = true;
    }
    // What was not read (the counts of ops issued above include it).
    if (sh.cut_max > 0 && sh.looked_up > 0)
      std::cout << "  read: summary first: collectives " << unread_range(sh.cut_min, sh.cut_max)
                << " not read but for seq " << a.seq << ", found in " << plural(sh.looked_up, "member's file", "members' files")
                << " by its call index; the rest known by checkpoint digest only (every member's agrees; --full-read reads them)\n";
    else if (sh.cut_max > 0)
      std::cout << "  read: summary first: collectives " << unread_range(sh.cut_min, sh.cut_max)
                << " not read, known by checkpoint digest only (every member's agrees; --full-read reads them)\n";
    // Members without a loaded file: named, never left out silently.
    std::sort(sh.gc.members.begin(), sh.gc.members.end(), [](const CommMember& x, const CommMember& y) { return x.rank < y.rank; });
    // One line, ranges elided: nranks comes from the file (up to 2^24), not from what was found.
    if (const std::vector<int> missing = untraced_ranks(sh.gc); !missing.empty()) {
      const bool one = missing.size() == 1;
      std::cout << "  " << ranks_phrase(missing, "comm rank", kMaxRangeSegments)
                << (one ? "" : " (" + std::to_string(missing.size()) + " in all)")
                << ": no usable trace file (missing, skipped or of another job): " << (one ? "its op is" : "their ops are")
                << " unknown\n";
      untraced = true;
    }
  }
  print_skipped(skipped);
  if (untraced || unknown_member) return kExitIncomplete;  // what a member did there is unknown
  return any ? kExitOk : kExitUsage;
}

}  // namespace

void add_stacks_command(Command& app, int* exit_code) {
  auto args = std::make_shared<StacksArgs>();
  auto* sub = app.add_subcommand("stacks", "Show every member's op and call stack at one sequence number of a communicator");
  sub->footer("Exit code: 0 shown, 2 input error (no such communicator, no member holds that seq: never issued, or retired by the size cap), 4 a member of the communicator has no usable trace file, or lacks the seq where its records cannot say it never issued it (a hole, a stopped recorder, no exit record; named in the listing), or its file contradicts another (two files claim one rank, a copied file: each named).");
  sub->add_option("dir", args->dir, "Trace directory")->required();
  sub->add_option("--comm", args->comm, "Communicator: hash prefix (as printed by analyze) or role")->required();
  sub->add_option("--seq", args->seq, "Sequence number on that communicator")->required();
  sub->add_flag("--all-frames", args->all_frames, "Do not trim NCCL/lockstep/libc/interpreter frames");
  sub->add_flag("--per-rank", args->per_rank,
                "One entry per rank (default: ranks whose op, state, thread and stack are the same share one entry)");
  sub->add_flag("--full-read", args->full_read,
                "Read every op row of the members' files (default for a communicator of a quarter of the ranks or more: "
                "the summary-first read, node summaries included, when it holds the seq on every member)");
  sub->callback([args, exit_code] { *exit_code = stacks(*args); });
}

}  // namespace lockstep::cli
