// The report's data: what the page draws, aggregated so that its size depends on how many
// distinct things there are to show (runs of identical ranks, distinct stacks), not on the
// number of ranks or ops. Layout of the JSON: docs/report.md "Data".
#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "json_printable.h"
#include "report.h"
#include "meta_keys.h"
#include "saturating.h"
#include "trace_loader.h"

namespace lockstep::report {

namespace {

using nlohmann::json;

// Per (rank, communicator): where the rank stands on it.
enum CellState : int {
  kAllCompleted,   // everything it issued on the comm completed
  kInFlight,       // issued ops not completed (queued behind others, or the comm is not its block)
  kBlockedHere,    // its oldest blocked op is on this comm
  kNoCompletions,  // its trace records no completions: issued only
  kFinished,       // the process exited cleanly
  kDead,           // its trace stopped (hang.h kDead)
  kNotMember,      // the rank is not in this family's communicators
  kMissing,        // no trace file for this global rank
};
const char* const kCellStates[] = {"all_completed", "in_flight", "blocked", "no_completions",
                                   "finished",      "dead",      "not_member", "missing"};

// Rank status of the whole process, plus "missing" for ranks without a file.
const char* const kRankStatuses[] = {"finished", "blocked", "no_collective", "dead", "missing", "trace_ended"};
int rank_status_index(RankStatus s) {
  switch (s) {
    case RankStatus::kFinished: return 0;
    case RankStatus::kBlocked: return 1;
    case RankStatus::kNoCollective: return 2;
    case RankStatus::kDead: return 3;
    case RankStatus::kEnded: return 5;
  }
  return 2;
}

// Ascending ranks as [first, last] spans, added in order (adjacent spans merge).
struct Spans {
  std::vector<std::pair<int, int>> spans;
  int64_t count = 0;
  void add(int lo, int n) {
    if (!spans.empty() && spans.back().second + 1 == lo)
      spans.back().second = lo + n - 1;
    else
      spans.push_back({lo, lo + n - 1});
    count += n;
  }
  // "0-7,9,12-15" with at most max_segments segments, then " (+N more)".
  std::string text(size_t max_segments) const {
    std::string out;
    int64_t shown = 0;
    for (size_t k = 0; k < spans.size(); ++k) {
      if (k == max_segments) return out + " (+" + std::to_string(count - shown) + " more)";
      auto [lo, hi] = spans[k];
      out += (k ? "," : "") + std::to_string(lo) + (hi > lo ? "-" + std::to_string(hi) : "");
      shown += hi - lo + 1;
    }
    return out;
  }
};

std::string ranges(std::vector<int> r, size_t max_segments) {
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  Spans s;
  for (int x : r) s.add(x, 1);
  return s.text(max_segments);
}

struct Builder {
  Builder(const Analysis& an, TraceDetails& d, const ReportOptions& o) : a(an), s(*an.schedule), details(d), opt(o) {}
  const Analysis& a;
  const Schedule& s;
  TraceDetails& details;
  const ReportOptions& opt;

  int world = 0;                     // global ranks 0..world-1 drawn
  std::vector<int> proc_of_rank;     // global rank -> proc, -1 = no file
  std::vector<int> file_ranks;       // ranks with a file, ascending
  std::vector<std::string> hosts;    // distinct host names, in rank order of first appearance
  std::vector<int> host_of_proc;
  // [proc][local comm] = {last issued seq, last completed seq}, -1 = none
  std::vector<std::vector<std::pair<int64_t, int64_t>>> last_seq;
  std::vector<std::vector<bool>> blocked_on;  // [proc][local comm]

  json stacks = json::array();
  std::map<std::string, int> stack_ids;  // serialized frames -> index in stacks

  int rank(int proc) const { return display_rank(s, proc); }

