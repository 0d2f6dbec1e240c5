// The versioned JSON report of an Analysis (`lockstep analyze --json`, docs/analyzer.md).
#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "analysis_render.h"
#include "text_escape.h"

namespace lockstep {

using namespace render;

namespace {

using nlohmann::json;

json frame_json(const Frame& f) {
  json j = {{"kind", f.kind}, {"function", f.function}};
  if (!f.file.empty()) j["file"] = f.file, j["line"] = f.line;
  if (!f.module.empty()) j["module"] = f.module, j["offset"] = f.offset;
  return j;
}

json side_json(const Ctx& c, const Side& sd, int g) {
  json j = {{"rank", c.rank(sd.proc)}, {"comm_rank", sd.comm_rank}, {"host", c.s.procs[sd.proc].info.host},
            {"pid", c.s.procs[sd.proc].info.pid}, {"issued", sd.op >= 0}};
  if (sd.op < 0) {
    j["last_on_comm"] = c.last_on(sd.proc, g);
    if (!c.a.history.empty()) j["history"] = history_name(c.a.history[sd.proc]);
    return j;
  }
  const SchedOp& o = c.sop(sd);
  const Signature& sig = c.s.sigs[o.sig];
  j["op"] = vocab::name(sig.op);
  j["dtype"] = vocab::stored_name(sig.dtype);
  j["count"] = sig.count;
  j["root"] = sig.root >= 0 ? json(sig.root) : json(nullptr);
  j["peer"] = sig.peer >= 0 ? json(sig.peer) : json(nullptr);
  j["redop"] = sig.redop == vocab::RedOp::None ? json(nullptr) : json(vocab::name(sig.redop));
  j["seq"] = o.seq;
  j["call_index"] = o.call_index;
  j["state"] = op_state(c.s, sd.proc, o);
  j["describe"] = describe_signature(sig);
  json parts = json::array();
  for (auto& p : sig.parts)
    parts.push_back({{"op", p.op}, {"dtype", p.dtype}, {"count", p.count}, {"peer", p.peer >= 0 ? json(p.peer) : json(nullptr)}});
  j["parts"] = std::move(parts);
  auto frames = c.stack_of(sd);
  json st = json::array();
  for (auto& f : frames) st.push_back(frame_json(f));
  j["stack"] = std::move(st);
  if (const std::string note = c.stack_note(sd, frames); !note.empty()) j["stack_note"] = note;  // none recorded, or unreadable
  j["from"] = frame_origin(frames);
  return j;
}

json finding_json(const Ctx& c, const Divergence& d) {
  json j = {{"kind", kind_name(d.kind)},
            {"comm", c.comm(d.gcomm).hash},
            {"role", c.comm(d.gcomm).role},
            {"nranks", c.comm(d.gcomm).nranks},
            {"ordinal", d.ordinal},
            {"detail", d.detail}};
  // seq as the members see it: equal unless point-to-point traffic shifted some members'.
  std::set<uint32_t> seqs;
  for (auto& sd : d.sides)
    if (sd.op >= 0) seqs.insert(c.sop(sd).seq);
  j["seq"] = seqs.size() == 1 ? json(*seqs.begin()) : json(nullptr);
  json sides = json::array();
  for (auto& sd : d.sides) sides.push_back(side_json(c, sd, d.gcomm));
  j["sides"] = std::move(sides);
  json odd = json::array();
  for (size_t i = 0; i < d.odd.size() && i < kMaxListedOdd; ++i) odd.push_back(c.rank(d.odd[i]));
  j["odd_ranks"] = std::move(odd);
  j["odd_count"] = d.odd.size();
  if (!d.groups.empty()) {
    // Every member is in one group; sides list only some of them (kMaxListedSides).
    json groups = json::array();
    for (size_t i = 0; i < d.groups.size() && i < kMaxListedGroups; ++i) {
      const SideGroup& g = d.groups[i];
      json gj = {{"count", g.procs.size()}, {"ranks", c.ranges(g.procs)}, {"odd", g.odd}};
      if (d.kind == FindingKind::kDigestMismatch) gj["digest"] = c.hex(g.digest);
      else gj["issued"] = g.sig == kNotIssued ? json(nullptr) : json(describe_signature(c.s.sigs[g.sig]));
      groups.push_back(std::move(gj));
    }
    j["groups"] = std::move(groups);
    j["groups_omitted"] = d.groups.size() > kMaxListedGroups ? d.groups.size() - kMaxListedGroups : 0;
    j["members"] = d.members;
    j["sides_omitted"] = d.members > d.sides.size() ? d.members - d.sides.size() : 0;
  }
  // What the finding rests on: ops compared one by one (exact) or retired history compared by
  // checkpoint digest (digest).
  j["evidence"] = d.kind == FindingKind::kDigestMismatch ? "digest" : "exact";
  if (d.kind == FindingKind::kDigestMismatch) {
    j["ordinal_first"] = d.ordinal_first;
    j["ordinal_last"] = d.ordinal;
  }
  if (d.kind == FindingKind::kOrderInversion) {
    j["comm_b"] = c.comm(d.gcomm_b).hash;
    j["role_b"] = c.comm(d.gcomm_b).role;
    j["ordinal_b"] = d.ordinal_b;
    json sb = json::array();
    for (auto& sd : d.sides_b) sb.push_back(side_json(c, sd, d.gcomm_b));
    j["sides_b"] = std::move(sb);
  }
  return j;
}

// The per-rank arrays of a large job's report (processes, evidence, comms, hang.ranks) are
// written element by element as the report is written: each element is built, dumped and
// written in chunks of about 1 MiB, where a placeholder held the array's place in the dumped DOM
// of the rest. One DOM of the whole report was most of the analyzer's memory and a third of its
// CPU time at 16,384 ranks; the arrays' whole text was 200 MB at 131,072.
class SplicedArrays {
 public:
  using Sink = std::function<void(std::string_view)>;
  // An array whose closing bracket is indented `depth` levels (top-level members: 1).
  class Array {
   public:
    void add(const json& e) {
      if (text_.size() > kChunk) flush();
      if (text_.capacity() < kChunk) text_.reserve(kChunk + kChunk / 4);
      text_ += n_++ ? ",\n" : "[\n";
      text_ += inner_;
      // Written in place at its indentation, as e.dump(2) indented line by line would be.
      nlohmann::detail::serializer<json> out(nlohmann::detail::output_adapter<char>(text_), ' ',
                                             json::error_handler_t::replace);
      out.dump(e, true, false, 2, static_cast<unsigned>(inner_.size()));
    }

