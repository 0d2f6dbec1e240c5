#include "timeline.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <deque>
#include <future>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "analysis_render.h"
#include "hang.h"
#include "json_printable.h"
#include "meta_keys.h"
#include "saturating.h"
#include "seq_evidence.h"
#include "trace_schema.h"
#include "trace_details.h"
#include "trace_loader.h"

namespace lockstep {
namespace {

using nlohmann::json;


std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// Per process: the offset that turns its monotonic clock into wall-clock ns. The monotonic
// clocks of two hosts share no origin; wall clocks agree as well as NTP keeps them.
struct Clock {
  int64_t mono_to_wall = 0;
  bool aligned = false;
};

Clock process_clock(const Process& p) {
  const trace_file::TextInt wall = meta_int(p, schema::meta::kStartWallNs), mono = meta_int(p, schema::meta::kStartMonoNs);
  if (wall.integer() && mono.integer()) return {sat_sub(wall.value, mono.value), true};
  for (const Op& o : p.ops)  // older files: any op carries both clocks
    if (o.issue_wall_ns > 0 && o.issue_mono_ns > 0) return {o.issue_wall_ns - o.issue_mono_ns, true};
  return {};
}

// The last moment the trace knows of for a process: where ops still in flight end.
int64_t process_end_mono(const Process& p) {
  int64_t end = p.last_flush_mono_ns;
  for (const Op& o : p.ops) end = std::max({end, o.issue_mono_ns, o.completed ? o.complete_mono_ns : 0});
  for (const Wait& w : p.waits) end = std::max({end, w.begin_mono_ns, w.end_mono_ns});
  for (const HangMarker& h : p.hangs) end = std::max(end, h.mono_ns);
  return end;
}

// At most this many bytes of one frame's text (UTF-8 cut on a character boundary).
std::string bounded(std::string s, size_t max = 512) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  return s + "...";
}

// Enqueued ops and graph replays ran on a stream; captured, failed and simulated rows did not.
bool ran(const Op& o) { return vocab::enqueued_work(o.state); }

json peers_of(const Op& o) {
  json peers = json::array();
  for (const OpPart& part : o.parts) {
    json e = {{"op", vocab::name(part.op)}, {"dtype", vocab::stored_name(part.dtype)}, {"count", part.count}};
    if (part.peer >= 0) e["peer"] = part.peer;
    if (part.root >= 0) e["root"] = part.root;
    if (part.redop != vocab::RedOp::None) e["redop"] = vocab::name(part.redop);
    peers.push_back(std::move(e));
  }
  return peers;
}

// One selected op, placed on the common timeline.
struct Placed {
  int pid = 0;
  int tid = 0;
  int64_t ts_ns = 0;  // relative to the trace origin
  uint32_t signature = 0;  // interned "op dtype count root redop": equal for matching collective members
};

double us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// Which processes, and which of their communicators, the options select.
struct Selection {
  std::vector<size_t> procs;
  std::vector<std::vector<std::string>> roles;  // [process][local comm]
  std::vector<std::vector<bool>> comm_on;       // [process][local comm]

  Selection(const Schedule& t, const TimelineOptions& o) {
    std::set<int> want_ranks(o.ranks.begin(), o.ranks.end());
    std::set<int> seen_ranks;
    for (size_t i = 0; i < t.procs.size(); ++i) {
      int r = display_rank(t, static_cast<int>(i));
      seen_ranks.insert(r);
      if (want_ranks.empty() || want_ranks.count(r)) procs.push_back(i);
    }
    for (int r : want_ranks)
      if (!seen_ranks.count(r)) {
        std::vector<int> have(seen_ranks.begin(), seen_ranks.end());
        throw TimelineError("no trace of rank " + std::to_string(r) + " (ranks in the trace: " + rank_ranges(have) + ")");
      }
    roles.assign(t.procs.size(), {});
    comm_on.assign(t.procs.size(), {});
    bool any_comm = false;
    std::set<std::string> all_comms;
    // The selector names the communicators it matches exactly (role or name) when there are
    // any, else those whose hash it prefixes (identity.h).
    CommMatch best = CommMatch::kNone;
    std::vector<std::vector<CommMatch>> match(t.procs.size());
    for (size_t i : procs) {
      const Process& p = t.procs[i].info;
      roles[i] = comm_roles(p);
      const std::vector<std::string> families = comm_families(p);
      comm_on[i].assign(p.comms.size(), o.comm.empty());
      for (size_t c = 0; c < p.comms.size(); ++c) {
        all_comms.insert(comm_label(p.comms[c].hash, roles[i][c]));
        match[i].push_back(match_comm(o.comm, p.comms[c].hash, roles[i][c], families[c], p.comms[c].name));
        best = std::max(best, match[i].back());
      }
    }
    if (!o.comm.empty() && best != CommMatch::kNone)
      for (size_t i : procs)
        for (size_t c = 0; c < match[i].size(); ++c)
          if (match[i][c] == best) comm_on[i][c] = any_comm = true;
    if (!o.comm.empty() && !any_comm) {
      std::string list;
      for (auto& c : all_comms) list += "\n  " + c;
      throw TimelineError("no communicator matches '" + o.comm + "'; communicators:" + list);
    }
  }
};

// The rows of the processes in `order`, read ahead on a few threads while the caller writes the
// previous ones: at most `ahead` processes' rows are held at a time (reading one file is mostly
// SQLite decoding, so files are read in parallel as the analyzer's loader does).
class RowsAhead {
 public:
  RowsAhead(const ProcessRows& rows, std::vector<size_t> order, size_t ahead)
      : rows_(rows), order_(std::move(order)), ahead_(std::max<size_t>(1, ahead)) {}
  ~RowsAhead() {
    for (auto& f : pending_) f.wait();
  }
  // The rows of order[k]; k must increase by one per call. Throws what `rows` threw.
  Process take(size_t k) {
    while (next_ < order_.size() && next_ < k + ahead_)
      pending_.push_back(std::async(std::launch::async, [this, i = order_[next_++]] { return rows_(i); }));
    auto f = std::move(pending_.front());
    pending_.pop_front();
    return f.get();
  }

