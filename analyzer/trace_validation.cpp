#include "trace_validation.h"

#include "identity.h"
#include "meta_keys.h"
#include "rank_env.h"
#include "trace_file.h"

#include <time.h>

#include <algorithm>
#include <map>
#include <functional>
#include <numeric>
#include <set>
#include <tuple>

namespace lockstep {

const char* evidence_kind_name(EvidenceKind k) {
  switch (k) {
    case EvidenceKind::kSkippedFile: return "skipped_file";
    case EvidenceKind::kMissingMember: return "missing_member";
    case EvidenceKind::kDuplicateRank: return "duplicate_rank";
    case EvidenceKind::kDuplicateCommRank: return "duplicate_comm_rank";
    case EvidenceKind::kRankOutOfRange: return "rank_out_of_range";
    case EvidenceKind::kNranksMismatch: return "nranks_mismatch";
    case EvidenceKind::kDuplicateFile: return "duplicate_file";
    case EvidenceKind::kMixedJobs: return "mixed_jobs";
    case EvidenceKind::kDroppedRecords: return "dropped_records";
    case EvidenceKind::kRecorderStopped: return "recorder_stopped";
    case EvidenceKind::kHistoryLost: return "history_lost";
    case EvidenceKind::kDigestInconsistent: return "digest_inconsistent";
    case EvidenceKind::kUnverifiedHistory: return "unverified_history";
    case EvidenceKind::kBenchmarkSwitches: return "benchmark_switches";
    case EvidenceKind::kFrHistoryDropped: return "fr_history_dropped";
    case EvidenceKind::kEvidenceGap: return "evidence_gap";
    case EvidenceKind::kStoppedBeforeIssue: return "stopped_before_issue";
    case EvidenceKind::kOrderNotRead: return "order_not_read";
    case EvidenceKind::kAllToAllNotRead: return "all_to_all_not_read";
  }
  return "unknown";
}

namespace {

// "2026-12-02 13:33:20 UTC" from a wall-clock time in ns (an untrusted file's: "?" outside 1970..2100).
std::string utc_time(int64_t wall_ns) {
  const int64_t secs = wall_ns / 1000000000;
  if (secs < 0 || secs > 4102444800) return "?";
  const time_t t = static_cast<time_t>(secs);
  tm parts{};
  char buf[32];
  if (!gmtime_r(&t, &parts) || !strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &parts)) return "?";
  return buf;
}

// Communicators whose members can be matched across files: created (init_rc 0), not the
// NULL-comm placeholder, not given a process-local identity by a recorder that started late.
bool matchable(const Comm& c) { return c.init_rc == 0 && c.nranks > 0 && !c.created_before_tracing; }

}  // namespace