  void index_ranks() {
    for (size_t p = 0; p < s.procs.size(); ++p) world = std::max(world, rank(static_cast<int>(p)) + 1);
    for (auto& c : a.index.comms) world = std::max(world, c.nranks);
    proc_of_rank.assign(world, -1);
    for (size_t p = 0; p < s.procs.size(); ++p)
      if (proc_of_rank[rank(static_cast<int>(p))] < 0) proc_of_rank[rank(static_cast<int>(p))] = static_cast<int>(p);
    std::map<std::string, int> host_index;
    host_of_proc.assign(s.procs.size(), -1);
    for (int r = 0; r < world; ++r) {
      int p = proc_of_rank[r];
      if (p < 0) continue;
      file_ranks.push_back(r);
      auto [it, added] = host_index.emplace(s.procs[p].info.host, static_cast<int>(hosts.size()));
      if (added) hosts.push_back(s.procs[p].info.host);
      host_of_proc[p] = it->second;
    }
    for (size_t p = 0; p < s.procs.size(); ++p)
      if (host_of_proc[p] < 0) {
        auto [it, added] = host_index.emplace(s.procs[p].info.host, static_cast<int>(hosts.size()));
        if (added) hosts.push_back(s.procs[p].info.host);
        host_of_proc[p] = it->second;
      }
    last_seq.resize(s.procs.size());
    blocked_on.resize(s.procs.size());
    for (size_t p = 0; p < s.procs.size(); ++p) {
      const SchedProcess& sp = s.procs[p];
      last_seq[p].assign(sp.info.comms.size(), {-1, -1});
      blocked_on[p].assign(sp.info.comms.size(), false);
      for (const SchedOp& o : sp.ops) {
        if (o.comm >= last_seq[p].size()) continue;
        auto& [issued, completed] = last_seq[p][o.comm];
        issued = std::max<int64_t>(issued, o.seq);
        if (o.completed()) completed = std::max<int64_t>(completed, o.seq);
      }
    }
    for (auto& r : a.hang.ranks)
      for (auto& b : r.blocked) {
        const SchedOp& o = s.procs[r.proc].ops[b.op];
        if (o.comm < blocked_on[r.proc].size()) blocked_on[r.proc][o.comm] = true;
      }
  }

  int stack_ref(int proc, int64_t stack_id) {
    if (stack_id < 0) return -1;
    std::vector<Frame> frames = trim_stack(details.stack(proc, stack_id), opt.max_frames);
    if (frames.empty()) return -1;
    json fj = json::array();
    for (auto& f : frames) {
      bool py = f.kind == vocab::FrameKind::Python;
      fj.push_back(json::array({py ? "py" : "native", f.function, py ? f.file : f.module,
                                py ? static_cast<int64_t>(f.line) : static_cast<int64_t>(f.offset)}));
    }
    std::string key = fj.dump(-1, ' ', false, json::error_handler_t::replace);
    auto [it, added] = stack_ids.emplace(key, static_cast<int>(stacks.size()));
    if (added) stacks.push_back(std::move(fj));
    return it->second;
  }

  std::string role_of(int proc, int local) const {
    int l = local;
    if (proc < static_cast<int>(a.index.per_proc.size()) && l >= 0 &&
        l < static_cast<int>(a.index.per_proc[proc].size())) {
      int g = a.index.per_proc[proc][l].gcomm;
      if (g >= 0) return a.index.comms[g].role;
    }
    return "?";
  }

  // ---- verdict and evidence ----

  json evidence() {
    json e;
    Spans read, missing;  // from the ranks with a file: world can be 2^24
    int next = 0;
    for (int r : file_ranks) {
      if (r > next) missing.add(next, r - next);
      read.add(r, 1);
      next = r + 1;
    }
    if (next < world) missing.add(next, world - next);
    e["world"] = world;
    e["processes"] = s.procs.size();
    e["ranks_read"] = {{"count", read.count}, {"ranges", read.text(opt.max_range_segments)}};
    e["missing_ranks"] = {{"count", missing.count}, {"ranges", missing.text(opt.max_range_segments)}};
    e["total_ops"] = a.total_ops;
    int64_t unsequenced = 0;
    for (auto& p : s.procs) unsequenced += p.unsequenced_ops;
    e["unsequenced_ops"] = unsequenced;

    json dropped = json::array(), stopped = json::array();
    size_t n_dropped = 0, n_stopped = 0;
    for (size_t p = 0; p < s.procs.size(); ++p) {
      const Process& info = s.procs[p].info;
      if (info.dropped_records > 0 && n_dropped++ < opt.max_list)
        dropped.push_back({{"rank", rank(static_cast<int>(p))}, {"records", info.dropped_records}});
      auto st = info.meta.find(schema::meta::kRecorderStopped);
      if (st != info.meta.end() && n_stopped++ < opt.max_list) {
        auto detail = info.meta.find(schema::meta::kRecorderStoppedDetail);
        stopped.push_back({{"rank", rank(static_cast<int>(p))},
                           {"reason", st->second},
                           {"detail", detail == info.meta.end() ? "" : detail->second}});
      }
    }
    e["dropped"] = {{"count", n_dropped}, {"ranks", dropped}};
    e[schema::meta::kRecorderStopped] = {{"count", n_stopped}, {"ranks", stopped}};

    json skipped = json::array();
    for (size_t i = 0; i < s.skipped.size() && i < opt.max_list; ++i)
      skipped.push_back({{"path", s.skipped[i].path}, {"reason", s.skipped[i].reason}});
    e["skipped"] = {{"count", s.skipped.size()}, {"files", skipped}};

    json partial = json::array();  // communicators some of whose members have no trace
    size_t n_partial = 0;
    for (auto& c : a.index.comms)
      if (c.members.size() < static_cast<size_t>(c.nranks) && n_partial++ < opt.max_list)
        partial.push_back({{"hash", c.hash}, {"role", c.role}, {"nranks", c.nranks}, {"traced", c.members.size()}});
    e["partial_comms"] = {{"count", n_partial}, {"comms", partial}};

    json warnings = json::array();
    for (size_t i = 0; i < a.index.warnings.size() && i < opt.max_list; ++i) warnings.push_back(a.index.warnings[i]);
    e["warnings"] = {{"count", a.index.warnings.size()}, {"items", warnings}};

    // The analyzer's own evidence issues: the one definition of "incomplete" (what analyze and
    // check exit 4 on). The page's lists above add detail; they never make it complete.
    // One row per kind and text: 4,096 ranks killed read "0-4095 | trace ends without ...".
    const std::vector<EvidenceGroup> groups = group_evidence(a.evidence);
    json issues = json::array();
    for (size_t i = 0; i < groups.size() && i < opt.max_list; ++i) {
      const EvidenceGroup& g = groups[i];
      issues.push_back({{"kind", evidence_kind_name(g.kind)},
                        {"ranks", ranges(g.ranks, opt.max_range_segments)},
                        {"detail", g.what}});
    }
    e["issues"] = {{"count", groups.size()}, {"issues", a.evidence.size()}, {"items", issues}};

    // NCCL's profiler plugin: the calls the interposer missed (analyzer/coverage.h).
    e["coverage"] = json::parse(coverage_json(s, a.coverage));
    return e;
  }

