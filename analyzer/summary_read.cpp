#include "summary_read.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "checkpoints.h"
#include "identity.h"
#include "text_escape.h"

namespace lockstep {

UnreadSummary unread_summary(const Schedule& s, const Analysis& a) {
  UnreadSummary u;
  u.summary_first = s.summary_first;
  u.summaries = s.summaries;
  for (const SchedProcess& p : s.procs) {
    u.ops_not_read += p.unread_ops;
    u.files_cut += p.unread_ops > 0;
  }
  for (size_t g = 0; g < a.index.comms.size(); ++g) {
    int64_t cut = 0;
    for (const CommMember& m : a.index.comms[g].members) {
      const auto& unread = s.procs[m.proc].unread;
      if (static_cast<size_t>(m.local) < unread.size()) cut = std::max(cut, unread[m.local].collectives);
    }
    if (cut == 0) continue;
    u.cut_min = u.comms_cut == 0 ? cut : std::min(u.cut_min, cut);
    u.cut_max = std::max(u.cut_max, cut);
    ++u.comms_cut;
  }
  if (u.ops_not_read > 0) {
    UnreadProof p = prove_unread(s, a.index);
    u.order_proven = p.order, u.order_open = std::move(p.order_open);
    u.all_to_all_proven = p.all_to_all, u.all_to_all_open = std::move(p.all_to_all_open);
  }
  return u;
}

UnreadProof prove_unread(const Schedule& s, const CommIndex& idx) {
  UnreadProof proof;
  auto who = [&](int proc) { return shown_rank_label(s.procs[proc].info, proc); };
  auto comm_of = [&](const GlobalComm& g) { return comm_label(g.hash, g.role); };
  auto cut_of = [&](const CommMember& m) -> const SchedProcess::UnreadPrefix* {
    const auto& unread = s.procs[m.proc].unread;
    return static_cast<size_t>(m.local) < unread.size() && unread[m.local].collectives > 0 ? &unread[m.local] : nullptr;
  };
  auto order_open = [&](std::string why) {
    if (proof.order) proof.order = false, proof.order_open = std::move(why);
  };
  for (const GlobalComm& g : idx.comms) {
    if (g.members.size() < 2) continue;
    // Every member's collectives were chained into its order digest by this communicator's id
    // in its file: the same id on every member, or equal digests prove nothing.
    bool collectives = false;
    for (const CommMember& m : g.members) collectives |= !idx.of(m).colls.empty() || cut_of(m);
    const CommMember& m0 = g.members[0];
    const int64_t id0 = s.procs[m0.proc].info.comms[m0.local].local_id;
    for (const CommMember& m : g.members)
      if (collectives && s.procs[m.proc].info.comms[m.local].local_id != id0)
        order_open(comm_of(g) + " has id " + std::to_string(id0) + " in " + who(m0.proc) + "'s file and " +
                   std::to_string(s.procs[m.proc].info.comms[m.local].local_id) + " in " + who(m.proc) +
                   "'s (created in another order), so their order digests cannot be compared");
    // The read cuts every member of a communicator alike; a member read whole beside members cut
    // (a read that fell back for some files only) leaves the order before the cut unproven.
    const SchedProcess::UnreadPrefix* u0 = nullptr;
    for (const CommMember& m : g.members)
      if ((u0 = cut_of(m))) break;
    if (!u0) continue;  // not cut
    const int64_t k = u0->collectives;
    const Comm::Checkpoint* first = nullptr;
    int first_proc = -1;
    const SchedProcess::UnreadPrefix* first_a2a = nullptr;  // the first member with one all-to-all
    int first_a2a_proc = -1;
    for (const CommMember& m : g.members) {
      const SchedProcess::UnreadPrefix* u = cut_of(m);
      const Comm::Checkpoint* cp = u && u->collectives == k ? checkpoint_at(s.procs[m.proc].info.comms[m.local], k) : nullptr;
      if (!u || u->collectives != k) {
        order_open(comm_of(g) + ": " + who(m.proc) + "'s file was read " +
                   (u ? "from collective #" + std::to_string(u->collectives + 1) : std::string("whole")) +
                   ", another member's from #" + std::to_string(k + 1) + ": their orders before are not compared");
      } else if (!cp || cp->order_count <= 0) {
        order_open(who(m.proc) + "'s file holds no order digest at " + comm_of(g) + " collective #" + std::to_string(k) +
                   " (recorded before lockstep wrote them, or its collectives reached the recorder out of order)");
      } else if (!first) {
        first = cp, first_proc = m.proc;
      } else if (cp->order_count != first->order_count || cp->order_digest != first->order_digest) {
        order_open(who(first_proc) + " and " + who(m.proc) + " issued the collectives before " + comm_of(g) +
                   " collective #" + std::to_string(k) + " in different orders across communicators (their order "
                   "digests differ there: " + std::to_string(first->order_count) + " and " + std::to_string(cp->order_count) +
                   " collectives in all)");
      }
      if (proof.all_to_all && u) {
        if (u->all_to_all == SchedProcess::UnreadPrefix::kAllToAllOpen)
          proof.all_to_all = false,
          proof.all_to_all_open = comm_of(g) + ": " + who(m.proc) + "'s all-to-alls have per-peer splits or several "
                                  "signatures, which the checkpoint digest does not hold: those before the cut were not paired";
        else if (u->all_to_all == SchedProcess::UnreadPrefix::kOneAllToAll && !first_a2a)
          first_a2a = u, first_a2a_proc = m.proc;
        else if (u->all_to_all == SchedProcess::UnreadPrefix::kOneAllToAll && u->all_to_all_key != first_a2a->all_to_all_key)
          proof.all_to_all = false,
          proof.all_to_all_open = comm_of(g) + ": " + who(first_a2a_proc) + " and " + who(m.proc) + " issued all-to-alls "
                                  "of different counts, which the checkpoint digest does not hold: those before the cut were not compared";
      }
    }
  }
  return proof;
}

namespace {
std::string summaries_text(const UnreadSummary& u) {
  std::string text;
  if (u.summaries.used > 0)
    text += "read: " + std::to_string(u.summaries.used) + (u.summaries.used == 1 ? " node summary" : " node summaries") +
            " (lockstep summarize) stood for " + std::to_string(u.summaries.files) + " files, checked unchanged" +
            (u.summaries.refreshed == 0 ? std::string()
                                        : " (" + std::to_string(u.summaries.refreshed) +
                                              " of them refreshed since only by their recorder's heartbeat: their last flush "
                                              "taken forward by the file's modification time)");
  // One line per reason: summaries of an older format, or written before the job's end, are
  // ignored on every node alike (2,048 nodes: one line, not 2,048).
  std::vector<std::pair<std::string, std::vector<std::string>>> by_reason;
  for (const SkippedFile& f : u.summaries.ignored) {
    auto it = std::find_if(by_reason.begin(), by_reason.end(), [&](const auto& r) { return r.first == f.reason; });
    if (it == by_reason.end()) it = by_reason.insert(by_reason.end(), {f.reason, {}});
    it->second.push_back(f.path);
  }
  constexpr size_t kShown = 3, kReasons = 8;
  size_t shown_reasons = 0, more = 0;
  for (const auto& [reason, paths] : by_reason) {
    if (shown_reasons++ == kReasons) {
      for (size_t r = kReasons; r < by_reason.size(); ++r) more += by_reason[r].second.size();
      text += "\nread: and " + std::to_string(more) + " more node summaries ignored, their files read (--json lists every one)";
      break;
    }
    text += std::string(text.empty() ? "" : "\n");
    if (paths.size() == 1) {
      text += "read: node summary ignored, its files read: " + printable(paths[0]) + ": " + printable(reason);
      continue;
    }
    text += "read: " + std::to_string(paths.size()) + " node summaries ignored, their files read: " + printable(reason) + ": ";
    for (size_t i = 0; i < paths.size() && i < kShown; ++i) text += (i ? ", " : "") + printable(paths[i]);
    if (paths.size() > kShown) text += " and " + std::to_string(paths.size() - kShown) + " more (--json lists every one)";
  }
  return text;
}
}  // namespace

std::string unread_range(int64_t cut_min, int64_t cut_max) {
  return cut_min == cut_max ? "#1.." + std::to_string(cut_max)
                            : "#1..(" + std::to_string(cut_min) + " to " + std::to_string(cut_max) + ")";
}

std::string unread_text(const UnreadSummary& u) {
  const std::string summaries = summaries_text(u);
  if (u.ops_not_read == 0) return summaries;
  const std::string proven = u.order_proven && u.all_to_all_proven ? "; their order across communicators by order digest"
                             : u.order_proven ? "; their order across communicators by order digest, not their all-to-alls' splits"
                             : "; not their order across communicators";
  return "read: summary first: " + std::to_string(u.ops_not_read) + " ops of " + std::to_string(u.files_cut) +
         " files not read: collectives " + unread_range(u.cut_min, u.cut_max) + " of " + std::to_string(u.comms_cut) +
         (u.comms_cut == 1 ? " communicator" : " communicators") +
         " known by checkpoint digest (every member's agrees)" + proven + " (--full-read reads every op)" +
         (summaries.empty() ? "" : "\n" + summaries);
}

std::string add_json_member(std::string report_json, const std::string& key, const std::string& value_json,
                            int indent) {
  const size_t end = report_json.find_last_not_of(" \n\r\t");
  if (end == std::string::npos || report_json[end] != '}' || report_json.find_first_not_of(" \n\r\t") == end ||
      report_json[report_json.find_first_not_of(" \n\r\t")] != '{')
    return report_json;
  const size_t last = report_json.find_last_not_of(" \n\r\t", end - 1);
  const bool empty = report_json[last] == '{';
  std::string value = value_json;  // nested one level: its lines indented once more
  const std::string pad = indent > 0 ? std::string(static_cast<size_t>(indent), ' ') : "";
  if (indent > 0)
    for (size_t i = value.find('\n'); i != std::string::npos; i = value.find('\n', i + 1)) value.insert(i + 1, pad);
  std::string member = (empty ? "" : ",") + std::string(indent >= 0 ? "\n" : "") + pad +
                       nlohmann::json(key).dump() + (indent >= 0 ? ": " : ":") + value;
  // In place: the report of many ranks is tens of MB, copied once per member added otherwise.
  const bool newline = report_json.back() == '\n';
  std::string tail = report_json.substr(end);
  report_json.resize(last + 1);
  report_json += member;
  if (indent >= 0) report_json += '\n';
  report_json += tail;
  if (!newline) report_json += '\n';
  return report_json;
}

std::string add_unread_json(std::string report_json, const UnreadSummary& u, int indent) {
  using nlohmann::json;
  json ignored = json::array();
  for (const SkippedFile& f : u.summaries.ignored) ignored.push_back({{"path", printable(f.path)}, {"reason", printable(f.reason)}});
  const json reading = {{"mode", u.summary_first ? "summary_first" : "full"},
                  {"ops_not_read", u.ops_not_read},
                  {"files_cut", u.files_cut},
                  {"communicators_cut", u.comms_cut},
                  {"cut_min", u.cut_min},
                  {"cut_max", u.cut_max},
                  {"order_proven", u.order_proven},
                  {"all_to_all_proven", u.all_to_all_proven},
                  {"summaries", {{"used", u.summaries.used}, {"files", u.summaries.files}, {"refreshed", u.summaries.refreshed}, {"ignored", ignored}}},
                  {"text", unread_text(u)}};
  return add_json_member(std::move(report_json), "reading", reading.dump(indent, ' ', false, json::error_handler_t::replace), indent);
}

}  // namespace lockstep