std::string header_defect(const Process& p) {
  // The global rank sizes per-rank tables (replay's rank files, missing-rank lists).
  if (p.global_rank < -1 || p.global_rank >= kMaxRanks)
    return "corrupt: global_rank " + std::to_string(p.global_rank) + " is out of range (valid: -1 for unknown, 0.." +
           std::to_string(kMaxRanks - 1) + ")";
  // Bounded traces: retired counts, checkpoint ordinals and seqs are collective ordinals or seqs,
  // 32-bit like every seq (the loader's rule): beyond that they would overflow the ordinal
  // arithmetic (checkpoints.cpp: base + i + 1).
  if (p.checkpoint_interval > kMaxSeq)
    return "corrupt: checkpoint_interval " + std::to_string(p.checkpoint_interval) + " is out of range (valid: 0.." +
           std::to_string(kMaxSeq) + ")";
  for (const Comm& c : p.comms) {
    auto bad = [&](const char* what, int64_t v) {
      return "corrupt: comm " + short_hash(c.hash) + " has " + what + " " + std::to_string(v) + " (valid: 0.." +
             std::to_string(kMaxSeq) + ")";
    };
    if (c.retired_collectives > kMaxSeq) return bad("retired_collectives", c.retired_collectives);
    if (c.retired_through_seq > kMaxSeq) return bad("retired_through_seq", c.retired_through_seq);
    for (const Comm::Checkpoint& cp : c.checkpoints) {
      if (cp.ordinal < 0 || cp.ordinal > kMaxSeq) return bad("a checkpoint at ordinal", cp.ordinal);
      if (cp.seq < 0 || cp.seq > kMaxSeq) return bad("a checkpoint at seq", cp.seq);
    }
  }
  for (const Comm& c : p.comms) {
    if (c.init_rc != 0) continue;
    // nranks 0 is the NULL-comm placeholder's alone (handle 0, interposer/recorder.cpp): a
    // communicator with a handle and no ranks is corrupt, never one nobody has to join.
    if (c.nranks == 0 && c.handle != 0)
      return "corrupt: comm " + short_hash(c.hash) + " has nranks 0 (valid: 1.." + std::to_string(kMaxRanks) + ")";
    if (c.nranks < 0 || c.nranks > kMaxRanks)
      return "corrupt: comm " + short_hash(c.hash) + " has nranks " + std::to_string(c.nranks) + " (valid: 1.." +
             std::to_string(kMaxRanks) + ")";
    if (c.nranks == 0) continue;  // the NULL-comm placeholder
    if (c.rank < 0 || c.rank >= c.nranks)
      return "corrupt: rank " + std::to_string(c.rank) + " is out of range in comm " + short_hash(c.hash) + " of " +
             std::to_string(c.nranks) + " ranks";
  }
  return "";
}