  // The analyzer's verdict (Analysis::verdict, the one analyze and check exit on), in the page's
  // words: divergent and hang are "problems".
  json verdict() {
    json kinds = json::array();
    if (!a.divergences.empty()) kinds.push_back("divergence");
    if (!a.inversions.empty()) kinds.push_back("order_inversion");
    if (a.hang.hung) kinds.push_back("hang");
    std::string state;
    switch (a.verdict()) {
      case Verdict::kDivergent:
      case Verdict::kHang: state = "problems"; break;
      case Verdict::kIncomplete: state = "incomplete"; break;
      case Verdict::kBehind: state = "behind"; break;
      case Verdict::kClean: state = "clean"; break;
    }
    std::map<std::string, int> counts;
    for (auto& r : a.hang.ranks) ++counts[status_name(r.status)];
    return {{"state", state},
            {"summary", summary_line(a)},
            {"evidence_incomplete", a.incomplete()},
            {"problems", kinds},
            {"findings", a.divergences.size() + a.inversions.size()},
            {"hung", a.hang.hung},
            {"hang_timeout_fired", a.hang.any_marker},
            {"cycles", a.hang.cycles.size()},
            {"rank_status", counts}};
  }

  // ---- where every rank stands ----

  json ranks_row() {
    json runs = json::array();
    auto key = [&](int r) -> std::pair<int, int> {
      int p = proc_of_rank[r];
      if (p < 0) return {-1, 4};
      return {host_of_proc[p], rank_status_index(a.hang.ranks[p].status)};
    };
    std::pair<int, int> last{-2, -2};
    auto add = [&](int n, std::pair<int, int> k) {
      if (!runs.empty() && k == last)
        runs.back()[0] = runs.back()[0].get<int>() + n;
      else
        runs.push_back({n, k.first, k.second});
      last = k;
    };
    // Ranks without a file share one key: walked in runs (world can be 2^24).
    int next = 0;
    for (int r : file_ranks) {
      if (r > next) add(r - next, {-1, 4});
      add(1, key(r));
      next = r + 1;
    }
    if (next < world) add(world - next, {-1, 4});
    return {{"statuses", kRankStatuses}, {"runs", runs}};
  }

  int cell_state(int proc, int local) const {
    const RankHang& h = a.hang.ranks[proc];
    if (h.status == RankStatus::kDead) return kDead;
    if (h.status == RankStatus::kFinished) return kFinished;
    if (blocked_on[proc][local]) return kBlockedHere;
    if (!s.procs[proc].completion_known) return kNoCompletions;
    auto [issued, completed] = last_seq[proc][local];
    return issued > completed ? kInFlight : kAllCompleted;
  }

