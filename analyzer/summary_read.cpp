#include "summary_read.h"

#include <algorithm>
#include <nlohmann/json.hpp>

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
  return u;
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
  return "read: summary first: " + std::to_string(u.ops_not_read) + " ops of " + std::to_string(u.files_cut) +
         " files not read: collectives " + unread_range(u.cut_min, u.cut_max) + " of " + std::to_string(u.comms_cut) +
         (u.comms_cut == 1 ? " communicator" : " communicators") +
         " known by checkpoint digest only (every member's agrees); their order across communicators and the files' "
         "rows there were not checked (--full-read reads every op)" +
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
                  {"summaries", {{"used", u.summaries.used}, {"files", u.summaries.files}, {"refreshed", u.summaries.refreshed}, {"ignored", ignored}}},
                  {"text", unread_text(u)}};
  return add_json_member(std::move(report_json), "reading", reading.dump(indent, ' ', false, json::error_handler_t::replace), indent);
}

}  // namespace lockstep