   private:
    friend class SplicedArrays;
    static constexpr size_t kChunk = size_t(1) << 20;
    Array(int depth, const Sink& sink)
        : sink_(sink), inner_(static_cast<size_t>(2 * (depth + 1)), ' '), outer_(static_cast<size_t>(2 * depth), ' ') {}
    void flush() {
      sink_(text_);
      text_.clear();
    }
    void finish() {
      if (n_ == 0) text_ = "[]";
      else text_ += "\n" + outer_ + "]";
      flush();
    }
    const Sink& sink_;
    std::string text_, inner_, outer_;
    size_t n_ = 0;
  };
  using Fill = std::function<void(Array&)>;

  // The placeholder to store in the DOM in place of the array that `fill` makes when the report is
  // written (what it reads must live until then).
  json hold(int depth, Fill fill) {
    const std::string tag = "\x01lockstep:spliced:" + std::to_string(held_.size()) + "\x01";
    held_.push_back({json(tag).dump(), depth, std::move(fill)});
    return tag;
  }
  // The report through `put`: `j` dumped (and given the members `edit` adds), each placeholder
  // replaced by its array as it is made. A placeholder's text found other than once (a directory
  // path that holds it) puts the arrays into the DOM instead.
  void write(json& j, const std::function<std::string(std::string)>& edit, const Sink& put) {
    std::string out = j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    if (edit) out = edit(std::move(out));
    std::vector<size_t> at;
    for (const Held& h : held_) {
      const size_t i = out.find(h.placeholder);
      if (i == std::string::npos || out.find(h.placeholder, i + 1) != std::string::npos) return write_in_dom(j, edit, put);
      at.push_back(i);
    }
    std::vector<size_t> order(held_.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return at[x] < at[y]; });
    const std::string_view text(out);
    size_t from = 0;
    for (size_t k : order) {
      put(text.substr(from, at[k] - from));
      Array array(held_[k].depth, put);
      held_[k].fill(array);
      array.finish();
      from = at[k] + held_[k].placeholder.size();
    }
    put(text.substr(from));
  }

 private:
  struct Held {
    std::string placeholder;  // as dumped, quotes included
    int depth = 1;
    Fill fill;
  };
  void write_in_dom(json& j, const std::function<std::string(std::string)>& edit, const Sink& put) {
    std::function<void(json&)> replace = [&](json& v) {
      if (v.is_string()) {
        for (const Held& h : held_)
          if (json(v).dump(-1, ' ', false, json::error_handler_t::replace) == h.placeholder) {
            std::string text;
            const Sink into = [&text](std::string_view t) { text.append(t); };
            Array array(h.depth, into);
            h.fill(array);
            array.finish();
            return void(v = json::parse(text));
          }
      } else if (v.is_structured()) {
        for (auto& e : v) replace(e);
      }
    };
    replace(j);
    std::string out = j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    if (edit) out = edit(std::move(out));
    put(out);
  }
  std::vector<Held> held_;
};

}  // namespace

