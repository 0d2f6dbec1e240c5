#include "attach_analysis.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <set>
#include <sstream>

#include "analysis.h"
#include "identity.h"
#include "procfs.h"
#include "text_escape.h"
#include "trace_loader.h"

namespace lockstep::attach {
namespace {

// Processes whose environment names no rank get numbers from here, after every real rank (the
// environment's ranks are below kMaxEnvRank).
constexpr int kUnknownRankBase = kMaxEnvRank;

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string base_name(const std::string& path) {
  size_t s = path.rfind('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

// Modules whose frames are the wait itself, not the caller that matters.
bool in_runtime(const NativeFrame& f) {
  const std::string m = base_name(f.module);
  return starts_with(m, "libnccl") || starts_with(m, "libcuda") || starts_with(m, "libcudart") ||
         starts_with(m, "libc.so") || starts_with(m, "libc-") || starts_with(m, "libpthread") ||
         starts_with(m, "libstdc++") || starts_with(m, "ld-linux") || starts_with(m, "libffi") ||
         starts_with(m, "_ctypes") || starts_with(m, "libpython") || starts_with(m, "python3") ||
         starts_with(f.function, "_PyEval") || starts_with(f.function, "_Py") || starts_with(f.function, "Py");
}

bool is_wait_api(const std::string& fn) {
  return starts_with(fn, "cu") || starts_with(fn, "nccl") || starts_with(fn, "pnccl");
}

bool is_collective_api(const std::string& fn) {
  static const char* const names[] = {"ncclAllReduce", "ncclBroadcast", "ncclBcast", "ncclReduce",
                                      "ncclAllGather", "ncclReduceScatter", "ncclAlltoAll", "ncclGather",
                                      "ncclScatter", "ncclSend", "ncclRecv", "ncclGroupEnd"};
  for (const char* n : names)
    if (fn == n || fn == std::string("p") + n) return true;
  return false;
}

bool thread_in_gpu_wait(const ThreadSnapshot& t) {
  for (const NativeFrame& f : t.native)
    if (is_wait_api(f.function) && (starts_with(base_name(f.module), "libcuda") || starts_with(base_name(f.module), "libnccl") ||
                                    starts_with(base_name(f.module), "libcudart")))
      return true;
  return false;
}

std::string py_frame(const PythonFrame& f) {
  return base_name(f.file) + ":" + std::to_string(f.line) + " " + f.function;
}

const ThreadSnapshot* primary_thread(const ProcessSnapshot& p) {
  const ThreadSnapshot* main = nullptr;
  for (const ThreadSnapshot& t : p.threads)
    if (t.tid == p.pid) main = &t;
  // The thread that waits on the GPU or in NCCL with Python frames (the training loop), else any
  // in such a wait, else the GIL holder, else the main thread.
  for (const ThreadSnapshot& t : p.threads)
    if (thread_in_gpu_wait(t) && !t.python.empty()) return &t;
  if (main && thread_in_gpu_wait(*main)) return main;
  for (const ThreadSnapshot& t : p.threads)
    if (thread_in_gpu_wait(t) && &t != main && t.name.find("stream") == std::string::npos) return &t;
  for (const ThreadSnapshot& t : p.threads)
    if (t.gil_holder) return &t;
  return main ? main : (p.threads.empty() ? nullptr : &p.threads.front());
}

void describe(const ProcessSnapshot& p, RankFinding& f) {
  const ThreadSnapshot* t = primary_thread(p);
  if (!t) return;
  f.tid = t->tid;
  // innermost wait API frame, then the first caller outside the runtime
  size_t i = 0;
  for (; i < t->native.size(); ++i)
    if (is_wait_api(t->native[i].function)) {
      // the outermost of a run of API frames (cudaStreamSynchronize over cuStreamSynchronize)
      while (i + 1 < t->native.size() && is_wait_api(t->native[i + 1].function)) ++i;
      f.waits_in = t->native[i].function;
      break;
    }
  if (f.waits_in.empty() && !t->native.empty()) f.waits_in = t->native[0].function.empty() ? "?" : t->native[0].function;
  for (const NativeFrame& fr : t->native)
    if (is_collective_api(fr.function)) {
      f.collective_in_stack = fr.function[0] == 'p' ? fr.function.substr(1) : fr.function;
      break;
    }
  // PyTorch: the innermost torch.distributed collective on the Python stack (the host is inside
  // it: a blocking collective, a barrier, or the collective's own wait).
  if (f.collective_in_stack.empty())
    for (const PythonFrame& pf : t->python)
      if (base_name(pf.file) == "distributed_c10d.py" && pf.function.find('_') != 0) {
        f.collective_in_stack = "torch.distributed." + pf.function;
        break;
      }
  if (!t->python.empty()) {
    f.python_where = py_frame(t->python.front());
    f.called_from = f.python_where;
  } else {
    for (size_t k = i + 1; k < t->native.size(); ++k)
      if (!in_runtime(t->native[k]) && !t->native[k].function.empty()) {
        f.called_from = t->native[k].function;
        break;
      }
  }
  for (const PythonFrame& pf : t->python) f.signature.push_back(py_frame(pf));
  for (const NativeFrame& nf : t->native)
    if (!nf.function.empty()) f.signature.push_back(nf.function);
}

const char* trace_words(TraceKind k) {
  return k == TraceKind::kRecorder ? "lockstep recorder rows" : "Flight Recorder entries";
}

// The trace sources: those given, then those the snapshots' environments name (one per trace
// directory, one per FR dump prefix with the dump files of every process that shares it).
std::vector<TraceSource> trace_sources(const std::vector<NodeSnapshot>& nodes, const std::vector<TraceSource>& given) {
  std::vector<TraceSource> out = given;
  auto find = [&](TraceKind k, const std::string& path) -> TraceSource* {
    for (TraceSource& t : out)
      if (t.kind == k && t.path == path) return &t;
    return nullptr;
  };
  for (const NodeSnapshot& n : nodes)
    for (const ProcessSnapshot& p : n.procs) {
      const std::string who = (p.host.empty() ? n.host : p.host) + " pid " + std::to_string(p.pid);
      if (!p.lockstep_dir.empty()) {
        TraceSource* t = find(TraceKind::kRecorder, p.lockstep_dir);
        if (!t) {
          out.push_back({TraceKind::kRecorder, p.lockstep_dir, {}, p.lockstep_dir_from + " of " + who, {}});
          t = &out.back();
        }
        t->owners.push_back({p.host.empty() ? n.host : p.host, p.pid, p.start_time, p.recorder_mapped});
      }
      if (p.fr_dump_prefix.empty() || p.fr_dumps.empty()) continue;
      TraceSource* t = find(TraceKind::kFlightRecorder, p.fr_dump_prefix);
      if (!t) {
        out.push_back({TraceKind::kFlightRecorder, p.fr_dump_prefix, {}, p.fr_dump_variable + " of " + who, {}});
        t = &out.back();
      }
      for (const std::string& f : p.fr_dumps)
        if (std::find(t->files.begin(), t->files.end(), f) == t->files.end()) t->files.push_back(f);
    }
  return out;
}

// FR dumps named one by one (a prefix in a shared directory such as /tmp): the loader reads a
// directory, so they are linked into a private one first.
class LinkedFiles {
 public:
  // keep_names: files of one directory linked under their own names (a trace file and its
  // SQLite journal must keep theirs), else numbered (dumps of several directories).
  explicit LinkedFiles(const std::vector<std::string>& files, bool keep_names = false) {
    char tmpl[] = "/tmp/lockstep-attach-fr.XXXXXX";
    if (!::mkdtemp(tmpl)) return;
    dir_ = tmpl;
    for (size_t i = 0; i < files.size(); ++i) {
      std::string link = dir_ + "/" + (keep_names ? "" : std::to_string(i) + "-") + base_name(files[i]);
      if (::symlink(files[i].c_str(), link.c_str()) == 0) links_.emplace_back(link, files[i]);
    }
  }
  ~LinkedFiles() {
    for (const auto& l : links_) ::unlink(l.first.c_str());
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  // The file a user knows for a path the loader names: the dump, not its link.
  const std::string& original(const std::string& path) const {
    for (const auto& l : links_)
      if (l.first == path) return l.second;
    return path;
  }
  LinkedFiles(const LinkedFiles&) = delete;
  LinkedFiles& operator=(const LinkedFiles&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::pair<std::string, std::string>> links_;  // link -> dump file
};

TraceEvidence read_trace(const TraceSource& src) {
  TraceEvidence ev;
  ev.source = src;
  std::optional<LinkedFiles> linked;
  std::string dir = src.path;
  if (!src.files.empty()) {
    // Dumps are written where each rank runs: from another host (a --slurm analysis on the
    // login node) a node-local path cannot be read.
    if (std::none_of(src.files.begin(), src.files.end(), [](const std::string& f) { return ::access(f.c_str(), R_OK) == 0; })) {
      ev.error = "none of its " + std::to_string(src.files.size()) +
                 " dump file(s) is readable here (dumps are written on each rank's node: read them there, or give --fr DIR)";
      return ev;
    }
    linked.emplace(src.files);
    dir = linked->dir();
    if (dir.empty()) {
      ev.error = "cannot make a temporary directory for the dumps";
      return ev;
    }
  }
  if (!src.owners.empty()) {
    // A directory an environment names may hold another job's files (a reused LOCKSTEP_DIR): only
    // those of the processes read count, the others are named.
    std::vector<std::string> mine;
    try {
      for (const SchedProcess& h : load_headers(dir).procs) {
        struct stat st{};
        const double mtime = ::stat(h.info.path.c_str(), &st) == 0 ? double(st.st_mtim.tv_sec) : 0;
        std::string why = "host " + h.info.host + " pid " + std::to_string(h.info.pid) + ": no process read";
        bool ok = false;
        for (const TraceOwner& o : src.owners)
          if (o.host == h.info.host && o.pid == h.info.pid) {
            // The start time has clock-tick resolution: a second of slack.
            ok = o.recorder_mapped || (o.start_time > 0 && mtime + 1 >= o.start_time);
            if (!ok) why = "host " + h.info.host + " pid " + std::to_string(h.info.pid) +
                           ": older than that process, which runs no recorder (an earlier process's)";
          }
        if (ok) mine.push_back(h.info.path);
        else ev.not_this_job.push_back(h.info.path + ": " + why);
      }
    } catch (const std::exception& e) {
      ev.error = e.what();
      return ev;
    }
    if (mine.empty()) {
      ev.error = "none of its files is of a process read (another job's trace)";
      return ev;
    }
    if (!ev.not_this_job.empty()) {
      std::vector<std::string> with_journal;
      for (const std::string& f : mine)
        for (const char* suffix : {"", "-wal", "-shm"})
          if (*suffix == 0 || ::access((f + suffix).c_str(), F_OK) == 0) with_journal.push_back(f + suffix);
      linked.emplace(with_journal, /*keep_names=*/true);
      dir = linked->dir();
    }
  }
  try {
    Schedule s = load_schedule(dir);
    for (const SkippedFile& sk : s.skipped) ev.skipped.push_back((linked ? linked->original(sk.path) : sk.path) + ": " + sk.reason);
    if (s.procs.empty()) {
      ev.error = "no usable trace file" + std::string(ev.skipped.empty() ? "" : " (every file skipped)");
      return ev;
    }
    Analysis a = analyze(s);
    ev.read = true;
    ev.verdict = verdict_name(a.verdict());
    ev.summary = summary_line(a);
    ev.exit_code = a.exit_code(false);
    for (const SchedProcess& p : s.procs)
      if (p.info.global_rank >= 0) ev.ops_per_rank[p.info.global_rank] += static_cast<int64_t>(p.ops.size());
    if (a.first) {
      std::vector<int> procs = a.first->odd;
      if (procs.empty())
        for (const Side& sd : a.first->sides) procs.push_back(sd.proc);
      for (int p : procs)
        if (p >= 0 && size_t(p) < s.procs.size() && s.procs[p].info.global_rank >= 0)
          ev.divergence_ranks.push_back(s.procs[p].info.global_rank);
      std::sort(ev.divergence_ranks.begin(), ev.divergence_ranks.end());
      ev.divergence_ranks.erase(std::unique(ev.divergence_ranks.begin(), ev.divergence_ranks.end()),
                                ev.divergence_ranks.end());
    }
  } catch (const std::exception& e) {
    ev.error = e.what();
  }
  return ev;
}

// Every rank's RAS counts of a look: (communicator, comm rank, pid, host) -> counts; the
// communicators seen in `comms`. One comm reported by several answers: the first.
using RasKey = std::tuple<std::string, int, int, std::string>;
std::map<RasKey, std::map<std::string, uint64_t>> ras_table(const std::vector<RasAnswer>& answers,
                                                            std::set<std::string>& comms) {
  std::map<RasKey, std::map<std::string, uint64_t>> t;
  std::set<std::string> seen;
  for (const RasAnswer& a : answers) {
    if (!a.reached || !a.error.empty() || !a.json) continue;
    for (const RasComm& c : a.comms) {
      if (!seen.insert(c.hash).second) continue;
      comms.insert(c.hash);
      for (const RasRank& rr : c.ranks) t.emplace(RasKey{c.hash, rr.rank, rr.pid, rr.host}, rr.coll_counts);
    }
  }
  return t;
}

}  // namespace

bool waits_in_nccl_or_cuda(const ProcessSnapshot& p) {
  RankFinding f;
  describe(p, f);
  return is_wait_api(f.waits_in);
}

bool ras_counts_moved(const std::vector<RasAnswer>& first, const std::vector<RasAnswer>& second) {
  std::set<std::string> c1, c2;
  const auto t1 = ras_table(first, c1), t2 = ras_table(second, c2);
  for (const auto& [k, v] : t1)
    if (auto it = t2.find(k); it != t2.end() && it->second != v) return true;
  return false;
}

const char* trace_kind_name(TraceKind k) { return k == TraceKind::kRecorder ? "recorder" : "flight_recorder"; }

const char* evidence_name(Evidence e) {
  switch (e) {
    case Evidence::kProven: return "proven";
    case Evidence::kInferred: return "inferred";
    case Evidence::kNone: return "none";
  }
  return "none";
}

namespace {
// A process without a rank variable gets a placeholder rank (kUnknownRankBase and up) to sort
// and group by; it is shown by its pid, never as that number.
std::string rank_label(const RankFinding& f) {
  return f.rank >= kUnknownRankBase ? "pid " + std::to_string(f.pid) + " (no rank variable)" : "rank " + std::to_string(f.rank);
}
// "rank 3", "ranks 0-3,7" (as ranks_phrase) from ranges, at most 64 of them written out.
std::string ranges_phrase(const std::vector<std::pair<int, int>>& ranges, bool noun = true) {
  std::string out;
  int64_t count = 0;
  for (const auto& [a, b] : ranges) count += int64_t(b) - a + 1;
  for (size_t i = 0; i < ranges.size() && i < 64; ++i)
    out += (i ? "," : "") + std::to_string(ranges[i].first) +
           (ranges[i].second > ranges[i].first ? "-" + std::to_string(ranges[i].second) : "");
  if (ranges.size() > 64) out += " and " + std::to_string(ranges.size() - 64) + " more range(s)";
  return noun ? (count == 1 ? "rank " : "ranks ") + out : out;
}
std::string members_phrase(const std::vector<int>& ranks, const AttachReport& r) {
  std::vector<int> known;
  std::string others;
  for (int k : ranks) {
    if (k < kUnknownRankBase) {
      known.push_back(k);
      continue;
    }
    for (const RankFinding& f : r.ranks)
      if (f.rank == k) others += std::string(others.empty() ? "" : ", ") + "pid " + std::to_string(f.pid);
  }
  std::string out = known.empty() ? "" : ranks_phrase(known);
  if (!others.empty()) out += (out.empty() ? "" : ", ") + others + " (no rank variable)";
  return out;
}
}  // namespace

AttachReport analyze_snapshots(const std::vector<NodeSnapshot>& nodes, const std::vector<TraceSource>& given) {
  AttachReport r;
  std::map<std::pair<std::string, int>, size_t> by_host_pid;  // -> index in r.ranks
  int next_unknown = kUnknownRankBase;
  for (const NodeSnapshot& n : nodes)
    for (const ProcessSnapshot& p : n.procs) {
      RankFinding f;
      f.rank = p.rank >= 0 ? p.rank : next_unknown++;
      f.host = p.host.empty() ? n.host : p.host;
      f.pid = p.pid;
      f.error = p.error;
      f.snapshot = p.error.empty();
      f.stopped_ms = p.stopped_ms;
      f.threads = static_cast<int>(p.threads.size());
      f.python_status = p.python_status;
      for (const ThreadSnapshot& t : p.threads) f.threads_unread += !t.native_error.empty() && t.native.empty() && !t.exited;
      f.python_cut_short = p.python_cut_short;
      // A snapshot is untrusted: a job's size is at most kMaxEnvRank (its ranks are below it).
      if (p.world_size <= kMaxEnvRank) r.expected_ranks = std::max(r.expected_ranks, p.world_size);
      r.longest_stop_ms = std::max(r.longest_stop_ms, p.stopped_ms);
      if (f.snapshot) {
        describe(p, f);
        f.level = f.waits_in.empty() ? Evidence::kNone : Evidence::kInferred;
      }
      for (const std::string& d : p.fr_dumps_stale)
        if (std::find(r.stale_fr_dumps.begin(), r.stale_fr_dumps.end(), d) == r.stale_fr_dumps.end())
          r.stale_fr_dumps.push_back(d);
      by_host_pid[{f.host, f.pid}] = r.ranks.size();
      r.ranks.push_back(std::move(f));
    }
  // RAS: map (host, pid) of each RAS rank to our processes; one comm may be reported by several
  // answers (several nodes): keep the first.
  std::set<std::string> comms_seen;
  for (const NodeSnapshot& n : nodes)
    for (const RasAnswer& a : n.ras) {
      if (!a.reached || !a.error.empty()) {
        r.ras_notes.push_back("NCCL RAS at " + a.address + " (" + n.host + "): " +
                              (a.error.empty() ? "not reached" : a.error));
        continue;
      }
      if (!a.json) {
        r.ras_notes.push_back("NCCL RAS at " + a.address + " answered in text only (NCCL before 2.28?): kept in the snapshot, not parsed");
        continue;
      }
      for (const RasComm& c : a.comms) {
        if (!comms_seen.insert(c.hash).second) continue;
        CountDivergence cd;
        cd.comm = c.hash;
        cd.comm_size = c.size;
        std::map<std::string, std::map<int, uint64_t>> per_type;  // type -> global rank -> count
        // RAS counts every rank of the communicator, read by this attach or not: the others are
        // named by their communicator rank and pid, and count as much (a rank not attached to is
        // no less counted).
        std::map<std::string, std::map<uint64_t, std::vector<std::string>>> unattached;  // type -> count -> who
        // RAS names a rank by its node's address and pid; we know hosts by name. The same host
        // name and pid attribute it; the pid alone only on one node, and only when no other RAS
        // rank of the communicator has that pid and no other RAS rank takes the same process
        // (pids repeat across nodes): else the counts are named, attributed to nobody.
        std::set<std::string> hosts;
        for (const auto& [key, i] : by_host_pid) hosts.insert(key.first);
        std::map<int, int> ras_pids;
        for (const RasRank& rr : c.ranks) ++ras_pids[rr.pid];
        std::vector<size_t> match(c.ranks.size(), SIZE_MAX);
        std::vector<bool> ambiguous(c.ranks.size(), false);
        std::map<size_t, int> taken;
        for (size_t k = 0; k < c.ranks.size(); ++k) {
          const RasRank& rr = c.ranks[k];
          size_t idx = SIZE_MAX, pid_matches = 0, pid_idx = SIZE_MAX;
          for (const auto& [key, i] : by_host_pid)
            if (key.second == rr.pid) {
              ++pid_matches, pid_idx = i;
              if (key.first == rr.host) idx = i;
            }
          if (idx == SIZE_MAX && pid_matches > 0) {
            if (pid_matches == 1 && hosts.size() <= 1 && nodes.size() <= 1 && ras_pids[rr.pid] == 1) idx = pid_idx;
            else ambiguous[k] = true;
          }
          match[k] = idx;
          if (idx != SIZE_MAX) ++taken[idx];
        }
        for (size_t k = 0; k < c.ranks.size(); ++k)
          if (match[k] != SIZE_MAX && taken[match[k]] > 1) match[k] = SIZE_MAX, ambiguous[k] = true;
        for (size_t k = 0; k < c.ranks.size(); ++k) {
          const RasRank& rr = c.ranks[k];
          const size_t idx = match[k];
          if (ambiguous[k]) {
            r.ras_notes.push_back("communicator " + c.hash + ": comm rank " + std::to_string(rr.rank) + " (host " + rr.host +
                                  " pid " + std::to_string(rr.pid) +
                                  ") not attributed: its pid is not one process's of one node here; its counts are not used");
            continue;
          }
          if (idx == SIZE_MAX || !r.ranks[idx].snapshot) {  // a rank of a process we did not read
            for (const auto& [type, count] : rr.coll_counts)
              unattached[type][count].push_back("comm rank " + std::to_string(rr.rank) + " (pid " + std::to_string(rr.pid) +
                                                ", not attached)");
            continue;
          }
          RankFinding& f = r.ranks[idx];
          const int global = f.rank;
          f.ras_counts[c.hash] = rr.coll_counts;
          f.level = Evidence::kProven;
          for (const auto& [type, count] : rr.coll_counts) per_type[type][global] = count;
          if (rr.async_error != 0)
            r.ras_notes.push_back("communicator " + c.hash + ": rank " + std::to_string(global) +
                                  " has async error " + std::to_string(rr.async_error));
          if (rr.abort_flag) r.ras_notes.push_back("communicator " + c.hash + ": rank " + std::to_string(global) + " aborted");
        }
        for (const RasMissingRank& m : c.missing) {
          r.ras_notes.push_back("communicator " + c.hash + ": RAS reports comm rank " + std::to_string(m.rank) +
                                " missing (pid " + std::to_string(m.pid) + (m.considered_dead ? ", considered dead" : "") +
                                (m.unresponsive ? ", unresponsive" : "") + ")");
          if (m.considered_dead)
            r.ras_dead.push_back("comm rank " + std::to_string(m.rank) + " (pid " + std::to_string(m.pid) +
                                 ") of communicator " + c.hash);
        }
        std::set<std::string> types;
        for (const auto& [type, counts] : per_type) types.insert(type);
        for (const auto& [type, counts] : unattached) types.insert(type);
        for (const std::string& type : types) {
          std::map<uint64_t, std::vector<int>> by_count;
          if (auto it = per_type.find(type); it != per_type.end())
            for (const auto& [rank, cnt] : it->second) by_count[cnt].push_back(rank);
          const auto& others = unattached[type];
          std::set<uint64_t> counts;
          for (const auto& [cnt, rk] : by_count) counts.insert(cnt);
          for (const auto& [cnt, who] : others) counts.insert(cnt);
          if (counts.size() < 2) continue;
          CountDivergence d = cd;
          d.collective = type;
          d.ranks_by_count = by_count;
          d.unattached_by_count = others;
          const uint64_t top = *counts.rbegin();  // edges among the ranks read only
          if (auto ahead = by_count.find(top); ahead != by_count.end())
            for (int a : ahead->second)
              for (const auto& [cnt, ranks] : by_count)
                if (cnt < top)
                  for (int behind : ranks) d.waits_for.emplace_back(a, behind);
          r.divergences.push_back(std::move(d));
        }
      }
    }
  // The second look: what RAS counted then, and where each rank waited then.
  r.second_look = !nodes.empty();
  for (const NodeSnapshot& n : nodes) {
    r.second_look = r.second_look && n.second.taken;
    r.second_after_ms = r.second_after_ms == 0 ? n.second.after_ms : std::min(r.second_after_ms, n.second.after_ms);
  }
  {
    std::vector<RasAnswer> first, second;
    for (const NodeSnapshot& n : nodes) {
      first.insert(first.end(), n.ras.begin(), n.ras.end());
      if (r.second_look) second.insert(second.end(), n.second.ras.begin(), n.second.ras.end());
    }
    std::set<std::string> c1, c2;
    const auto t1 = ras_table(first, c1), t2 = ras_table(second, c2);
    std::set<std::string> unchanged;
    for (const std::string& c : c1) {
      bool same = c2.count(c) > 0;
      for (const auto& [k, v] : t1)
        if (std::get<0>(k) == c) {
          auto it = t2.find(k);
          if (it == t2.end()) same = false;
          else if (it->second != v) same = false, r.ras_moved = true;
        }
      for (const auto& [k, v] : t2)
        if (std::get<0>(k) == c && !t1.count(k)) same = false;
      if (same) unchanged.insert(c);
    }
    r.ras_unchanged = r.second_look && !c1.empty() && unchanged.size() == c1.size();
    std::vector<CountDivergence> confirmed;
    for (CountDivergence& d : r.divergences)
      (unchanged.count(d.comm) ? confirmed : r.unconfirmed).push_back(std::move(d));
    r.divergences = std::move(confirmed);
  }
  for (const NodeSnapshot& n : nodes) {
    if (!n.second.taken || n.second.procs.empty()) continue;
    for (const ProcessSnapshot& p : n.procs) {
      auto at = by_host_pid.find({p.host.empty() ? n.host : p.host, p.pid});
      if (at == by_host_pid.end() || !r.ranks[at->second].snapshot) continue;
      RankFinding& f = r.ranks[at->second];
      const ProcessSnapshot* again = nullptr;
      for (const ProcessSnapshot& q : n.second.procs)
        if (q.pid == p.pid) again = &q;
      RankFinding g;
      if (again && again->error.empty()) describe(*again, g);
      f.second_waits_in = g.waits_in;
      if (!again || !again->error.empty() || g.waits_in.empty()) {
        f.second = "not read again";
        continue;
      }
      if (g.waits_in != f.waits_in || g.called_from != f.called_from || g.tid != f.tid || !is_wait_api(g.waits_in)) {
        f.second = "moved";
        continue;
      }
      f.second = "same";
      // The same wait at both looks, but the thread went to sleep again in between: it woke (a
      // progressing job waits in the same place again and again).
      for (const ThreadSnapshot& t1 : p.threads)
        for (const ThreadSnapshot& t2 : again->threads)
          if (t1.tid == f.tid && t2.tid == f.tid && t1.switches_read && t2.switches_read &&
              t1.voluntary_switches != t2.voluntary_switches)
            f.second = "woke";
    }
  }
  std::sort(r.ranks.begin(), r.ranks.end(), [](const RankFinding& a, const RankFinding& b) { return a.rank < b.rank; });
  // The ranks below the job's size that no process was read for, as ranges between the ranks
  // read: as long as the ranks read, whatever the size the environment claims.
  {
    std::set<int> have;
    for (const RankFinding& f : r.ranks)
      if (f.snapshot && f.rank >= 0 && f.rank < r.expected_ranks) have.insert(f.rank);
    int next = 0;
    auto gap = [&](int first, int last) {
      if (first > last) return;
      r.no_snapshot_ranges.emplace_back(first, last);
      r.no_snapshot_count += int64_t(last) - first + 1;
      for (int k = first; k <= last && r.no_snapshot.size() < kListedNoSnapshot; ++k) r.no_snapshot.push_back(k);
    };
    for (int k : have) gap(next, k - 1), next = k + 1;
    gap(next, r.expected_ranks - 1);
  }
  // groups by identical signature
  std::map<std::vector<std::string>, std::vector<int>> groups;
  for (const RankFinding& f : r.ranks)
    if (f.snapshot) groups[f.signature].push_back(f.rank);
  for (auto& [sig, ranks] : groups) r.groups.push_back({ranks, sig});
  std::stable_sort(r.groups.begin(), r.groups.end(),
                   [](const StackGroup& a, const StackGroup& b) { return a.ranks.size() > b.ranks.size(); });
  int blocked = 0, snapped = 0;
  for (const RankFinding& f : r.ranks)
    if (f.snapshot) {
      ++snapped;
      if (is_wait_api(f.waits_in)) ++blocked;
    }
  r.all_blocked = snapped > 0 && blocked == snapped;

  // The job's own traces: proven per rank, and their first divergence names the op.
  for (const TraceSource& src : trace_sources(nodes, given)) r.traces.push_back(read_trace(src));
  for (RankFinding& f : r.ranks) {
    if (!f.ras_counts.empty())
      f.evidence.push_back({"nccl_ras", Evidence::kProven,
                            "collective counts on " + std::to_string(f.ras_counts.size()) + " communicator(s)"});
    for (const TraceEvidence& t : r.traces)
      if (auto it = t.ops_per_rank.find(f.rank); it != t.ops_per_rank.end())
        f.evidence.push_back({trace_kind_name(t.source.kind), Evidence::kProven,
                              std::to_string(it->second) + " op(s) in " + t.source.path});
    if (!f.evidence.empty()) f.level = Evidence::kProven;
    if (f.snapshot && !f.waits_in.empty())
      f.evidence.push_back({"stack", Evidence::kInferred, "host waits in " + f.waits_in});
  }

  char apart[64];
  std::snprintf(apart, sizeof apart, "%.0f ms apart", r.second_after_ms);
  const std::string looks_apart = apart;
  std::ostringstream v;
  const char* sep = "";
  for (const TraceEvidence& t : r.traces)
    if (t.read && t.exit_code == 1) {
      v << sep << t.summary << " (proven: " << trace_words(t.source.kind) << ", " << t.source.path << ")";
      sep = ". ";
      r.exit_code = 1;
    }
  if (!r.divergences.empty()) {
    const CountDivergence& d = r.divergences.front();
    v << sep << "the ranks diverged on communicator " << d.comm << " (" << d.comm_size << " ranks): ";
    // Every count, highest first: the ranks read by rank number, the others as RAS names them.
    std::map<uint64_t, std::vector<std::string>, std::greater<>> who;
    for (const auto& [cnt, ranks] : d.ranks_by_count) who[cnt].push_back(ranks_phrase(ranks));
    for (const auto& [cnt, names] : d.unattached_by_count)
      for (const std::string& n : names) who[cnt].push_back(n);
    bool first = true;
    for (const auto& [cnt, names] : who) {
      v << (first ? "" : ", ");
      for (size_t i = 0; i < names.size(); ++i) v << (i ? " and " : "") << names[i];
      v << " enqueued " << cnt << " " << d.collective;
      first = false;
    }
    v << " (proven: NCCL RAS counts, the same at two looks " << looks_apart << ")";
    const uint64_t top = who.begin()->first;
    std::vector<int> behind;
    for (const auto& [cnt, ranks] : d.ranks_by_count)
      if (cnt < top) behind.insert(behind.end(), ranks.begin(), ranks.end());
    if (auto ahead = d.ranks_by_count.find(top); ahead != d.ranks_by_count.end() && !behind.empty())
      v << ". " << ranks_phrase(ahead->second) << (ahead->second.size() == 1 ? " waits" : " wait") << " in "
        << d.collective << " #" << top << " for " << ranks_phrase(behind) << ", which issued something else or never got there";
    if (r.divergences.size() > 1) v << "; " << r.divergences.size() - 1 << " more count difference(s) below";
    r.exit_code = 1;
  } else if (!r.ras_dead.empty()) {
    v << sep << "NCCL RAS reports " << r.ras_dead.front() << (r.ras_dead.size() > 1 ? " and " + std::to_string(r.ras_dead.size() - 1) + " more" : "")
      << " missing and considered dead (proven: NCCL RAS): its peers cannot complete a collective with it";
    r.exit_code = 1;
  } else if (snapped == 0) {
    v << sep << "nothing read: no process could be attached to (each one's reason above), so nothing is proven or inferred";
    if (r.exit_code == 0) r.exit_code = 4;
  } else if (r.ras_moved) {
    v << sep << "the job is making progress: NCCL RAS counts grew between two looks " << looks_apart
      << " (proven: NCCL RAS counts)";
    if (!r.unconfirmed.empty()) v << "; the counts that differed at the first look were still moving";
  } else if (r.all_blocked) {
    std::vector<int> same, moved, woke, unread;
    for (const RankFinding& f : r.ranks)
      if (f.snapshot)
        (f.second == "same" ? same : f.second == "moved" ? moved : f.second == "woke" ? woke : unread).push_back(f.rank);
    const std::string ras_words =
        r.ras_unchanged ? "; NCCL RAS counts did not change between the looks and agree on every communicator, so the hang is "
                          "not a missing collective of a counted type (all-to-all, send/recv and graph-captured ones are not counted)"
        : r.ras_notes.empty() && !comms_seen.empty() ? "; NCCL RAS counts agree"
                                                    : "; no NCCL RAS counts to prove which collective";
    if (!r.second_look) {
      v << sep << "every rank read waits in NCCL or CUDA now (inferred from stacks): waiting now, not proven hung (one look "
        << "only: a hang needs a second look, --confirm-ms)";
      if (r.exit_code == 0) r.exit_code = 4;
    } else if (!moved.empty()) {
      v << sep << "the job is making progress: " << members_phrase(moved, r) << " left " << (moved.size() == 1 ? "its" : "their")
        << " wait between two looks " << looks_apart << " (inferred from stacks)";
    } else if (unread.empty() && woke.empty()) {
      v << sep << "every rank read waits in NCCL or CUDA, in the same place at two looks " << looks_apart
        << " (inferred from stacks): the job hangs" << ras_words;
      r.exit_code = 1;
    } else {
      v << sep << "every rank read waits in NCCL or CUDA at the first look, but ";
      if (!woke.empty())
        v << members_phrase(woke, r) << " woke between two looks " << looks_apart << " (waiting in the same place again)";
      if (!woke.empty() && !unread.empty()) v << " and ";
      if (!unread.empty()) v << members_phrase(unread, r) << " could not be read again";
      v << ": waiting now, not proven hung";
      if (r.exit_code == 0) r.exit_code = 4;
    }
  } else if (r.exit_code == 0) {
    // "Not every rank waits" needs every rank's stack: a rank whose native stack was not read
    // (--no-native, or nothing unwound) may wait in NCCL or CUDA as much as not.
    std::vector<int> no_stack;
    for (const RankFinding& f : r.ranks)
      if (f.snapshot && f.waits_in.empty()) no_stack.push_back(f.rank);
    if (!no_stack.empty()) {
      v << "no hang proven, none ruled out: no native stack of " << members_phrase(no_stack, r)
        << " was read (--no-native, or nothing unwound): where " << (no_stack.size() == 1 ? "it waits" : "they wait")
        << " is unknown";
      r.exit_code = 4;
    } else {
      v << "no hang proven: not every rank waits in NCCL or CUDA"
        << (comms_seen.empty() ? "" : ", NCCL RAS counts agree")
        << (std::any_of(r.traces.begin(), r.traces.end(), [](const TraceEvidence& t) { return t.read; })
                ? ", and the job's traces show no divergence" : "");
    }
  }
  // NCCL RAS asked and not read: its counts are unknown, never "agree".
  for (const NodeSnapshot& n : nodes)
    for (const RasAnswer& a : n.ras)
      if (!a.reached || !a.error.empty() || !a.json) {
        v << "; NCCL RAS at " << a.address << " " << (a.reached && a.error.empty() ? "answered in text only" : "not read")
          << ": its counts are unknown";
        if (r.exit_code == 0) r.exit_code = 4;
      }
  // Count differences the second look did not confirm: named, never proven.
  if (!r.unconfirmed.empty() && !r.ras_moved) {
    const CountDivergence& d = r.unconfirmed.front();
    v << "; NCCL RAS counts of " << d.collective << " differ on communicator " << d.comm << " at the first look ("
      << (r.second_look ? "not the same at the second" : "one look only") << "): not proven";
    if (r.exit_code == 0) r.exit_code = 4;
  }
  // Trace evidence that could not be read, or that is incomplete, is named and keeps the verdict
  // from being clean.
  for (const TraceEvidence& t : r.traces) {
    if (!t.read && !t.not_this_job.empty() && t.error.find("another job's") != std::string::npos)
      continue;  // another job's files only: named below the verdict, not evidence of this job
    if (!t.read)
      v << "; " << trace_words(t.source.kind) << " at " << t.source.path << " not read (" << t.error << ")";
    else if (t.exit_code == 4)
      v << "; " << trace_words(t.source.kind) << " at " << t.source.path << ": " << t.summary;
    if ((!t.read || t.exit_code == 4) && r.exit_code == 0) r.exit_code = 4;
  }
  if (r.no_snapshot_count > 0) {
    v << "; no snapshot of " << ranges_phrase(r.no_snapshot_ranges) << " (unknown, not different)";
    if (r.exit_code == 0) r.exit_code = 4;
  }
  for (const RankFinding& f : r.ranks)
    if (!f.snapshot && r.exit_code == 0) r.exit_code = 4;
  // A rank several processes claim (a forked child inherits RANK: a DataLoader worker): which
  // one is the rank is unknown, and counting both would double it.
  for (size_t i = 0; i + 1 < r.ranks.size(); ++i) {
    const int k = r.ranks[i].rank;
    if (k >= kUnknownRankBase || r.ranks[i + 1].rank != k || (i > 0 && r.ranks[i - 1].rank == k)) continue;
    std::string pids;
    for (size_t j = i; j < r.ranks.size() && r.ranks[j].rank == k; ++j)
      pids += std::string(pids.empty() ? "" : ", ") + r.ranks[j].host + " pid " + std::to_string(r.ranks[j].pid);
    v << "; rank " << k << " is claimed by several processes (" << pids << "): which one is the rank is unknown";
    if (r.exit_code == 0) r.exit_code = 4;
  }
  // A rank read in part: its unread threads (or Python frames) may be where it waits, or not.
  std::vector<int> partial;
  for (const RankFinding& f : r.ranks)
    if (f.snapshot && (f.threads_unread > 0 || f.python_cut_short)) partial.push_back(f.rank);
  if (!partial.empty()) {
    v << "; " << members_phrase(partial, r) << " read in part (threads not stopped or not unwound, or Python frames cut "
      << "short: unknown, not different)";
    if (r.exit_code == 0) r.exit_code = 4;
  }
  r.verdict = v.str();
  return r;
}

std::string render_text(const AttachReport& r) {
  std::ostringstream o;
  std::set<std::string> hosts;
  int snapped = 0;
  for (const RankFinding& f : r.ranks) {
    hosts.insert(f.host);
    snapped += f.snapshot;
  }
  o << "lockstep attach: " << snapped << " of " << r.ranks.size() << " process(es) read on " << hosts.size()
    << " host(s)";
  if (r.expected_ranks > 0) o << ", job of " << r.expected_ranks << " ranks";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", r.longest_stop_ms);
  o << "; longest stop " << buf << " ms\n\n";
  o << "Verdict: " << printable(r.verdict) << "\n";  if (r.second_look) {
    std::snprintf(buf, sizeof buf, "%.0f", r.second_after_ms);
    o << "Second look " << buf << " ms after the first: NCCL RAS counts "
      << (r.ras_moved ? "moved" : r.ras_unchanged ? "unchanged" : "not compared (none at both looks)") << "\n";
  } else {
    o << "One look only (no second look: --confirm-ms 0, or snapshots without one): no hang or count divergence is proven\n";
  }
  for (const CountDivergence& d : r.divergences) {
    o << "  communicator " << printable(d.comm) << " " << printable(d.collective) << ":";
    for (const auto& [cnt, ranks] : d.ranks_by_count) o << " " << ranks_phrase(ranks) << " enqueued " << cnt << ";";
    for (const auto& [cnt, who] : d.unattached_by_count)
      for (const std::string& w : who) o << " " << printable(w) << " enqueued " << cnt << ";";
    o << "\n";
    for (const auto& [a, b] : d.waits_for)
      o << "    rank " << a << " waits for rank " << b << " (" << printable(d.collective) << " #"
        << d.ranks_by_count.rbegin()->first << ")\n";
  }
  o << "\nWhere each rank's host waits (stacks: inferred):\n";
  for (const RankFinding& f : r.ranks) {
    if (f.rank >= kUnknownRankBase)
      o << "  process without a rank variable (" << printable(f.host) << " pid " << f.pid << "): ";
    else
      o << "  rank " << f.rank << " (" << printable(f.host) << " pid " << f.pid << "): ";
    if (!f.snapshot) {
      o << "not read: " << printable(f.error) << "\n";
      continue;
    }
    o << "in " << printable(f.waits_in.empty() ? "?" : f.waits_in);
    if (!f.called_from.empty()) o << ", called from " << printable(f.called_from);
    if (!f.collective_in_stack.empty()) o << "; inside " << printable(f.collective_in_stack);
    std::snprintf(buf, sizeof buf, "%.1f", f.stopped_ms);
    o << " [thread " << f.tid << ", stopped " << buf << " ms, " << f.threads << " threads]";
    if (f.second == "same") o << "; second look: the same";
    else if (f.second == "moved") o << "; second look: in " << printable(f.second_waits_in.empty() ? "?" : f.second_waits_in);
    else if (!f.second.empty()) o << "; second look: " << f.second;
    o << "\n";
  }
  o << "\nNCCL state (RAS: proven), last counts per communicator and collective type:\n";
  bool any_ras = false;
  for (const RankFinding& f : r.ranks)
    for (const auto& [comm, counts] : f.ras_counts) {
      any_ras = true;
      o << "  " << rank_label(f) << " on " << printable(comm) << ":";
      for (const auto& [type, cnt] : counts)
        if (cnt) o << " " << printable(type) << "=" << cnt;
      o << "\n";
    }
  if (!any_ras) o << "  none\n";
  for (const std::string& n : r.ras_notes) o << "  " << printable(n) << "\n";
  o << "\nRanks grouped by identical stacks:\n";
  for (size_t g = 0; g < r.groups.size(); ++g) {
    const StackGroup& sg = r.groups[g];
    o << "  " << (g == 0 || sg.ranks.size() == r.groups[0].ranks.size() ? "" : "odd one out: ") << members_phrase(sg.ranks, r)
      << " (" << sg.ranks.size() << "): ";
    for (size_t i = 0; i < sg.signature.size() && i < 4; ++i) o << (i ? " <- " : "") << printable(sg.signature[i]);
    if (sg.signature.size() > 4) o << " <- ...";
    o << "\n";
  }
  if (!r.traces.empty() || !r.stale_fr_dumps.empty()) o << "\nThe job's own traces (proven where read):\n";
  for (const TraceEvidence& t : r.traces) {
    o << "  " << trace_words(t.source.kind) << " at " << printable(t.source.path);
    if (!t.source.files.empty()) o << " (" << t.source.files.size() << " dump file(s))";
    o << ", found by " << printable(t.source.found_by) << ":\n    ";
    if (!t.read)
      o << "not read: " << printable(t.error) << "\n";
    else
      o << printable(t.verdict) << ": " << printable(t.summary) << "\n    ranks read: "
        << rank_ranges([&] {
             std::vector<int> v;
             for (const auto& [rank, n] : t.ops_per_rank) v.push_back(rank);
             return v;
           }())
        << " (`lockstep analyze` on it gives the full report)\n";
    for (const std::string& sk : t.skipped) o << "    skipped " << printable(sk) << "\n";
    for (size_t i = 0; i < t.not_this_job.size() && i < 8; ++i)
      o << "    not used (not this job's): " << printable(t.not_this_job[i]) << "\n";
    if (t.not_this_job.size() > 8) o << "    and " << t.not_this_job.size() - 8 << " more file(s) not this job's\n";
  }
  for (const std::string& d : r.stale_fr_dumps)
    o << "  not read: " << printable(d) << " is older than the job's processes (another job's Flight Recorder dump)\n";
  o << "\nEvidence per rank:\n";
  for (const RankFinding& f : r.ranks) {
    o << "  " << rank_label(f) << ": " << evidence_name(f.level);
    const char* sep = " (";
    for (const RankEvidence& e : f.evidence) {
      o << sep << printable(e.source) << " " << evidence_name(e.level) << ": " << printable(e.detail);
      sep = "; ";
    }
    o << (f.evidence.empty() ? "" : ")") << "\n";
  }
  if (r.no_snapshot_count > 0) o << "Ranks with no snapshot: " << ranges_phrase(r.no_snapshot_ranges, false) << "\n";
  return o.str();
}

namespace {
// Every string of a JSON document made printable (snapshot strings are untrusted: frames, host
// names, paths; invalid UTF-8 would make the encoder throw, a bidi override would reorder text).
nlohmann::json printable_json(const nlohmann::json& j) {
  using nlohmann::json;
  if (j.is_string()) return printable(j.get_ref<const std::string&>());
  if (j.is_array()) {
    json a = json::array();
    for (const json& e : j) a.push_back(printable_json(e));
    return a;
  }
  if (j.is_object()) {
    json o = json::object();
    for (const auto& [k, v] : j.items()) o[printable(k)] = printable_json(v);
    return o;
  }
  return j;
}
nlohmann::json report_json(const AttachReport& r);  // strings as analysed
}  // namespace


nlohmann::json render_json(const AttachReport& r) { return printable_json(report_json(r)); }

namespace {
nlohmann::json report_json(const AttachReport& r) {
  using nlohmann::json;
  json ranks = json::array();
  for (const RankFinding& f : r.ranks)
    ranks.push_back({{"rank", f.rank >= kUnknownRankBase ? json(nullptr) : json(f.rank)}, {"host", f.host}, {"pid", f.pid}, {"snapshot", f.snapshot}, {"error", f.error},
                     {"evidence", evidence_name(f.level)}, {"stopped_ms", f.stopped_ms}, {"threads", f.threads},
                     {"tid", f.tid}, {"waits_in", f.waits_in}, {"called_from", f.called_from},
                     {"python_where", f.python_where}, {"collective_in_stack", f.collective_in_stack},
                     {"ras_counts", f.ras_counts}, {"python_status", f.python_status},
                     {"second_look", f.second}, {"second_look_waits_in", f.second_waits_in},
                     {"threads_unread", f.threads_unread}, {"python_cut_short", f.python_cut_short}, {"evidence_sources", [&] {
                        json e = json::array();
                        for (const RankEvidence& x : f.evidence)
                          e.push_back({{"source", x.source}, {"level", evidence_name(x.level)}, {"detail", x.detail}});
                        return e;
                      }()}});
  json divs = json::array();
  for (const CountDivergence& d : r.divergences) {
    json by = json::array();
    for (const auto& [cnt, rk] : d.ranks_by_count) by.push_back({{"count", cnt}, {"ranks", rk}});
    json others = json::array();
    for (const auto& [cnt, who] : d.unattached_by_count) others.push_back({{"count", cnt}, {"not_attached", who}});
    json edges = json::array();
    for (const auto& [a, b] : d.waits_for) edges.push_back({{"waiter", a}, {"waits_for", b}});
    divs.push_back({{"communicator", d.comm}, {"size", d.comm_size}, {"collective", d.collective},
                    {"counts", by}, {"counts_not_attached", others}, {"wait_for", edges}, {"evidence", "proven"},
                    {"source", "nccl_ras"}});
  }
  json groups = json::array();
  for (const StackGroup& g : r.groups) {
    json ranks_of = json::array(), pids = json::array();  // processes without a rank variable: by pid
    for (int k : g.ranks)
      if (k < kUnknownRankBase) ranks_of.push_back(k);
      else
        for (const RankFinding& f : r.ranks)
          if (f.rank == k) pids.push_back(f.pid);
    groups.push_back({{"ranks", ranks_of}, {"pids_without_rank", pids}, {"stack", g.signature}});
  }
  json traces = json::array();
  for (const TraceEvidence& t : r.traces) {
    json per_rank = json::object();
    for (const auto& [rank, n] : t.ops_per_rank) per_rank[std::to_string(rank)] = n;
    traces.push_back({{"kind", trace_kind_name(t.source.kind)}, {"path", t.source.path}, {"files", t.source.files},
                      {"found_by", t.source.found_by}, {"read", t.read}, {"error", t.error}, {"skipped", t.skipped},
                      {"verdict", t.verdict}, {"summary", t.summary}, {"exit_code", t.exit_code},
                      {"divergence_ranks", t.divergence_ranks}, {"ops_per_rank", per_rank}, {"not_this_job", t.not_this_job},
                      {"evidence", t.read ? "proven" : "none"}});
  }
  return {{"verdict", r.verdict}, {"exit_code", r.exit_code}, {"expected_ranks", r.expected_ranks},
          {"all_blocked", r.all_blocked}, {"longest_stop_ms", r.longest_stop_ms}, {"ranks", ranks},
          {"no_snapshot", r.no_snapshot}, {"no_snapshot_count", r.no_snapshot_count},
          {"no_snapshot_ranges", r.no_snapshot_ranges}, {"divergences", divs}, {"stack_groups", groups},
          {"ras_notes", r.ras_notes}, {"traces", traces}, {"stale_fr_dumps", r.stale_fr_dumps},
          {"second_look", {{"taken", r.second_look}, {"after_ms", r.second_after_ms}, {"ras_moved", r.ras_moved},
                           {"ras_unchanged", r.ras_unchanged}}},
          {"unconfirmed_count_differences", [&] {
             json u = json::array();
             for (const CountDivergence& d : r.unconfirmed) {
               json by = json::array();
               for (const auto& [cnt, rk] : d.ranks_by_count) by.push_back({{"count", cnt}, {"ranks", rk}});
               u.push_back({{"communicator", d.comm}, {"collective", d.collective}, {"counts", by}, {"evidence", "none"}});
             }
             return u;
           }()}};
}
}  // namespace

}  // namespace lockstep::attach
