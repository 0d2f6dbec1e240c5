#include "summary_read.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace lockstep {

UnreadSummary unread_summary(const Schedule& s, const Analysis& a) {
  UnreadSummary u;
  u.summary_first = s.summary_first;
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
  return u;
}

std::string unread_text(const UnreadSummary& u) {
  if (u.ops_not_read == 0) return "";
  const std::string through = u.cut_min == u.cut_max ? "#1.." + std::to_string(u.cut_max)
                                                     : "#1..(" + std::to_string(u.cut_min) + " to " + std::to_string(u.cut_max) + ")";
  return "read: summary first: " + std::to_string(u.ops_not_read) + " ops of " + std::to_string(u.files_cut) +
         " files not read: collectives " + through + " of " + std::to_string(u.comms_cut) +
         (u.comms_cut == 1 ? " communicator" : " communicators") +
         " known by checkpoint digest only (every member's agrees); their order across communicators and the files' "
         "rows there were not checked (--full-read reads every op)";
}

std::string add_unread_json(const std::string& report_json, const UnreadSummary& u, int indent) {
  using nlohmann::json;
  json j = json::parse(report_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return report_json;
  j["reading"] = {{"mode", u.summary_first ? "summary_first" : "full"},
                  {"ops_not_read", u.ops_not_read},
                  {"files_cut", u.files_cut},
                  {"communicators_cut", u.comms_cut},
                  {"cut_min", u.cut_min},
                  {"cut_max", u.cut_max},
                  {"text", unread_text(u)}};
  return j.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace lockstep