std::vector<EvidenceIssue> validate_evidence(const std::vector<const Process*>& procs,
                                             const std::vector<SkippedFile>& skipped,
                                             const std::function<std::string(const std::string&)>& comm_label) {
  std::vector<EvidenceIssue> out;
  auto comm_named = [&](const std::string& hash) { return comm_label ? comm_label(hash) : lockstep::comm_label(hash); };
  auto ranks_of = [&](const std::vector<int>& ps) {
    std::vector<int> r;
    for (int p : ps)
      if (procs[p]->global_rank >= 0) r.push_back(procs[p]->global_rank);
    return r;
  };
  auto add = [&](EvidenceKind k, bool contradictory, std::vector<int> ps, std::string detail) {
    EvidenceIssue e;
    e.kind = k;
    e.contradictory = contradictory;
    e.ranks = ranks_of(ps);
    e.procs = std::move(ps);
    e.detail = std::move(detail);
    out.push_back(std::move(e));
  };
  // An issue about process i: "rank 3: <what>" (`sep` ": "), its text kept apart for grouping.
  auto add_about = [&](EvidenceKind k, size_t i, const std::string& what, const char* sep = ": ") {
    add(k, false, {static_cast<int>(i)}, rank_label(*procs[i], static_cast<int>(i)) + sep + what);
    out.back().what = what;
  };
  for (auto& sk : skipped) add(EvidenceKind::kSkippedFile, false, {}, "skipped " + sk.path + ": " + sk.reason);

  // Same process twice (a copied file): host, pid and start time equal.
  std::map<std::tuple<std::string, int64_t, std::string>, int> seen_proc;
  for (size_t i = 0; i < procs.size(); ++i) {
    const Process& p = *procs[i];
    auto st = p.meta.find(schema::meta::kStartMonoNs);
    auto key = std::make_tuple(p.host, p.pid, st == p.meta.end() ? std::string() : st->second);
    auto [it, fresh] = seen_proc.emplace(key, static_cast<int>(i));
    if (!fresh && p.pid != 0)
      add(EvidenceKind::kDuplicateFile, true, {it->second, static_cast<int>(i)},
          procs[it->second]->shown_path() + " and " + p.shown_path() + " hold the same process (" + p.host + " pid " +
              std::to_string(p.pid) + ")");
  }
  std::map<int, int> by_rank;
  for (size_t i = 0; i < procs.size(); ++i) {
    int r = procs[i]->global_rank;
    if (r < 0) continue;
    auto [it, fresh] = by_rank.emplace(r, static_cast<int>(i));
    if (!fresh)
      add(EvidenceKind::kDuplicateRank, true, {it->second, static_cast<int>(i)},
          "global rank " + std::to_string(r) + " is claimed by two files: " + procs[it->second]->shown_path() + " and " +
              procs[i]->shown_path());
  }

  // Communicators by hash: size agreement, rank range, one file per rank, members present.
  struct Members {
    int nranks = 0;
    int first = -1;
    std::map<int, int> by_rank;  // comm rank -> proc
    bool mismatch = false;
  };
  std::map<std::string, Members> comms;
  std::vector<std::string> order;
  for (size_t i = 0; i < procs.size(); ++i) {
    for (const Comm& c : procs[i]->comms) {
      if (!matchable(c)) continue;
      auto [it, fresh] = comms.try_emplace(c.hash);
      Members& m = it->second;
      if (fresh) {
        m.nranks = c.nranks, m.first = static_cast<int>(i);
        order.push_back(c.hash);
      }
      if (m.nranks != c.nranks) {
        if (!m.mismatch)
          add(EvidenceKind::kNranksMismatch, true, {m.first, static_cast<int>(i)},
              comm_named(c.hash) + " has " + std::to_string(m.nranks) + " ranks in " + procs[m.first]->shown_path() +
                  " but " + std::to_string(c.nranks) + " in " + procs[i]->shown_path());
        m.mismatch = true;
      }
      if (c.rank < 0 || c.rank >= c.nranks) {
        add(EvidenceKind::kRankOutOfRange, true, {static_cast<int>(i)},
            procs[i]->shown_path() + ": rank " + std::to_string(c.rank) + " is out of range in comm " + short_hash(c.hash) +
                " of " + std::to_string(c.nranks) + " ranks");
        continue;
      }
      auto [rt, rfresh] = m.by_rank.emplace(c.rank, static_cast<int>(i));
      if (!rfresh && rt->second != static_cast<int>(i))
        add(EvidenceKind::kDuplicateCommRank, true, {rt->second, static_cast<int>(i)},
            "rank " + std::to_string(c.rank) + " of comm " + short_hash(c.hash) + " is claimed by two files: " +
                procs[rt->second]->shown_path() + " and " + procs[i]->shown_path());
    }
  }
  for (auto& h : order) {
    const Members& m = comms[h];
    if (m.mismatch) continue;
    // by_rank holds ranks in [0, nranks): the missing ones are counted, and the first few named
    // by walking it (nranks comes from the file and can be 2^24, in every communicator).
    const size_t missing = static_cast<size_t>(m.nranks) - m.by_rank.size();
    if (missing == 0) continue;
    std::string list;
    auto held = m.by_rank.begin();
    for (int r = 0, named = 0; r < m.nranks && named < 8; ++r) {
      if (held != m.by_rank.end() && held->first == r) {
        ++held;
        continue;
      }
      list += (named++ ? "," : "") + std::to_string(r);
    }
    if (missing > 8) list += ",... (" + std::to_string(missing) + " in all)";
    add(EvidenceKind::kMissingMember, false, {},
        comm_named(h) + " has " + std::to_string(m.nranks) + " ranks, " + std::to_string(m.by_rank.size()) +
            " traced: no usable file of comm rank" + (missing > 1 ? "s " : " ") + list);
  }

  // Global ranks with no file that no communicator above names missing (a job whose
  // communicators do not span its ranks): those below the highest one a file claims, and those
  // below the job's size as its launcher gave it (WORLD_SIZE beside RANK, SLURM_NTASKS beside
  // SLURM_PROCID: the last node's files lost leave no higher rank to tell). Named here.
  if (std::none_of(out.begin(), out.end(), [](const EvidenceIssue& e) { return e.kind == EvidenceKind::kMissingMember; })) {
    int highest = by_rank.empty() ? -1 : by_rank.rbegin()->first;
    int world = 0;  // the largest size a launcher gave, in [1, kMaxRanks]
    for (const Process* p : procs) {
      for (const RankAndSize& v : kWorldSizeOfRank) {
        if (p->global_rank_source != v.rank) continue;
        auto it = p->meta.find(launcher_meta_key(v.size));
        int n = 0;
        if (it != p->meta.end() && parse_rank_value(it->second.c_str(), &n) && n >= 1 && n <= kMaxRanks)
          world = std::max(world, n);
      }
    }
    const bool by_launcher = world - 1 > highest;
    if (by_launcher) highest = world - 1;
    const int64_t missing = static_cast<int64_t>(highest) + 1 - static_cast<int64_t>(by_rank.size());
    if (missing > 0) {
      std::vector<int> absent;  // the first few: a hostile global_rank must not make this long
      for (int r = 0; r <= highest && absent.size() < 8; ++r)
        if (!by_rank.count(r)) absent.push_back(r);
      add(EvidenceKind::kMissingMember, false, {},
          "global ranks 0.." + std::to_string(highest) + (by_launcher ? " (the job's size as its launcher gave it)" : "") +
              ": no usable file of " + ranks_phrase(absent) +
              (missing > static_cast<int64_t>(absent.size()) ? ",... (" + std::to_string(missing) + " in all)" : ""));
      out.back().ranks = absent;
    }
  }

  // Two jobs in one directory: the processes fall into groups that share no communicator.
  if (procs.size() > 1) {
    std::vector<int> parent(procs.size());
    std::iota(parent.begin(), parent.end(), 0);
    std::function<int(int)> find = [&](int x) { return parent[x] == x ? x : parent[x] = find(parent[x]); };
    for (auto& [h, m] : comms)
      for (auto& [r, p] : m.by_rank) parent[find(p)] = find(m.first);
    std::map<int, std::vector<int>> groups;
    for (size_t i = 0; i < procs.size(); ++i) {
      bool member = false;
      for (const Comm& c : procs[i]->comms) member |= matchable(c);
      if (member) groups[find(static_cast<int>(i))].push_back(static_cast<int>(i));
    }
    bool any_comm = !comms.empty();
    std::map<int, int> claims;  // global rank -> processes claiming it
    for (const Process* q : procs) ++claims[q->global_rank];
    auto unique_rank = [&](const Process& q) { return claims[q.global_rank] == 1; };
    if (groups.size() > 1 && any_comm) {
      std::string d = std::to_string(groups.size()) + " groups of processes share no communicator (separate jobs?):";
      std::vector<int> all;
      int gi = 0;
      for (auto& [root, ps] : groups) {
        if (gi++ >= 4) {
          d += " ...";
          break;
        }
        d += gi > 1 ? "; {" : " {";
        for (size_t k = 0; k < ps.size() && k < 4; ++k) d += (k ? ", " : "") + rank_label(*procs[ps[k]], ps[k], unique_rank(*procs[ps[k]]));
        if (ps.size() > 4) d += ", ...";
        d += "}";
        // When each started: after a restart (torchelastic, Slurm --requeue) the older one is
        // the one to move away.
        int64_t first = INT64_MAX;
        for (int q : ps) {
          auto it = procs[q]->meta.find(schema::meta::kStartWallNs);
          if (it == procs[q]->meta.end()) continue;
          if (const trace_file::TextInt w = trace_file::parse_int(it->second); w.integer() && w.value > 0)
            first = std::min(first, w.value);
        }
        if (first != INT64_MAX) d += " started " + utc_time(first);
      }
      d += "; analyse one job at a time: move the other group's files to a directory of their own";
      for (size_t i = 0; i < procs.size(); ++i) all.push_back(static_cast<int>(i));
      add(EvidenceKind::kMixedJobs, false, all, d);
    }
  }

  for (size_t i = 0; i < procs.size(); ++i) {
    const Process& p = *procs[i];
    if (p.dropped_records > 0)
      add_about(EvidenceKind::kDroppedRecords, i,
                "dropped " + std::to_string(p.dropped_records) + " records (its trace has gaps)", " ");
    // The loader accepts only "0" or "1" (and skips the file otherwise).
    if (auto fr = p.meta.find(schema::meta::kFrHistoryDropped); fr != p.meta.end() && fr->second == "1") {
      auto first = p.meta.find(schema::meta::kFrFirstRecordId);
      add_about(EvidenceKind::kFrHistoryDropped, i,
                "its Flight Recorder dump lost entries (fr_history_dropped" +
                    (first != p.meta.end() ? ", oldest record kept " + first->second : std::string()) +
                    "); the collectives they held are unknown");
    }
    auto st = p.meta.find(schema::meta::kRecorderStopped);
    if (st != p.meta.end() && !st->second.empty()) {
      auto det = p.meta.find(schema::meta::kRecorderStoppedDetail);
      add_about(EvidenceKind::kRecorderStopped, i,
                "the recorder stopped recording (" + st->second +
                    (det != p.meta.end() && !det->second.empty() ? ": " + det->second : "") + "); later calls are missing");
    }
    // Benchmark switches (LOCKSTEP_BENCH_OFF, lockstep_bench_set_off) turned parts of the
    // recorder off at some point: rows may be missing by design.
    auto bench = p.meta.find("bench_off");
    if (bench != p.meta.end() && !bench->second.empty() && bench->second != "0")
      add_about(EvidenceKind::kBenchmarkSwitches, i,
                "benchmark switches turned parts of the recorder off (bench_off " + bench->second.substr(0, 20) +
                    "); this trace is not evidence");
    // Ops whose record reached the writer after the size cap had retired their range, and that
    // the retired range could not take in (interposer/writer.cpp absorb_late_op). Any value but
    // "0" counts: an unreadable one proves nothing either.
    auto late = p.meta.find("late_retired_ops");
    if (late != p.meta.end() && late->second != "0")
      add_about(EvidenceKind::kUnverifiedHistory, i,
                late->second.substr(0, 20) + " ops returned after the size cap retired their range; its retired history has a hole");
  }
  return out;
}