  json families() {
    std::set<int> finding_comms;  // gcomms of every divergence and inversion
    for (auto* list : {&a.divergences, &a.inversions})
      for (const Divergence& d : *list)
        for (int g : {d.gcomm, d.gcomm_b})
          if (g >= 0) finding_comms.insert(g);
    std::map<std::string, std::vector<int>> by_family;  // family -> gcomms, in index order
    std::vector<std::string> order;
    for (size_t g = 0; g < a.index.comms.size(); ++g) {
      std::string f = a.index.comms[g].family;
      if (!by_family.count(f)) order.push_back(f);
      by_family[f].push_back(static_cast<int>(g));
    }
    json out = json::array();
    for (auto& f : order) {
      const std::vector<int>& gs = by_family[f];
      using Cell = std::tuple<int64_t, int64_t, int>;  // issued, completed, state
      // Sparse: a rank's cell is its first member's standing, else kNotMember (a file) or
      // kMissing (none). world comes from the files' nranks (up to 2^24), and a directory can
      // hold many families: ranks are walked in runs, never one by one.
      std::map<int, Cell> member_cells;
      json comms = json::array();
      std::vector<std::pair<int, json>> ranked_comms;  // interest, entry
      for (int g : gs) {
        const GlobalComm& c = a.index.comms[g];
        int64_t lo = INT64_MAX, hi = -1;
        std::set<int> states;
        for (auto& m : c.members) {
          int r = rank(m.proc);
          auto [issued, completed] = last_seq[m.proc][m.local];
          int st = cell_state(m.proc, m.local);
          member_cells.emplace(r, Cell{issued, completed, st});
          lo = std::min(lo, issued);
          hi = std::max(hi, issued);
          states.insert(st);
        }
        // Members that have no file: their global ranks are unknown, the count is what we have.
        // A communicator that holds a finding outranks every other ("unusual first"), the first
        // finding's before the rest: a table cut at max_list must not drop it.
        const int finding = finding_comms.count(g) ? (a.first && (a.first->gcomm == g || a.first->gcomm_b == g) ? 16 : 8) : 0;
        int interest = finding + (hi != lo) * 4 + (states.count(kBlockedHere) || states.count(kDead)) * 2 +
                       (c.members.size() < static_cast<size_t>(c.nranks));
        json st = json::array();
        for (int x : states) st.push_back(kCellStates[x]);
        ranked_comms.push_back({-interest, json{{"hash", c.hash},
                                                {"role", c.role},
                                                {"nranks", c.nranks},
                                                {"traced", c.members.size()},
                                                {"min_issued", c.members.empty() ? -1 : lo},
                                                {"max_issued", hi},
                                                {"states", st},
                                                {"finding", finding > 0}}});
      }
      std::stable_sort(ranked_comms.begin(), ranked_comms.end(),
                       [](auto& x, auto& y) { return x.first < y.first; });
      for (size_t i = 0; i < ranked_comms.size() && i < opt.max_list; ++i) comms.push_back(ranked_comms[i].second);

      json runs = json::array();
      std::map<Cell, Spans> groups;
      int64_t max_issued = -1;
      Cell last{-2, -2, -1};
      auto add_run = [&](int lo, int n, const Cell& c) {
        auto [issued, completed, st] = c;
        if (!runs.empty() && c == last)
          runs.back()[0] = runs.back()[0].get<int>() + n;
        else
          runs.push_back({n, issued, completed, st});
        last = c;
        if (st != kNotMember) groups[c].add(lo, n);
        max_issued = std::max(max_issued, issued);
      };
      // Ranks whose cell can be other than kMissing: those with a file, and members.
      std::vector<int> points = file_ranks;
      for (auto& [r, c] : member_cells) points.push_back(r);
      std::sort(points.begin(), points.end());
      points.erase(std::unique(points.begin(), points.end()), points.end());
      const Cell missing{-1, -1, kMissing};
      int next = 0;
      for (int r : points) {
        if (r > next) add_run(next, r - next, missing);
        auto it = member_cells.find(r);
        add_run(r, 1, it != member_cells.end() ? it->second : proc_of_rank[r] < 0 ? missing : Cell{-1, -1, kNotMember});
        next = r + 1;
      }
      if (next < world) add_run(next, world - next, missing);
      std::vector<std::pair<Cell, Spans>> gl(groups.begin(), groups.end());
      std::stable_sort(gl.begin(), gl.end(), [](auto& x, auto& y) { return x.second.count > y.second.count; });
      json gj = json::array();
      for (size_t i = 0; i < gl.size() && i < opt.max_list; ++i) {
        auto [issued, completed, st] = gl[i].first;
        gj.push_back({{"issued", issued},
                      {"completed", completed},
                      {"state", kCellStates[st]},
                      {"count", gl[i].second.count},
                      {"ranks", gl[i].second.text(opt.max_range_segments)}});
      }
      out.push_back({{"family", f},
                     {"comms", {{"count", gs.size()}, {"list", comms}}},
                     {"max_issued", max_issued},
                     {"runs", runs},
                     {"groups", {{"count", gl.size()}, {"list", gj}}}});
    }
    return out;
  }

