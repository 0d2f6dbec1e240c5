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

// What forming units needs of one row.
struct UnitRow {
  bool replayable = false;
  int64_t thread = 0;  // any id of its host thread
  int64_t group = -1;  // -1: not grouped
};

// Units: a single replayable op, or the consecutive rows of one group on one thread.
template <class RowOf>
std::vector<std::vector<size_t>> units_of(size_t nrows, RowOf row_of) {
  std::vector<std::vector<size_t>> units;
  std::map<int64_t, size_t> open;  // thread -> unit index of its open group
  std::map<int64_t, int64_t> open_group;
  for (size_t i = 0; i < nrows; ++i) {
    const UnitRow o = row_of(i);
    if (!o.replayable) continue;
    if (o.group >= 0) {
      auto it = open.find(o.thread);
      if (it != open.end() && open_group[o.thread] == o.group) {
        units[it->second].push_back(i);
        continue;
      }
      open[o.thread] = units.size();
      open_group[o.thread] = o.group;
    } else {
      open.erase(o.thread);
    }
    units.push_back({i});
  }
  return units;
}

// A unit's key: "role:op;" per row, roles by structure (identity.h).
template <class CommOf, class OpOf>
std::string unit_key(const std::vector<std::string>& roles, const std::vector<size_t>& unit, CommOf comm_of, OpOf op_of) {
  std::string k;
  for (size_t i : unit) {
    const int c = comm_of(i);
    k += (c >= 0 && c < static_cast<int>(roles.size()) ? roles[c] : "?") + ":" + vocab::name(op_of(i)) + ";";
  }
  return k;
}

// The new order of mine's units: the j-th unit of source with key K takes mine's j-th unit with
// key K; mine's units source does not have follow, in their order.
std::vector<size_t> unit_order(const std::vector<std::string>& my_keys, const std::vector<std::string>& src_keys) {
  std::map<std::string, std::vector<size_t>> by_key;  // key -> my units, in my order
  for (size_t u = 0; u < my_keys.size(); ++u) by_key[my_keys[u]].push_back(u);
  std::map<std::string, size_t> taken;
  std::vector<size_t> order;
  std::vector<bool> used(my_keys.size(), false);
  for (const std::string& k : src_keys) {
    auto it = by_key.find(k);
    if (it == by_key.end()) continue;
    size_t& j = taken[k];
    if (j >= it->second.size()) continue;
    order.push_back(it->second[j]);
    used[it->second[j]] = true;
    ++j;
  }
  for (size_t u = 0; u < my_keys.size(); ++u)
    if (!used[u]) order.push_back(u);
  return order;
}

int moved_units(const std::vector<size_t>& order) {
  int moved = 0;
  for (size_t pos = 0; pos < order.size(); ++pos) moved += order[pos] != pos;
  return moved;
}

UnitRow row_of(const Op& o) { return {replayable(o), o.tid, o.group_id}; }

std::vector<std::string> keys_of(const Process& p, const std::vector<std::vector<size_t>>& units) {
  const auto roles = structural_comm_roles(p);
  std::vector<std::string> keys;
  for (const auto& u : units)
    keys.push_back(unit_key(roles, u, [&](size_t i) { return p.ops[i].comm; }, [&](size_t i) { return p.ops[i].op; }));
  return keys;
}

std::vector<std::vector<size_t>> units_of(const SchedProcess& p) {
  return units_of(p.ops.size(), [&](size_t i) {
    return UnitRow{true, static_cast<int64_t>(p.op_threads[i]), static_cast<int64_t>(p.group_of(i)) - 1};
  });
}

std::vector<std::string> keys_of(const SchedProcess& p, const std::vector<Signature>& sigs,
                                 const std::vector<std::vector<size_t>>& units) {
  const auto roles = structural_comm_roles(p.info);
  std::vector<std::string> keys;
  for (const auto& u : units)
    keys.push_back(unit_key(roles, u, [&](size_t i) { return static_cast<int>(p.ops[i].comm); },
                            [&](size_t i) { return sigs[p.ops[i].sig].op; }));
  return keys;
}

}  // namespace

int reorder_like(RankSchedule& mine, const RankSchedule& source) {
  const auto my_units = units_of(mine.proc.ops.size(), [&](size_t i) { return row_of(mine.proc.ops[i]); });
  const auto src_units = units_of(source.proc.ops.size(), [&](size_t i) { return row_of(source.proc.ops[i]); });
  const auto order = unit_order(keys_of(mine.proc, my_units), keys_of(source.proc, src_units));
  const int moved = moved_units(order);

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

int reorder_like(SchedProcess& mine, const SchedProcess& source, const std::vector<Signature>& sigs) {
  if (!mine.host_waits_loaded || mine.op_threads.size() != mine.ops.size() || !source.host_waits_loaded ||
      source.op_threads.size() != source.ops.size())
    throw std::runtime_error("--order-from: " + mine.info.path + ": schedule loaded without its side data");
  const auto my_units = units_of(mine), src_units = units_of(source);
  const auto order = unit_order(keys_of(mine, sigs, my_units), keys_of(source, sigs, src_units));
  const int moved = moved_units(order);

  // Every op of the schedule is replayable: the k-th op of the new order takes the k-th call
  // index; its side data (thread, group, overflow stream) moves with it.
  std::vector<int64_t> calls;
  for (const SchedOp& o : mine.ops) calls.push_back(o.call_index);
  std::sort(calls.begin(), calls.end());
  std::vector<SchedOp> ops;
  std::vector<uint32_t> threads;
  std::vector<OpGroup> groups;
  std::vector<std::pair<uint32_t, uint64_t>> overflow;
  ops.reserve(mine.ops.size());
  threads.reserve(mine.ops.size());
  for (size_t u : order)
    for (size_t i : my_units[u]) {
      const uint32_t at = static_cast<uint32_t>(ops.size());
      SchedOp o = mine.ops[i];
      o.call_index = calls[at];
      ops.push_back(o);
      threads.push_back(mine.op_threads[i]);
      if (const uint32_t g = mine.group_of(i)) groups.push_back({at, g});
      if (o.stream == 255) overflow.emplace_back(at, mine.stream_of(i));
    }
  mine.ops = std::move(ops);
  mine.op_threads = std::move(threads);
  mine.groups = std::move(groups);
  mine.overflow_streams = std::move(overflow);
  mine.waits.clear();  // they refer to the old order
  return moved;
}

}  // namespace lockstep::replay