std::vector<EvidenceGroup> group_evidence(const std::vector<EvidenceIssue>& issues) {
  std::vector<EvidenceGroup> out;
  std::map<std::tuple<EvidenceKind, bool, std::string>, std::vector<size_t>> by_text;  // -> groups in out
  std::vector<std::set<int>> ranks_in;                                                 // per group
  for (size_t i = 0; i < issues.size(); ++i) {
    const EvidenceIssue& e = issues[i];
    const bool groupable = !e.what.empty() && e.procs.size() == 1 && e.ranks.size() == 1;
    const auto key = std::make_tuple(e.kind, e.contradictory, e.what);
    if (groupable) {
      // The first group of this text without the rank: a rank twice (two files claim it) goes
      // to another group, as "ranks 0-3" would hide a process.
      bool joined = false;
      for (size_t k : by_text[key])
        if (ranks_in[k].insert(e.ranks.front()).second) {
          out[k].issues.push_back(i);
          joined = true;
          break;
        }
      if (joined) continue;
    }
    EvidenceGroup g;
    g.kind = e.kind;
    g.contradictory = e.contradictory;
    g.issues = {i};
    g.what = e.what.empty() ? e.detail : e.what;
    g.detail = e.detail;
    out.push_back(std::move(g));
    ranks_in.emplace_back(e.ranks.begin(), e.ranks.end());
    if (groupable) by_text[key].push_back(out.size() - 1);
  }
  for (size_t k = 0; k < out.size(); ++k) {
    EvidenceGroup& g = out[k];
    g.ranks.assign(ranks_in[k].begin(), ranks_in[k].end());
    if (g.issues.size() > 1) g.detail = ranks_phrase(g.ranks, "rank", kMaxRangeSegments) + ": " + g.what;
  }
  return out;
}

std::string evidence_summary(const std::vector<EvidenceIssue>& issues, size_t max_items) {
  const std::vector<EvidenceGroup> groups = group_evidence(issues);
  std::string s;
  for (size_t i = 0; i < groups.size() && i < max_items; ++i) s += (i ? "; " : "") + groups[i].detail;
  if (groups.size() > max_items) s += "; " + std::to_string(groups.size() - max_items) + " more";
  return s;
}

}  // namespace lockstep