  // ---- divergence ladders ----

  json op_json(int proc, const Op& o) {
    json j = {{"ci", o.call_index}, {"seq", o.seq},     {"op", o.op},       {"dtype", o.dtype},
              {"count", o.count},   {"root", o.root},   {"peer", o.peer},   {"redop", o.redop},
              {"state", o.completed ? "completed" : (s.procs[proc].completion_known ? "in flight" : "issued")},
              {"role", o.comm >= 0 ? role_of(proc, o.comm) : "?"},
              {"comm", o.comm >= 0 && o.comm < static_cast<int>(s.procs[proc].info.comms.size())
                           ? short_hash(s.procs[proc].info.comms[o.comm].hash)
                           : ""},
              {"st", stack_ref(proc, o.stack_id)}};
    if (!o.parts.empty()) {
      std::string parts;
      for (auto& p : o.parts) {
        if (!parts.empty()) parts += " ";
        parts += std::string(vocab::name(p.op)) + (p.peer >= 0 ? " r" + std::to_string(p.peer) : "") + ":" + std::to_string(p.count);
      }
      j["parts"] = parts;
    }
    return j;
  }

  static const char* field_of(FindingKind k) {
    switch (k) {
      case FindingKind::kOpType: return "op";
      case FindingKind::kDtype: case FindingKind::kP2PDtype: return "dtype";
      case FindingKind::kCount: case FindingKind::kP2PCount: case FindingKind::kP2PPairing: return "count";
      case FindingKind::kRoot: return "root";
      case FindingKind::kRedOp: return "redop";
      case FindingKind::kGroupContents: case FindingKind::kAllToAllSplit: return "parts";
      default: return "";
    }
  }

  // One lane: the ops of a process around `at` (a call index), or its newest ops when it never
  // issued the op in question.
  json lane(const Side& sd, int gcomm, bool odd, const std::vector<int64_t>& marks) {
    int p = sd.proc;
    json l = {{"rank", rank(p)}, {"host", host_of_proc[p]}, {"comm_rank", sd.comm_rank}, {"odd", odd},
              {"issued", sd.op >= 0}};
    std::vector<Op> ops;
    int at = -1;
    if (sd.op >= 0) {
      int64_t ci = s.procs[p].ops[sd.op].call_index;
      ops = details.ops_between(p, 0, ci - 1, opt.ops_before, true);
      std::vector<Op> after = details.ops_between(p, ci, INT64_MAX, opt.ops_after + 1, false);
      at = static_cast<int>(ops.size());
      ops.insert(ops.end(), after.begin(), after.end());
    } else {
      ops = details.ops_between(p, 0, INT64_MAX, opt.ops_before, true);
      int l2 = a.index.local_of(gcomm, p);
      l["last_on_comm"] = l2 >= 0 ? last_seq[p][l2].first : -1;
    }
    json oj = json::array(), mj = json::array();
    for (size_t i = 0; i < ops.size(); ++i) {
      oj.push_back(op_json(p, ops[i]));
      for (size_t m = 0; m < marks.size(); ++m)
        if (marks[m] >= 0 && ops[i].call_index == marks[m]) mj.push_back({i, m});
    }
    l["ops"] = oj;
    l["at"] = at;
    l["marks"] = mj;  // [index in ops, 0 = this finding's op, 1 = the other comm's (inversions)]
    return l;
  }

