#include "rank_schedule.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "identity.h"
#include "trace_loader.h"

namespace lockstep::replay {

bool replayable(const Op& op) { return vocab::enqueued_work(op.state); }

RankSchedule load_rank_schedule(const std::string& path) {
  RankSchedule r;
  try {
    r.proc = load_process_file(path);
  } catch (const LoadError& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return r;
}

namespace {

// Units: a single replayable op, or the consecutive rows of one group on one thread.
std::vector<std::vector<size_t>> units_of(const Process& p) {
  std::vector<std::vector<size_t>> units;
  std::map<int64_t, size_t> open;  // tid -> unit index of its open group
  std::map<int64_t, int64_t> open_group;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& o = p.ops[i];
    if (!replayable(o)) continue;
    if (o.group_id >= 0) {
      auto it = open.find(o.tid);
      if (it != open.end() && open_group[o.tid] == o.group_id) {
        units[it->second].push_back(i);
        continue;
      }
      open[o.tid] = units.size();
      open_group[o.tid] = o.group_id;
    } else {
      open.erase(o.tid);
    }
    units.push_back({i});
  }
  return units;
}

std::string unit_key(const Process& p, const std::vector<std::string>& roles, const std::vector<size_t>& unit) {
  std::string k;
  for (size_t i : unit) {
    const Op& o = p.ops[i];
    k += (o.comm >= 0 && o.comm < static_cast<int>(roles.size()) ? roles[o.comm] : "?") + ":" + vocab::name(o.op) + ";";
  }
  return k;
}

}  // namespace

int reorder_like(RankSchedule& mine, const RankSchedule& source) {
  const auto my_roles = structural_comm_roles(mine.proc), src_roles = structural_comm_roles(source.proc);
  const auto my_units = units_of(mine.proc), src_units = units_of(source.proc);
  std::map<std::string, std::vector<size_t>> by_key;  // key -> my units, in my order
  for (size_t u = 0; u < my_units.size(); ++u) by_key[unit_key(mine.proc, my_roles, my_units[u])].push_back(u);
  std::map<std::string, size_t> taken;
  std::vector<size_t> order;
  std::vector<bool> used(my_units.size(), false);
  for (const auto& su : src_units) {
    const std::string k = unit_key(source.proc, src_roles, su);
    auto it = by_key.find(k);
    if (it == by_key.end()) continue;
    size_t& j = taken[k];
    if (j >= it->second.size()) continue;
    order.push_back(it->second[j]);
    used[it->second[j]] = true;
    ++j;
  }
  for (size_t u = 0; u < my_units.size(); ++u)
    if (!used[u]) order.push_back(u);

  int moved = 0;
  for (size_t pos = 0; pos < order.size(); ++pos) moved += order[pos] != pos;

  // Reassign the replayable rows' own call indices in the new order; other rows keep theirs.
  std::vector<int64_t> calls;
  for (const auto& u : my_units)
    for (size_t i : u) calls.push_back(mine.proc.ops[i].call_index);
  std::sort(calls.begin(), calls.end());
  size_t next = 0;
  std::vector<Op> reordered;
  for (size_t u : order)
    for (size_t i : my_units[u]) {
      Op o = mine.proc.ops[i];
      o.call_index = calls[next++];
      reordered.push_back(std::move(o));
    }
  for (const Op& o : mine.proc.ops)
    if (!replayable(o)) reordered.push_back(o);
  std::stable_sort(reordered.begin(), reordered.end(),
                   [](const Op& a, const Op& b) { return a.call_index < b.call_index; });
  mine.proc.ops = std::move(reordered);
  mine.proc.waits.clear();
  return moved;
}

}  // namespace lockstep::replay
