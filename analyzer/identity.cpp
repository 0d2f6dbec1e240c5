#include "identity.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <optional>
#include <string_view>
#include <filesystem>
#include <map>

#include "meta_keys.h"
#include "text_escape.h"

namespace lockstep {

std::string rank_ranges(std::vector<int> r, size_t max_segments) {
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  std::string out;
  size_t segments = 0, i = 0;
  for (; i < r.size() && segments < max_segments; ++segments) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(r[i]) + (j > i ? "-" + std::to_string(r[j]) : "");
    i = j + 1;
  }
  if (i < r.size()) out += ",... (+" + std::to_string(r.size() - i) + " more)";
  return out;
}

bool parse_rank_ranges(const std::vector<std::string>& items, std::vector<int>& out, std::string& why) {
  constexpr int64_t kMost = int64_t(1) << 20;
  // A whole decimal number or nothing (from_chars takes no sign but '-', no space).
  auto number = [](std::string_view t) -> std::optional<int64_t> {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size() || t.empty()) return std::nullopt;
    return v;
  };
  for (const std::string& item : items) {
    const size_t dash = item.find('-', 1);
    const std::string_view text(item);
    const auto lo = number(text.substr(0, dash));
    const auto hi = dash == std::string::npos ? lo : number(text.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi > INT32_MAX) {
      why = "'" + printable(item) + "' is not a rank or a range of ranks (0-7)";
      return false;
    }
    if (static_cast<int64_t>(out.size()) + (*hi - *lo) >= kMost) {
      why = "more than " + std::to_string(kMost) + " ranks";
      return false;
    }
    for (int64_t r = *lo; r <= *hi; ++r) out.push_back(static_cast<int>(r));
  }
  return true;
}

std::string ranks_phrase(std::vector<int> r, const std::string& noun, size_t max_segments) {
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return noun + (r.size() == 1 ? " " : "s ") + rank_ranges(r, max_segments);
}


namespace {

enum class RoleForm {
  kFull,        // comm_roles: commName, else the structure with split colors
  kStructural,  // structural_comm_roles: the structure only
  kFamily,      // comm_families: commName, else the structure without colors
};

std::vector<std::string> roles(const Process& p, RoleForm form) {
  // Creation events in call order: communicators, and NOCOLOR splits (no communicator).
  struct Ev {
    int64_t call;
    int comm;    // index into p.comms, -1: a NOCOLOR split
    int parent;  // index into p.comms, -1: none
  };
  std::vector<Ev> evs;
  for (size_t i = 0; i < p.comms.size(); ++i) evs.push_back({p.comms[i].init_call, static_cast<int>(i), p.comms[i].parent});
  for (const NoColorSplit& n : p.nocolor_splits) evs.push_back({n.call_index, -1, n.parent});
  // Stable: a NOCOLOR split sorts after a communicator created in the same call (none is).
  std::stable_sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) { return a.call < b.call; });
  std::vector<std::string> out(p.comms.size()), structural(p.comms.size());
  std::map<int, int> splits;  // parent -> split calls so far
  int roots = 0;
  // Creation order guarantees a parent's role is known before its children's.
  for (const Ev& e : evs) {
    if (e.parent < 0) {
      if (e.comm >= 0) structural[e.comm] = p.comms[e.comm].created_before_tracing ? "(created before tracing)"
                                                                                   : "init" + std::to_string(roots++);
    } else {
      const int j = splits[e.parent]++;
      if (e.comm >= 0)
        structural[e.comm] =
            out[e.parent] + ".split" + std::to_string(j) +
            (form == RoleForm::kFull ? "(color=" + std::to_string(p.comms[e.comm].split_color) + ")" : "");
    }
    if (e.comm >= 0) {
      const Comm& c = p.comms[e.comm];
      out[e.comm] = form != RoleForm::kStructural && !c.name.empty() ? c.name : structural[e.comm];
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> comm_roles(const Process& p) { return roles(p, RoleForm::kFull); }
std::vector<std::string> structural_comm_roles(const Process& p) { return roles(p, RoleForm::kStructural); }
std::vector<std::string> comm_families(const Process& p) { return roles(p, RoleForm::kFamily); }

std::string short_hash(const std::string& hash) { return hash.substr(0, 8); }

std::string comm_label(const std::string& hash, const std::string& role) {
  return "comm " + short_hash(hash) + (role.empty() ? "" : " (" + role + ")");
}

std::string comm_short_name(const std::string& hash, const std::string& name) {
  return name.empty() ? short_hash(hash) : name;
}

std::string comm_family_label(const std::string& family, size_t communicators) {
  return "comm " + family + " (one of " + std::to_string(communicators) + " communicators of that family)";
}

CommMatch match_comm(const std::string& selector, const std::string& hash, const std::string& role,
                     const std::string& family, const std::string& name) {
  if (selector.empty()) return CommMatch::kNone;
  if (role == selector || (!name.empty() && name == selector)) return CommMatch::kExact;
  if (family == selector) return CommMatch::kFamily;
  if (hash.rfind(selector, 0) == 0) return CommMatch::kHashPrefix;
  return CommMatch::kNone;
}

std::string process_label(const Process& p) {
  std::string out = p.host;
  if (p.pid > 0) out += (out.empty() ? "" : " ") + std::string("pid ") + std::to_string(p.pid);
  if (out.empty()) {
    // A converted Flight Recorder dump: the dump's own name, the file the user has.
    auto fr = p.meta.find(schema::meta::kFrDumpFile);
    out = "file " + std::filesystem::path(fr != p.meta.end() ? fr->second : p.path).filename().string();
  }
  return out;
}

std::string rank_label(const Process& p, int index, bool rank_unique) {
  if (p.global_rank >= 0 && rank_unique) return rank_or_process(p, index);
  return "process " + std::to_string(index) + " (" + process_label(p) + ")";
}

}  // namespace lockstep