  json finding(const Divergence& d) {
    const GlobalComm& c = a.index.comms[d.gcomm];
    std::set<int> odd(d.odd.begin(), d.odd.end());
    std::set<uint32_t> seqs;
    for (auto& sd : d.sides)
      if (sd.op >= 0) seqs.insert(s.procs[sd.proc].ops[sd.op].seq);
    json j = {{"kind", kind_name(d.kind)}, {"field", field_of(d.kind)}, {"comm", c.hash},
              {"role", c.role},            {"nranks", c.nranks},        {"ordinal", d.ordinal},
              {"seq", seqs.size() == 1 ? json(*seqs.begin()) : json(nullptr)},
              {"detail", d.detail},        {"first", &d == a.first}};
    json oddr = json::array();
    for (int p : d.odd) oddr.push_back(rank(p));
    j["odd_ranks"] = oddr;
    // Lanes: odd sides and sides that never issued it first, then up to three of the majority
    // (all sides when nobody is odd: a point-to-point pair, an inversion's two ranks).
    std::vector<size_t> pick;
    for (size_t i = 0; i < d.sides.size(); ++i)
      if (odd.count(d.sides[i].proc) || d.sides[i].op < 0) pick.push_back(i);
    size_t odd_lanes = opt.max_lanes > 3 ? opt.max_lanes - 3 : 1;
    if (pick.size() > odd_lanes) pick.resize(odd_lanes);
    size_t lanes_max = pick.empty() ? opt.max_lanes : std::min(opt.max_lanes, pick.size() + 3);
    for (size_t i = 0; i < d.sides.size() && pick.size() < lanes_max; ++i)
      if (std::find(pick.begin(), pick.end(), i) == pick.end()) pick.push_back(i);
    std::sort(pick.begin(), pick.end(), [&](size_t x, size_t y) { return rank(d.sides[x].proc) < rank(d.sides[y].proc); });
    json lanes = json::array();
    for (size_t i : pick) {
      const Side& sd = d.sides[i];
      std::vector<int64_t> marks = {sd.op >= 0 ? s.procs[sd.proc].ops[sd.op].call_index : -1, -1};
      if (d.kind == FindingKind::kOrderInversion && i < d.sides_b.size() && d.sides_b[i].op >= 0)
        marks[1] = s.procs[d.sides_b[i].proc].ops[d.sides_b[i].op].call_index;
      lanes.push_back(lane(sd, d.gcomm, odd.count(sd.proc) > 0, marks));
    }
    j["lanes"] = lanes;
    j["more_sides"] = std::max(d.members, d.sides.size()) - pick.size();
    if (d.kind == FindingKind::kDigestMismatch) {
      // No ops to draw (the cap retired them) and no majority to count: every member is on one of
      // the sides, each named by the digest its checkpoints hold after collective #ordinal.
      json sides = json::array();
      for (size_t i = 0; i < d.groups.size() && i < opt.max_lanes; ++i) {
        std::vector<int> rk;
        for (int p : d.groups[i].procs) rk.push_back(rank(p));
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(d.groups[i].digest));
        sides.push_back({{"ranks", ranges(rk, opt.max_range_segments)}, {"count", rk.size()},
                         {"digest", hex}, {"odd", d.groups[i].odd}});
      }
      j["digest_sides"] = {{"count", d.groups.size()}, {"list", sides}};
      j["more_sides"] = 0;
    }
    // Exact: ops compared one by one in the retained window; digest: retired history located by
    // checkpoint (ordinal_first..ordinal), no ops to show.
    j["evidence"] = d.kind == FindingKind::kDigestMismatch ? "digest" : "exact";
    if (d.kind == FindingKind::kDigestMismatch) j["ordinal_first"] = d.ordinal_first;
    if (d.kind == FindingKind::kOrderInversion) {
      const GlobalComm& b = a.index.comms[d.gcomm_b];
      j["comm_b"] = b.hash;
      j["role_b"] = b.role;
      j["ordinal_b"] = d.ordinal_b;
    }
    return j;
  }

  json findings() {
    std::vector<const Divergence*> all;
    if (a.first) all.push_back(a.first);
    for (auto& d : a.divergences)
      if (&d != a.first) all.push_back(&d);
    for (auto& d : a.inversions)
      if (&d != a.first) all.push_back(&d);
    json out = json::array();
    for (size_t i = 0; i < all.size() && i < opt.max_findings; ++i) out.push_back(finding(*all[i]));
    return {{"count", all.size()}, {"list", out}};
  }

  // ---- wait-for graph ----