std::string render_json(const Analysis& a, TraceDetails& details, const ReportOptions& opt) {
  std::string out;
  write_json(a, details, opt, {}, [&out](std::string_view t) { out.append(t); });
  return out;
}

void write_json(const Analysis& a, TraceDetails& details, const ReportOptions& opt,
                const std::function<std::string(std::string)>& add_members,
                const std::function<void(std::string_view)>& put) {
  const Schedule& s = *a.schedule;
  Ctx c{a, s, details, opt};
  json j;
  j["schema"] = "lockstep.analysis";
  j["version"] = kJsonReportVersion;
  j["dir"] = printable(s.dir);
  j["verdict"] = verdict_name(a.verdict());
  j["clean"] = a.verdict() == Verdict::kClean;
  j["incomplete"] = a.incomplete();
  j["summary"] = summary_line(a);
  j["retired_history"] = window_note(a).empty() ? json(nullptr) : json(window_note(a));
  SplicedArrays spliced;
  j["evidence"] = spliced.hold(1, [&](SplicedArrays::Array& evidence) {
    for (auto& e : a.evidence) {
      // Details name files, whose names are any bytes (text_escape.h).
      json ej = {{"kind", evidence_kind_name(e.kind)}, {"contradictory", e.contradictory}, {"ranks", e.ranks}, {"detail", printable(e.detail)}};
      if (e.from_seq > 0) ej["comm"] = e.comm, ej["from_seq"] = e.from_seq;
      if (!e.gap_cause.empty()) ej["gap_cause"] = e.gap_cause;
      evidence.add(ej);
    }
  });
  // The same issues as the text prints them: one entry per kind and text, with its ranks.
  const std::vector<EvidenceGroup> evidence_groups = group_evidence(a.evidence);
  json grouped = json::array();
  for (auto& g : evidence_groups)
    grouped.push_back({{"kind", evidence_kind_name(g.kind)}, {"contradictory", g.contradictory},
                       {"ranks", rank_ranges(g.ranks)}, {"count", g.issues.size()}, {"detail", printable(g.detail)}});
  j["evidence_groups"] = std::move(grouped);
  json unproven = json::array();
  for (auto& u : a.unproven)
    unproven.push_back({{"kind", kind_name(u.finding.kind)}, {"comm", a.index.comms[u.finding.gcomm].hash},
                        {"ordinal", u.finding.ordinal}, {"behind_ranks", ranks_of(s, u.behind)},
                        {"lost_ranks", ranks_of(s, u.lost)}, {"stopped_ranks", ranks_of(s, u.stopped)},
                        {"contested_ranks", distinct_ranks_of(s, u.contested)},
                        {"peer_completed", u.peer_completed},
                        {"detail", unproven_line(a, u)}});
  j["unproven"] = std::move(unproven);
  j["live_ranks"] = ranks_of(s, a.live);
  j["processes"] = spliced.hold(1, [&](SplicedArrays::Array& procs) {
  for (size_t p = 0; p < s.procs.size(); ++p) {
    auto& i = s.procs[p].info;
    json pj = {{"rank", c.rank(static_cast<int>(p))},
                     {"host", i.host},
                     {"pid", i.pid},
                     {"file", printable(i.shown_path())},
                     {"ops", static_cast<int64_t>(s.procs[p].ops.size()) + s.procs[p].unread_ops},
                     {"unsequenced_ops", s.procs[p].unsequenced_ops},
                     {"finished", i.finished},
                     {"exit_reason", i.exit_reason},
                     {"dropped_records", i.dropped_records},
                     {"history", history_name(a.history[p])},
                     {"status", status_name(a.hang.ranks[p].status)}};
    add_process_identity_json(pj, i);
    procs.add(pj);
  }
  });
  add_identity_json(j, s, a.hosts);
  json skipped = json::array();
  for (auto& sk : s.skipped) skipped.push_back({{"path", printable(sk.path)}, {"reason", printable(sk.reason)}});
  j["skipped"] = std::move(skipped);
  // Every caveat in one list of lines (as the text report prints them).
  json warnings = json::array();
  for (auto& g : evidence_groups) warnings.push_back("incomplete: " + printable(g.detail));
  for (auto& w : a.index.warnings) warnings.push_back(printable(w));
  for (auto& u : a.unproven)  // stopped members: in the evidence
    if (u.noted()) warnings.push_back(unproven_line(a, u));
  j["warnings"] = std::move(warnings);
  j["comms"] = spliced.hold(1, [&](SplicedArrays::Array& comms) {
  for (auto& g : a.index.comms) {
    json members = json::array();
    int64_t longest = 0;
    for (auto& m : g.members) {
      members.push_back({{"rank", c.rank(m.proc)}, {"comm_rank", m.rank}});
      longest = std::max(longest, a.index.of(m).end());
    }
    json cj = {{"hash", g.hash}, {"role", g.role}, {"name", g.name}, {"nranks", g.nranks}, {"members", std::move(members)},
               {"collectives", longest}};
    size_t gi = &g - a.index.comms.data();
    if (gi < a.checkpoints.comms.size()) {
      const CommWindow& w = a.checkpoints.comms[gi];
      // Exact: retained on every member, compared op by op. Digest: retired, proven by checkpoints.
      cj["history"] = {{"retired_min", w.retired_min}, {"retired_max", w.retired_max}, {"cap_retired_max", w.cap_retired_max},
                       {"exact_first", w.exact_first}, {"exact_last", w.exact_last},
                       {"digest_through", w.digest_through}, {"unverified", w.unverified},
                       {"p2p_cut", w.p2p_cut}};
    }
    comms.add(cj);
  }
  });
  j["first_divergence"] = a.first ? finding_json(c, *a.first) : json(nullptr);
  json divs = json::array();
  for (auto& d : a.divergences) divs.push_back(finding_json(c, d));
  j["divergences"] = std::move(divs);
  json inv = json::array();
  for (auto& d : a.inversions) inv.push_back(finding_json(c, d));
  j["order_inversions"] = std::move(inv);
  json hang = {{"hung", a.hang.hung}, {"hang_timeout_fired", a.hang.any_marker}};
  hang["ranks"] = spliced.hold(2, [&](SplicedArrays::Array& ranks) {
  for (auto& r : a.hang.ranks) {
    const SchedProcess& sp = s.procs[r.proc];
    json rj = {{"rank", c.rank(r.proc)}, {"status", status_name(r.status)}, {"in_flight", r.in_flight}};
    if (!r.why.empty()) rj["why"] = r.why;
    if (r.in_flight_for_ns >= 0) {  // hang.h RankHang: stopped with ops in flight
      rj["in_flight_for_ms"] = r.in_flight_for_ns / 1'000'000;
      rj["stopped_in_flight"] = r.stopped_in_flight;
    }
    auto opj = [&](uint32_t i) {
      const SchedOp& o = sp.ops[i];
      return json{{"comm", sp.info.comms[o.comm].hash}, {"seq", o.seq}, {"op", s.sigs[o.sig].op},
                  {"call_index", o.call_index}, {"describe", describe_signature(s.sigs[o.sig])}};
    };
    rj["last_completed"] = r.last_completed >= 0 ? opj(static_cast<uint32_t>(r.last_completed)) : json(nullptr);
    json blocked = json::array();
    for (auto& b : r.blocked) {
      json bj = opj(b.op);
      bj["queued_behind_it"] = b.queued_behind_it;
      if (b.last_candidate != b.op) bj["stuck_in_one_up_to"] = opj(b.last_candidate);  // hang.h BlockedOp
      json w = json::array();
      for (auto& x : b.waits) w.push_back({{"rank", c.rank(x.proc)}, {"reason", x.reason}});
      bj["waits_for"] = std::move(w);
      blocked.push_back(std::move(bj));
    }
    rj["blocked"] = std::move(blocked);
    ranks.add(rj);
  }
  });
  json cycles = json::array();
  for (auto& cyc : a.hang.cycles) {
    json hops = json::array();
    for (auto& h : cyc.hops) {
      const SchedOp& o = s.procs[h.proc].ops[h.op];
      hops.push_back({{"rank", c.rank(h.proc)}, {"comm", s.procs[h.proc].info.comms[o.comm].hash}, {"seq", o.seq},
                      {"op", s.sigs[o.sig].op}, {"waits_for", c.rank(h.waits_for)}});
    }
    cycles.push_back({{"communicators", cyc.comms}, {"hops", std::move(hops)}});
  }
  hang["cycles"] = std::move(cycles);
  json groups = json::array();
  for (auto& g : a.hang.groups) {
    std::vector<int> r;
    for (int p : g.procs) r.push_back(c.rank(p));
    groups.push_back({{"ranks", rank_ranges(r)}, {"count", r.size()}, {"summary", g.summary}});
  }
  hang["groups"] = std::move(groups);
  j["hang"] = std::move(hang);
  j["coverage"] = json::parse(coverage_json(s, a.coverage));
  // Trace strings are printable already (loader), file names escaped above; replace: a last guard.
  spliced.write(j, add_members, put);
}

}  // namespace lockstep