 private:
  const ProcessRows& rows_;
  std::vector<size_t> order_;
  size_t ahead_;
  size_t next_ = 0;
  std::deque<std::future<Process>> pending_;
};

}  // namespace

std::vector<EvidenceIssue> timeline_evidence(const Schedule& headers, const std::vector<SkippedFile>& unread) {
  std::vector<const Process*> procs;
  std::vector<SkippedFile> skipped = headers.skipped;
  for (auto& p : headers.procs) {
    auto bad = std::find_if(unread.begin(), unread.end(), [&](const SkippedFile& u) { return u.path == p.info.path; });
    if (bad == unread.end())
      procs.push_back(&p.info);
    else
      skipped.push_back(*bad);
  }
  // Communicators named as every other output names them: hash and role (comm_index.h's join,
  // the one analyze's index is built on).
  const CommJoin join = join_comms(procs);
  std::vector<EvidenceIssue> out = validate_evidence(procs, skipped, comm_labeler(join.comms));
  // (a stopped recorder is validate_evidence's own item, as in analyze)
  for (size_t i = 0; i < headers.procs.size(); ++i) {
    const Process& info = headers.procs[i].info;
    const TraceEnd end = trace_end(info);
    if (!end.lost || end.stopped) continue;
    EvidenceIssue e;
    e.kind = EvidenceKind::kHistoryLost;
    e.procs = {static_cast<int>(i)};
    e.ranks = {display_rank(headers, static_cast<int>(i))};
    e.what = "trace ends without an exit record (not finished, not seen running): what it did after its last flush is "
             "unknown";
    e.detail = shown_rank_label(info, static_cast<int>(i)) + ": " + e.what;
    out.push_back(std::move(e));
  }
  return out;
}

void check_timeline_options(const Schedule& t, const TimelineOptions& options) {
  const Selection checked(t, options);
  (void)checked;
}