  json wait_graph() {
    std::set<int> in_cycle;
    std::set<std::pair<int, int>> cycle_edges;
    for (auto& cyc : a.hang.cycles)
      for (auto& h : cyc.hops) {
        in_cycle.insert(h.proc);
        cycle_edges.insert({h.proc, h.waits_for});
      }
    // Edges aggregated by (target, communicator family, op, seq); sources in a cycle stay single.
    struct Agg {
      std::vector<int> sources;
      std::set<int> gcomms;
      std::string reason;
    };
    using Key = std::tuple<int, int, std::string, uint32_t, std::string>;  // src (-1: grouped), dst, family, seq, op
    std::map<Key, Agg> agg;
    for (auto& r : a.hang.ranks)
      for (auto& b : r.blocked) {
        const SchedOp& o = s.procs[r.proc].ops[b.op];
        int l = o.comm;
        int g = l < static_cast<int>(a.index.per_proc[r.proc].size()) ? a.index.per_proc[r.proc][l].gcomm : -1;
        std::string fam = g >= 0 ? a.index.comms[g].family : "?";
        for (auto& w : b.waits) {
          int src = in_cycle.count(r.proc) ? r.proc : -1;
          Agg& x = agg[Key{src, w.proc, fam, o.seq, std::string(vocab::name(s.sigs[o.sig].op))}];
          x.sources.push_back(r.proc);
          if (g >= 0) x.gcomms.insert(g);
          if (x.reason.empty()) x.reason = w.reason;
        }
      }
    std::vector<std::pair<Key, Agg>> edges(agg.begin(), agg.end());
    auto is_cycle = [&](const std::pair<Key, Agg>& e) {
      return std::get<0>(e.first) >= 0 && cycle_edges.count({std::get<0>(e.first), std::get<1>(e.first)});
    };
    std::stable_sort(edges.begin(), edges.end(), [&](auto& x, auto& y) {
      if (is_cycle(x) != is_cycle(y)) return is_cycle(x);
      return x.second.sources.size() > y.second.sources.size();
    });
    size_t total = edges.size();
    size_t keep = 0;
    while (keep < edges.size() && (keep < opt.max_graph_edges || is_cycle(edges[keep]))) ++keep;
    edges.resize(keep);

    json nodes = json::array();
    std::map<std::string, int> node_ids;
    auto node_for = [&](const std::vector<int>& procs) {
      std::vector<int> rk;
      std::set<int> hs;
      for (int p : procs) rk.push_back(rank(p)), hs.insert(host_of_proc[p]);
      std::string key = ranges(rk, SIZE_MAX);
      auto [it, added] = node_ids.emplace(key, static_cast<int>(nodes.size()));
      if (added) {
        std::set<int> st;
        for (int p : procs) st.insert(rank_status_index(a.hang.ranks[p].status));
        nodes.push_back({{"ranks", ranges(rk, opt.max_range_segments)},
                         {"count", rk.size()},
                         {"rank", rk.size() == 1 ? json(rk[0]) : json(nullptr)},
                         {"host", hs.size() == 1 ? *hs.begin() : -1},
                         {"hosts", hs.size()},
                         {"status", st.size() == 1 ? kRankStatuses[*st.begin()] : "mixed"},
                         {"cycle", procs.size() == 1 && in_cycle.count(procs[0]) > 0}});
      }
      return it->second;
    };
    for (int p : in_cycle) node_for({p});
    json ej = json::array();
    for (auto& [k, x] : edges) {
      int from = node_for(x.sources);
      int to = node_for({std::get<1>(k)});
      std::string comm = x.gcomms.size() == 1 ? short_hash(a.index.comms[*x.gcomms.begin()].hash)
                                              : std::to_string(x.gcomms.size()) + " comms";
      ej.push_back({{"from", from},
                    {"to", to},
                    {"family", std::get<2>(k)},
                    {"comm", comm},
                    {"seq", std::get<3>(k)},
                    {"op", std::get<4>(k)},
                    {"sources", x.sources.size()},
                    {"cycle", is_cycle({k, x})},
                    {"reason", x.reason}});
    }
    json cycles = json::array();
    for (auto& cyc : a.hang.cycles) {
      json hops = json::array();
      for (auto& h : cyc.hops) {
        const SchedOp& o = s.procs[h.proc].ops[h.op];
        hops.push_back({{"rank", rank(h.proc)},
                        {"role", role_of(h.proc, o.comm)},
                        {"comm", short_hash(s.procs[h.proc].info.comms[o.comm].hash)},
                        {"seq", o.seq},
                        {"op", s.sigs[o.sig].op},
                        {"waits_for", rank(h.waits_for)}});
      }
      cycles.push_back({{"communicators", cyc.comms}, {"hops", hops}});
    }
    json groups = json::array();
    for (size_t i = 0; i < a.hang.groups.size() && i < opt.max_list; ++i) {
      std::vector<int> rk;
      for (int p : a.hang.groups[i].procs) rk.push_back(rank(p));
      groups.push_back({{"ranks", ranges(rk, opt.max_range_segments)}, {"count", rk.size()},
                        {"summary", a.hang.groups[i].summary}});
    }
    return {{"nodes", nodes},
            {"edges", ej},
            {"edges_total", total},
            {"cycles", cycles},
            {"groups", {{"count", a.hang.groups.size()}, {"list", groups}}}};
  }

  // ---- timeline around the hang ----