std::vector<SkippedFile> write_timeline_json(const Schedule& t, const ProcessRows& rows, const TimelineOptions& o,
                                             std::ostream& out) {
  const Selection sel(t, o);
  const auto& procs = sel.procs;
  const auto& roles = sel.roles;
  const auto& comm_on = sel.comm_on;
  const bool seq_range = o.from_seq > 0 || o.to_seq > 0;
  auto op_selected = [&](size_t i, const Op& op) {
    // A live file can gain a communicator between its header and its rows: not in the selection.
    if (op.comm >= 0 ? op.comm >= static_cast<int>(comm_on[i].size()) || !comm_on[i][op.comm] : !o.comm.empty()) return false;
    if (!seq_range) return true;
    return op.seq > 0 && op.seq >= o.from_seq && (o.to_seq <= 0 || op.seq <= o.to_seq);
  };

  // A process whose rows cannot be read keeps its track, named with the reason, and no events.
  std::vector<SkippedFile> unread;
  std::map<size_t, std::string> unread_why;
  auto read_rows = [&](size_t i, Process& p) {
    try {
      p = rows(i);
      return true;
    } catch (const std::exception& e) {
      unread_why[i] = e.what();
      unread.push_back({t.procs[i].info.path, e.what()});
      return false;
    }
  };

  // The origin: the earliest wall-clock instant of any selected process. The header's clock
  // meta keys place a process; only older files without them need their rows read first.
  std::vector<Clock> clocks(t.procs.size());
  int64_t origin = INT64_MAX;
  bool all_aligned = true;
  for (size_t i : procs) {
    const Process* p = &t.procs[i].info;
    Process full;
    if (!meta_int(*p, schema::meta::kStartWallNs).integer() || !meta_int(*p, schema::meta::kStartMonoNs).integer()) {
      if (!read_rows(i, full)) continue;
      p = &full;
    }
    clocks[i] = process_clock(*p);
    const trace_file::TextInt start_mono = meta_int(*p, schema::meta::kStartMonoNs);
    const int64_t start = start_mono.integer() ? start_mono.value : p->ops.empty() ? 0 : p->ops.front().issue_mono_ns;
    origin = std::min(origin, sat_add(start, clocks[i].mono_to_wall));
    all_aligned = all_aligned && clocks[i].aligned;
  }
  if (origin == INT64_MAX) origin = 0;

  // Events are written as they are made (one per line: diffable, and still one JSON document);
  // only what the flows need is kept, so memory stays at the size of the loaded trace.
  json other = {{"tool", "lockstep timeline"},
                {"trace_dir", t.dir},
                {"origin_wall_ns", origin},
                {"clock", all_aligned ? "wall clock per process (start_wall_ns); across hosts as good as NTP"
                                      : "some processes lack start_wall_ns: their times are unaligned"}};
  json skipped = json::array();
  for (const SkippedFile& sk : t.skipped) skipped.push_back({{"path", printable(sk.path)}, {"reason", printable(sk.reason)}});
  other["skipped"] = std::move(skipped);
  // otherData is written after the events: the files whose rows cannot be read are known only
  // once they were asked for, and they are part of its evidence.
  out << "{\"displayTimeUnit\":\"ns\",\n\"traceEvents\":[\n";
  bool first_event = true;
  auto emit = [&](json e) {  // built in place by each caller: no copy
    make_printable(e);
    out << (first_event ? "" : ",\n") << e.dump(-1, ' ', false, json::error_handler_t::replace);
    first_event = false;
  };
  // Stacks are written once, in a table after the events; an op names its stack by key. A
  // frame's text is bounded, so a crafted trace with huge frames cannot blow the file up.
  json stacks = json::object();
  std::vector<Placed> placed;  // collective members, for the flows
  std::unordered_map<std::string, uint32_t> signatures;
  std::map<std::tuple<std::string, int64_t>, std::vector<size_t>> members;  // (hash, ordinal) -> placed
  // Rows of the processes the clock pass could not read are not asked for again.
  std::vector<size_t> to_read;
  for (size_t i : procs)
    if (!unread_why.count(i)) to_read.push_back(i);
  RowsAhead ahead(rows, to_read, std::max(2u, std::thread::hardware_concurrency()));
  size_t taken = 0;
  auto next_rows = [&](size_t i, Process& p) {
    try {
      p = ahead.take(taken++);
      return true;
    } catch (const std::exception& e) {
      unread_why[i] = e.what();
      unread.push_back({t.procs[i].info.path, e.what()});
      return false;
    }
  };
  for (size_t i : procs) {
    const Process& hdr = t.procs[i].info;
    // pid/tid 0 are the kernel's idle task to Perfetto (special-cased): numbering starts at 1.
    const int pid = static_cast<int>(i) + 1;
    constexpr int kHostTid = 1;
    const std::string who = shown_rank_label(hdr, static_cast<int>(i)) + " (" + hdr.host + " " + std::to_string(hdr.pid) + ")";
    Process p;
    if (unread_why.count(i) || !next_rows(i, p)) {
      emit({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", who + ": not read: " + unread_why[i]}}}});
      emit({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
      continue;
    }
    // Clock values come from an untrusted file: saturate rather than overflow.
    int64_t shift = 0;
    if (__builtin_sub_overflow(clocks[i].mono_to_wall, origin, &shift))
      shift = clocks[i].mono_to_wall > 0 ? INT64_MAX : INT64_MIN;
    auto ts = [&](int64_t mono) {
      int64_t v = 0;
      if (__builtin_add_overflow(mono, shift, &v)) v = mono > 0 ? INT64_MAX : INT64_MIN;
      return v;
    };
    const int64_t end_ns = ts(process_end_mono(p));

    emit({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", who}}}});
    emit({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});

    // Tracks: one per (communicator, stream); the stream is named only when a communicator's
    // ops use several streams. Track kHostTid holds host-side events (waits, graph launches).
    // Issue-to-completion slices of one stream overlap (the next op is issued while the previous
    // one still runs); trace viewers need slices of one track to nest, so an op that would
    // overlap partially goes to an extra lane of the track ("overlap N").
    auto stop_of = [&](const Op& op) { return op.completed ? ts(op.complete_mono_ns) : end_ns; };
    std::map<std::pair<int, uint64_t>, std::vector<std::vector<int64_t>>> lanes;  // open slice ends per lane
    std::map<std::tuple<int, uint64_t, int>, int> tid_of;
    std::vector<int> lane_of(p.ops.size(), 0);
    std::map<int, std::set<uint64_t>> streams_of;
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const Op& op = p.ops[k];
      if (!op_selected(i, op)) continue;
      streams_of[op.comm].insert(op.stream);
      if (!ran(op)) continue;
      const int64_t start = ts(op.issue_mono_ns), stop = std::max(start, stop_of(op));
      auto& track = lanes[{op.comm, op.stream}];
      size_t lane = 0;
      for (; lane < track.size(); ++lane) {
        auto& open = track[lane];
        while (!open.empty() && open.back() <= start) open.pop_back();
        if (open.empty() || stop <= open.back()) break;
      }
      if (lane == track.size()) track.emplace_back();
      track[lane].push_back(stop);
      lane_of[k] = static_cast<int>(lane);
    }
    int next_tid = kHostTid + 1;
    emit({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", kHostTid}, {"args", {{"name", "host"}}}});
    emit({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", kHostTid}, {"args", {{"sort_index", kHostTid}}}});
    for (auto& [comm, streams] : streams_of)
      for (uint64_t st : streams) {
        size_t nlanes = std::max<size_t>(1, lanes[{comm, st}].size());
        for (size_t lane = 0; lane < nlanes; ++lane) {
          int tid = next_tid++;
          tid_of[{comm, st, static_cast<int>(lane)}] = tid;
          std::string name = comm >= 0 ? comm_label(p.comms[comm].hash, roles[i][comm]) : "no communicator";
          if (streams.size() > 1) name += " stream " + hex(st);
          if (lane > 0) name += " (overlap " + std::to_string(lane) + ")";
          emit({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
          emit({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
        }
      }

    // With a seq range, host-side events are kept to the time span of the selected ops.
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    if (seq_range || !o.comm.empty()) {
      lo = INT64_MAX;
      hi = INT64_MIN;
      for (const Op& op : p.ops)
        if (op_selected(i, op)) {
          lo = std::min(lo, ts(op.issue_mono_ns));
          hi = std::max(hi, stop_of(op));
        }
    }
    auto in_span = [&](int64_t at) { return at >= lo && at <= hi; };

    std::map<int, int64_t> ordinal;  // per local comm: collective ordinal (p2p ops excluded)
    std::set<std::pair<uint64_t, int64_t>> launches;
    std::map<int64_t, std::string> stack_key;  // stack id -> key in the stacks table ("" = none)
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const Op& op = p.ops[k];
      const bool counted = op.comm >= 0 && op.seq > 0 && classify_op(op.op) != OpClass::kP2P;
      const int64_t ord = counted ? ++ordinal[op.comm] : 0;
      if (!op_selected(i, op)) continue;
      const int tid = tid_of.at({op.comm, op.stream, lane_of[k]});
      const int64_t start = ts(op.issue_mono_ns);
      json args = {{"seq", op.seq}, {"op", vocab::name(op.op)}, {"dtype", vocab::stored_name(op.dtype)}, {"count", op.count}, {"state", vocab::name(op.state)},
                   {"call_index", op.call_index}, {"stream", hex(op.stream)}, {"host_tid", op.tid}};
      if (op.comm >= 0) {
        args["comm"] = p.comms[op.comm].hash;
        args["role"] = roles[i][op.comm];
      }
      if (op.root >= 0) args["root"] = op.root;
      if (op.peer >= 0) args["peer"] = op.peer;
      if (op.redop != vocab::RedOp::None) args["redop"] = vocab::name(op.redop);
      if (!op.parts.empty()) args["peers"] = peers_of(op);
      if (op.rc != 0) args["rc"] = op.rc;
      if (!op.thread_name.empty()) args["thread"] = op.thread_name;
      if (op.graph_exec != 0) args["graph_exec"] = hex(op.graph_exec);
      if (op.stack_id >= 0) {
        auto cached = stack_key.find(op.stack_id);
        if (cached == stack_key.end()) {
          std::string key;
          auto it = p.stacks.find(op.stack_id);
          if (it != p.stacks.end()) {
            key = std::to_string(pid) + ":" + std::to_string(op.stack_id);
            json frames = json::array();
            for (const Frame& f : trim_stack(it->second, o.max_frames))
              frames.push_back(bounded((f.kind == vocab::FrameKind::Python ? "py " : "") + format_frame(f)));
            stacks[key] = std::move(frames);
          }
          cached = stack_key.emplace(op.stack_id, key).first;
        }
        if (!cached->second.empty()) {
          args["stack"] = cached->second;
          const json& frames = stacks[cached->second];
          if (!frames.empty()) args["from"] = frames.front();
        }
      }
      if (!ran(op)) {
        // Captured, failed or simulated: nothing ran, so no duration; a mark where it was called.
        emit({{"ph", "i"}, {"s", "t"}, {"name", std::string(vocab::name(op.op)) + " (" + vocab::name(op.state) + ")"}, {"cat", vocab::name(op.state)},
              {"pid", pid}, {"tid", tid}, {"ts", us(start)}, {"args", std::move(args)}});
        continue;
      }
      if (op.state == vocab::State::GraphLaunched && op.graph_exec != 0) launches.insert({op.graph_exec, start});
      std::string cat = classify_op(op.op) == OpClass::kP2P ? "p2p" : "collective";
      int64_t stop = stop_of(op);
      if (!op.completed) {
        cat = "in_flight";
        args["in_flight"] = true;
      }
      std::string name = vocab::name(op.op) + (op.seq > 0 ? " #" + std::to_string(op.seq) : "");
      emit({{"ph", "X"}, {"name", name}, {"cat", cat}, {"pid", pid}, {"tid", tid}, {"ts", us(start)},
            {"dur", us(std::max<int64_t>(0, sat_sub(stop, start)))}, {"args", std::move(args)}});
      if (counted) {
        members[{p.comms[op.comm].hash, ord}].push_back(placed.size());
        const std::string sig = std::string(vocab::name(op.op)) + " " + vocab::stored_name(op.dtype) + " " +
                                std::to_string(op.count) + " " + std::to_string(op.root) + " " + vocab::name(op.redop);
        placed.push_back({pid, tid, start, signatures.emplace(sig, static_cast<uint32_t>(signatures.size())).first->second});
      }
    }
    for (auto& [exec, at] : launches)
      emit({{"ph", "i"}, {"s", "t"}, {"name", "graph launch"}, {"cat", "graph_launch"}, {"pid", pid},
            {"tid", kHostTid}, {"ts", us(at)}, {"args", {{"graph_exec", hex(exec)}}}});
    for (const Wait& w : p.waits) {
      if (!in_span(ts(w.begin_mono_ns))) continue;
      json args = {{"kind", vocab::name(w.kind)}, {"stream", hex(w.stream)}, {"host_tid", w.tid}, {"call_index", w.call_index}};
      if (w.event != 0) args["event"] = hex(w.event);
      if (w.end_mono_ns >= 0) args["waited_us"] = us(sat_sub(w.end_mono_ns, w.begin_mono_ns));
      else args["returned"] = false;
      emit({{"ph", "i"}, {"s", "t"}, {"name", vocab::name(w.kind)}, {"cat", w.end_mono_ns >= 0 ? "wait" : "wait_blocked"},
            {"pid", pid}, {"tid", kHostTid}, {"ts", us(ts(w.begin_mono_ns))}, {"args", std::move(args)}});
    }
    for (const HangMarker& h : p.hangs)
      emit({{"ph", "i"}, {"s", "p"}, {"name", "hang: " + h.message}, {"cat", "hang"}, {"pid", pid},
            {"tid", kHostTid}, {"ts", us(ts(h.mono_ns))}, {"args", {{"in_flight", h.in_flight}, {"message", h.message}}}});
  }

  // Flows: the members of one collective (same comm, same collective ordinal: the seq when the
  // comm carries no point-to-point ops), chained in rank order. Category "mismatch" when the
  // members' descriptions differ: the arrow then crosses a divergence.
  int64_t flow_id = 0;
  for (auto& [key, list] : members) {
    if (list.size() < 2) continue;
    const size_t first = list[0];  // clang 14 cannot capture the structured binding `list`
    bool same = std::all_of(list.begin(), list.end(), [&](size_t k) { return placed[k].signature == placed[first].signature; });
    std::string name = comm_label(std::get<0>(key)) + " collective #" + std::to_string(std::get<1>(key));
    for (size_t k = 0; k + 1 < list.size(); ++k) {
      const Placed& a = placed[list[k]];
      const Placed& b = placed[list[k + 1]];
      ++flow_id;
      emit({{"ph", "s"}, {"id", flow_id}, {"name", name}, {"cat", same ? "match" : "mismatch"},
            {"pid", a.pid}, {"tid", a.tid}, {"ts", us(a.ts_ns)}});
      emit({{"ph", "f"}, {"bp", "e"}, {"id", flow_id}, {"name", name}, {"cat", same ? "match" : "mismatch"},
            {"pid", b.pid}, {"tid", b.tid}, {"ts", us(b.ts_ns)}});
    }
  }

  // What the timeline does not cover (timeline_evidence, as stderr names it): files skipped or
  // not read, members without a file, contradictory files, dropped records, stopped recorders,
  // histories lost. Empty: the evidence read is whole.
  json evidence = json::array();
  for (const EvidenceGroup& g : group_evidence(timeline_evidence(t, unread)))
    evidence.push_back({{"kind", evidence_kind_name(g.kind)}, {"contradictory", g.contradictory}, {"ranks", g.ranks},
                        {"detail", g.detail}});
  other["evidence"] = std::move(evidence);
  make_printable(stacks);  // trace strings: any bytes (text_escape.h)
  make_printable(other);
  out << "\n],\n\"stacks\":" << stacks.dump(-1, ' ', false, json::error_handler_t::replace)
      << ",\n\"otherData\":" << other.dump(-1, ' ', false, json::error_handler_t::replace) << "}\n";
  return unread;
}

std::string timeline_json(const Schedule& headers, const ProcessRows& rows, const TimelineOptions& options) {
  std::ostringstream out;
  write_timeline_json(headers, rows, options, out);
  return out.str();
}

namespace {

// Display width of a UTF-8 string (code points; the markers used here are one column wide).
size_t width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string pad(const std::string& s, size_t w) { return s + std::string(w > width(s) ? w - width(s) : 0, ' '); }

// The seq of a finding's first issued op on gcomm g, or 0.
int64_t finding_seq(const Schedule& s, const Divergence& d, int g) {
  const std::vector<Side>* sides = d.gcomm == g ? &d.sides : d.gcomm_b == g ? &d.sides_b : nullptr;
  if (!sides) return 0;
  int64_t seq = 0;
  for (const Side& side : *sides)
    if (side.op >= 0) {
      int64_t q = s.procs[side.proc].ops[side.op].seq;
      seq = seq == 0 ? q : std::min(seq, q);
    }
  return seq;
}

}  // namespace

std::string timeline_text(const Analysis& a, const TextTimelineOptions& o, TextTimelineInfo* info) {
  const Schedule& s = *a.schedule;
  const CommIndex& idx = a.index;
  if (idx.comms.empty()) throw TimelineError("the trace has no communicators");
  int g = -1;
  if (!o.comm.empty()) {
    const int n = static_cast<int>(idx.comms.size());
    std::vector<int> hits = select_comms(
        o.comm, n, [&](int k) -> const std::string& { return idx.comms[k].role; },
        [&](int k) -> const std::string& { return idx.comms[k].family; }, [&](int k) -> const GlobalComm& { return idx.comms[k]; });
    if (hits.size() != 1) {
      std::string list;
      for (auto& c : idx.comms) list += "\n  " + comm_label(c.hash, c.role);
      throw TimelineError("'" + o.comm + "' matches " + std::to_string(hits.size()) + " communicators; communicators:" + list);
    }
    g = hits[0];
  } else if (a.first) {
    g = a.first->gcomm;
  } else {
    g = 0;
  }
  const GlobalComm& gc = idx.comms[g];

  // The divergence on this comm: the earliest seq any finding names here.
  int64_t diverge = 0;
  std::string diverge_kind;
  for (const auto* list : {&a.divergences, &a.inversions})
    for (const Divergence& d : *list) {
      int64_t q = finding_seq(s, d, g);
      if (q > 0 && (diverge == 0 || q < diverge)) {
        diverge = q;
        diverge_kind = kind_name(d.kind);
      }
    }

  // Members shown, and each one's ops on this comm by seq.
  std::set<int> want(o.ranks.begin(), o.ranks.end());
  struct Member {
    int rank;
    int proc;
    const ProcComm* pc;
    std::map<int64_t, const SchedOp*> by_seq;
    bool completion_known;
    // Whether a seq its file lacks is unknown (seq_evidence.h), before and after its records'
    // hole: -1 not asked yet, else 0/1. The rule depends on the seq only through the hole.
    int unknown_below = -1, unknown_above = -1;
  };
  std::vector<Member> shown;
  int64_t last_seq = 0;
  for (const CommMember& m : gc.members) {
    int rank = display_rank(s, m.proc);
    if (!want.empty() && !want.count(rank)) continue;
    Member mem{rank, m.proc, &idx.of(m), {}, s.procs[m.proc].completion_known};
    for (auto* list : {&idx.of(m).colls, &idx.of(m).p2p})
      for (uint32_t k : *list) {
        const SchedOp& op = s.procs[m.proc].ops[k];
        mem.by_seq.emplace(op.seq, &op);
        last_seq = std::max<int64_t>(last_seq, op.seq);
      }
    shown.push_back(std::move(mem));
  }
  if (shown.empty()) throw TimelineError("none of the selected ranks is a traced member of " + comm_label(gc.hash, gc.role));
  const int64_t center = o.around > 0 ? o.around : diverge > 0 ? diverge : last_seq;
  int64_t first = std::max<int64_t>(1, center - o.window);
  int64_t last = center + o.window;
  const int64_t span = 2 * static_cast<int64_t>(o.window);
  if (o.from_seq > 0 && o.to_seq > 0) {
    first = o.from_seq;
    last = o.to_seq;
  } else if (o.from_seq > 0) {
    first = o.from_seq;
    last = o.from_seq > INT64_MAX - span ? INT64_MAX : o.from_seq + span;
  } else if (o.to_seq > 0) {
    last = o.to_seq;
    first = std::max<int64_t>(1, o.to_seq - span);
  }
  if (first > last) throw TimelineError("--from-seq " + std::to_string(first) + " is after --to-seq " + std::to_string(last));
  constexpr int64_t kMaxRows = 20001;  // as many as --window allows
  if (last - first >= kMaxRows)
    throw TimelineError("seq " + std::to_string(first) + ".." + std::to_string(last) + " is more than " +
                        std::to_string(kMaxRows) + " rows; the text view shows at most that many (-o FILE.json has no limit)");

  const std::string ok = o.unicode ? "✓" : "ok";
  const std::string waiting = o.unicode ? "…" : "..";
  // A seq a member's file lacks is "not issued" only where its records are whole and its history
  // reaches its process's end; past a hole (dropped records), a stopped recorder or a lost
  // history it is unknown, as analyze and stacks say (seq_evidence.h).
  const std::string unknown_mark = "?";
  bool any_unknown = false;
  auto cell = [&](Member& m, int64_t seq) -> std::string {
    auto it = m.by_seq.find(seq);
    if (it == m.by_seq.end()) {
      int& known = seq > m.pc->complete_through_seq ? m.unknown_above : m.unknown_below;
      if (known < 0) known = !seq_unknown_why(s.procs[m.proc].info, *m.pc, seq, a.hang.any_marker).empty();
      if (!known) return "-";
      any_unknown = true;
      return unknown_mark;
    }
    const SchedOp& op = *it->second;
    const Signature& sig = s.sigs[op.sig];
    std::string text = vocab::name(sig.op);
    if (sig.cls == OpClass::kP2P && sig.peer >= 0) text += " r" + std::to_string(sig.peer);
    if (m.completion_known) text += " " + (op.completed() ? ok : waiting);
    return text;
  };

  // Group ranks whose cells are identical over the whole window (one column for 256 agreeing
  // ranks); columns in order of their lowest rank.
  std::map<std::vector<std::string>, std::vector<int>> groups;
  std::vector<std::vector<std::string>> order;
  for (Member& m : shown) {
    std::vector<std::string> cells;
    for (int64_t q = first; q <= last; ++q) cells.push_back(cell(m, q));
    auto [it, fresh] = groups.try_emplace(cells);
    if (fresh) order.push_back(cells);
    it->second.push_back(m.rank);
  }
  // Drop rows nobody has (past the end of every member's ops). A window where no member's file
  // holds an op but some member's record is unknown (dropped, lost, or a member with no file) is
  // shown whole: "no rank issued" would be a claim about records we do not have.
  const std::vector<int> untraced = untraced_ranks(gc);
  int64_t shown_last = first - 1;
  for (auto& cells : order)
    for (int64_t q = first; q <= last; ++q)
      if (cells[q - first] != "-" && cells[q - first] != unknown_mark) shown_last = std::max(shown_last, q);
  if (shown_last < first && (any_unknown || (!untraced.empty() && want.empty()))) shown_last = last;

  if (shown_last < first)
    throw TimelineError("no rank issued seq " + std::to_string(first) + ".." + std::to_string(last) + " on " +
                        comm_label(gc.hash, gc.role) + " (its last seq is " + std::to_string(last_seq) + ")");
  std::ostringstream out;
  out << comm_label(gc.hash, gc.role) << ", " << gc.nranks << " ranks, seq " << first << ".." << shown_last << "; " << ok
      << " " << progress_word(vocab::State::Enqueued, true) << ", " << waiting << " "
      << progress_word(vocab::State::Enqueued, false) << ", - not issued";
  bool unknown_shown = false;
  for (auto& cells : order)
    for (int64_t q = first; q <= shown_last; ++q) unknown_shown |= cells[q - first] == unknown_mark;
  if (unknown_shown) out << ", " << unknown_mark << " unknown (not recorded: dropped, or after its trace's end)";
  out << "\n";
  std::vector<std::string> headers;
  std::vector<size_t> widths;
  for (auto& cells : order) {
    const auto& ranks = groups[cells];
    headers.push_back((ranks.size() > 1 ? "ranks " : "rank ") + rank_ranges(ranks));
    size_t w = width(headers.back());
    for (auto& c : cells) w = std::max(w, width(c));
    widths.push_back(w + 2);
  }
  const size_t seq_w = std::max<size_t>(5, std::to_string(shown_last).size() + 2);
  std::string head = pad("seq", seq_w);
  for (size_t k = 0; k < headers.size(); ++k) head += pad(headers[k], widths[k]);
  while (!head.empty() && head.back() == ' ') head.pop_back();
  out << head << "\n";
  // Findings on files that contradict another (two files claim one rank, a copy): not claimed
  // (analysis.cpp), listed below as analyze lists them, and their row marked.
  std::vector<const Unproven*> contested;
  std::map<int64_t, std::string> contested_at;
  for (const Unproven& u : a.unproven)
    if (!u.contested.empty() && (u.finding.gcomm == g || u.finding.gcomm_b == g)) {
      contested.push_back(&u);
      if (const int64_t q = finding_seq(s, u.finding, g); q > 0) contested_at.emplace(q, kind_name(u.finding.kind));
    }
  for (int64_t q = first; q <= shown_last; ++q) {
    std::string line = pad(std::to_string(q), seq_w);
    for (size_t k = 0; k < order.size(); ++k) line += pad(order[k][q - first], widths[k]);
    if (q == diverge) line += "<- diverges (" + diverge_kind + ")";
    else if (auto c = contested_at.find(q); c != contested_at.end())
      line += "<- contested (" + c->second + "): files contradict, not claimed";
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  // What keeps this communicator's evidence from being whole, from the analysis's own evidence
  // (analysis.cpp): members' holes on it and members whose history or recorder stopped short,
  // members without a file, files that contradict; grouped as analyze groups them.
  std::vector<std::string> gaps;
  {
    std::set<int> members;
    for (const CommMember& m : gc.members) members.insert(m.proc);
    std::vector<EvidenceIssue> here;
    for (const EvidenceIssue& e : a.evidence) {
      const bool of_member = std::any_of(e.procs.begin(), e.procs.end(), [&](int p) { return members.count(p) > 0; });
      bool take = false;
      switch (e.kind) {
        case EvidenceKind::kEvidenceGap:
        case EvidenceKind::kStoppedBeforeIssue: take = e.comm == gc.hash; break;
        case EvidenceKind::kHistoryLost:
        case EvidenceKind::kRecorderStopped:
        case EvidenceKind::kFrHistoryDropped:
        case EvidenceKind::kBenchmarkSwitches:
        case EvidenceKind::kUnverifiedHistory:
        case EvidenceKind::kDigestInconsistent: take = of_member; break;
        case EvidenceKind::kDroppedRecords: break;  // located per communicator by kEvidenceGap
        default: take = e.contradictory && of_member; break;
      }
      if (take) here.push_back(e);
    }
    if (!untraced.empty())
      gaps.push_back(ranks_phrase(untraced, "comm rank", kMaxRangeSegments) + ": no usable trace file (missing, skipped or of " +
                     "another job): " + (untraced.size() == 1 ? "its ops are" : "their ops are") + " unknown");
    for (const EvidenceGroup& eg : group_evidence(here))
      gaps.push_back(std::string(eg.contradictory ? "contradictory: " : "") + eg.detail);
    for (const Unproven* u : contested) gaps.push_back("not claimed: " + render::unproven_line(a, *u));
    // Unknown cells no evidence item above explains (a member still running, no hang timeout
    // fired: it may issue them yet): the members and why, as stacks says it.
    if (gaps.empty() && unknown_shown) {
      std::map<std::string, std::vector<int>> why;
      for (const Member& m : shown)
        for (int64_t q = first; q <= shown_last; ++q)
          if (!m.by_seq.count(q))
            if (std::string w = seq_unknown_why(s.procs[m.proc].info, *m.pc, q, a.hang.any_marker); !w.empty()) {
              w.pop_back();  // the newline
              why[w.substr(0, w.find(": seq "))].push_back(m.rank);
              break;
            }
      for (auto& [w, ranks] : why) gaps.push_back(ranks_phrase(ranks, "rank", kMaxRangeSegments) + ": " + w);
    }
  }
  if (info) info->unknown_shown = unknown_shown;
  // Bounded traces: the window above is exact; what the size cap retired is known by digest
  // only, and a divergence there is none of these rows (field review G6).
  const CommWindow* win = nullptr;
  for (const CommWindow& w : a.checkpoints.comms)
    if (w.gcomm == g && w.retired_max > 0) win = &w;
  const DigestDivergence* retired = nullptr;
  for (const DigestDivergence& d : a.checkpoints.divergences)
    if (d.gcomm == g) retired = &d;
  if (win) out << window_line(*win) << "\n";
  if (retired)
    out << "(the members diverge in history the size cap retired: between collectives #" << retired->first << " and #"
        << retired->last << ", known by digest only; not in these rows)\n";
  else if (diverge == 0 && !gaps.empty()) {
    // Agreement is claimed only on whole evidence: what was not read whole is named (analyze's
    // evidence items about this communicator and its members, and its findings not claimed).
    out << "no divergence in what was read" << (win && win->unverified ? " (retired history not verified)" : "")
        << "; not claimed as agreement, the evidence is incomplete:\n";
    constexpr size_t kMaxGaps = 8;
    for (size_t k = 0; k < gaps.size() && k < kMaxGaps; ++k) out << "  " << gaps[k] << "\n";
    if (gaps.size() > kMaxGaps) out << "  ... (" << gaps.size() - kMaxGaps << " more; lockstep analyze lists them)\n";
  } else if (diverge == 0 && win && win->unverified)
    out << "(no divergence in the retained window; retired history not verified)\n";
  else if (diverge == 0)
    out << "(no divergence on this communicator)\n";
  // The view shows one communicator: the others are named, and how to pick one.
  if (idx.comms.size() > 1) {
    constexpr size_t kMaxNamed = 8;
    out << "other communicators (--comm picks one):";
    size_t named = 0;
    for (size_t k = 0; k < idx.comms.size() && named < kMaxNamed; ++k)
      if (static_cast<int>(k) != g) out << (named++ ? ", " : " ") << comm_label(idx.comms[k].hash, idx.comms[k].role);
    if (idx.comms.size() - 1 > kMaxNamed) out << ", ... (" << idx.comms.size() - 1 - kMaxNamed << " more)";
    out << "\n";
  }
  return out.str();
}

}  // namespace lockstep