  json timeline(const json& findings_json) {
    std::vector<int> procs;
    auto add = [&](int p) {
      if (p >= 0 && procs.size() < opt.timeline_ranks && std::find(procs.begin(), procs.end(), p) == procs.end())
        procs.push_back(p);
    };
    for (auto& cyc : a.hang.cycles)
      for (auto& h : cyc.hops) add(h.proc);
    if (!findings_json["list"].empty())
      for (auto& l : findings_json["list"][0]["lanes"]) {
        int r = l["rank"].get<int>();
        add(r < world ? proc_of_rank[r] : -1);
      }
    for (auto& r : a.hang.ranks)
      if (r.status == RankStatus::kBlocked || r.status == RankStatus::kDead) add(r.proc);
    for (size_t p = 0; p < s.procs.size(); ++p) add(static_cast<int>(p));
    std::sort(procs.begin(), procs.end(), [&](int x, int y) { return rank(x) < rank(y); });

    json lanes = json::array();
    int64_t t_min = INT64_MAX, t_max = INT64_MIN;
    bool aligned = true;
    std::vector<std::pair<int, std::vector<Op>>> got;
    for (int p : procs) {
      const Process& info = s.procs[p].info;
      const trace_file::TextInt start_wall = meta_int(info, schema::meta::kStartWallNs), start_mono = meta_int(info, schema::meta::kStartMonoNs);
      int64_t wall = start_wall.value, mono = start_mono.value;
      if (!start_wall.integer() || !start_mono.integer()) aligned = false, wall = mono = 0;
      // Clock values from an untrusted file: saturating arithmetic (saturating.h).
      int64_t shift = sat_sub(wall, mono);
      std::vector<Op> ops = details.ops_between(p, 0, INT64_MAX, opt.timeline_ops, true);
      int64_t end = info.last_flush_mono_ns;
      json oj = json::array();
      for (auto& o : ops) {
        int64_t t0 = sat_add(o.issue_mono_ns, shift);
        int64_t t1 = sat_add(o.completed && o.complete_mono_ns >= o.issue_mono_ns ? o.complete_mono_ns : std::max(end, o.issue_mono_ns), shift);
        t_min = std::min(t_min, t0);
        t_max = std::max(t_max, t1);
        json j = op_json(p, o);
        j["t0"] = t0;
        j["t1"] = t1;
        oj.push_back(std::move(j));
      }
      lanes.push_back({{"rank", rank(p)}, {"host", host_of_proc[p]}, {"ops", oj}});
    }
    if (t_min == INT64_MAX) t_min = t_max = 0;
    // Times relative to the window's start, in microseconds (JSON numbers stay exact).
    for (auto& l : lanes)
      for (auto& o : l["ops"]) {
        o["t0"] = sat_sub(o["t0"].get<int64_t>(), t_min) / 1000.0;
        o["t1"] = sat_sub(o["t1"].get<int64_t>(), t_min) / 1000.0;
      }
    std::string ranks_arg;
    for (int p : procs) ranks_arg += (ranks_arg.empty() ? "" : ",") + std::to_string(rank(p));
    std::string cmd = "lockstep timeline " + s.dir + " -o " +
                      (opt.timeline_json_hint.empty() ? std::string("timeline.json") : opt.timeline_json_hint) +
                      " --ranks " + ranks_arg;
    if (!findings_json["list"].empty() && findings_json["list"][0]["seq"].is_number()) {
      int64_t seq = findings_json["list"][0]["seq"].get<int64_t>();
      cmd += " --comm " + short_hash(findings_json["list"][0]["comm"].get<std::string>()) + " --from-seq " +
             std::to_string(std::max<int64_t>(1, seq - 10)) + " --to-seq " + std::to_string(seq + 10);
    }
    return {{"lanes", lanes}, {"span_us", sat_sub(t_max, t_min) / 1000.0}, {"aligned", aligned}, {"command", cmd}};
  }

  json build() {
    index_ranks();
    json j;
    j["schema"] = "lockstep.report";
    j["version"] = kReportDataVersion;
    j["dir"] = s.dir;
    j["evidence"] = evidence();
    j["verdict"] = verdict();
    j["hosts"] = hosts;
    j["ranks"] = ranks_row();
    j["cell_states"] = kCellStates;
    j["families"] = families();
    json f = findings();
    j["findings"] = f;
    j["wait_graph"] = wait_graph();
    j["timeline"] = timeline(f);
    j["stacks"] = std::move(stacks);  // last: every op above has referenced its stack by now
    // Every string of the page in the printable form the text and JSON outputs use: control,
    // C1 and bidi characters of a path, a frame or a host would otherwise reach the rendered
    // page (textContent keeps them: a right-to-left override reorders a cell, and a copied
    // command carries an escape sequence to the terminal it is pasted into).
    make_printable(j);
    return j;
  }
};

}  // namespace

std::string report_data_json(const Analysis& a, TraceDetails& details, const ReportOptions& options) {
  Builder b(a, details, options);
  return b.build().dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string script_safe_json(const std::string& in) {
  std::string out;
  out.reserve(in.size() + in.size() / 16);
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else if (c == '\xE2' && i + 2 < in.size() && in[i + 1] == '\x80' && (in[i + 2] == '\xA8' || in[i + 2] == '\xA9')) {
      out += in[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace lockstep::report
