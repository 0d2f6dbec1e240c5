#include "rank_schedule.h"

#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>

#include "trace_loader.h"

namespace lockstep::replay {

bool replayable(const Op& op) { return op.state == "enqueued" || op.state == "graph_launched"; }

std::vector<NoColorSplit> load_nocolor_splits(const Process& p) {
  std::vector<NoColorSplit> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(p.path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw std::runtime_error("cannot open " + p.path + ": " + msg);
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> guard(db, sqlite3_close);
  sqlite3_busy_timeout(db, 2000);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db,
                         "SELECT call_index, comm_id FROM api_calls WHERE name = 'ncclCommSplit' AND rc = 0 "
                         "AND detail LIKE '%NOCOLOR%' ORDER BY call_index",
                         -1, &st, nullptr) != SQLITE_OK)
    return out;  // a file without api_calls has none
  while (sqlite3_step(st) == SQLITE_ROW) {
    NoColorSplit s;
    s.call_index = sqlite3_column_int64(st, 0);
    const int64_t comm_id = sqlite3_column_int64(st, 1);
    for (size_t i = 0; i < p.comms.size(); ++i)
      if (p.comms[i].local_id == comm_id) s.parent = static_cast<int>(i);
    if (s.parent >= 0) out.push_back(s);
  }
  sqlite3_finalize(st);
  return out;
}

std::vector<int> load_shrunk_comms(const Process& p) {
  std::vector<int> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(p.path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return out;
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> guard(db, sqlite3_close);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT id FROM comms WHERE parent_id IS NOT NULL AND split_color IS NULL", -1, &st,
                         nullptr) != SQLITE_OK)
    return out;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const int64_t id = sqlite3_column_int64(st, 0);
    for (size_t i = 0; i < p.comms.size(); ++i)
      if (p.comms[i].local_id == id) out.push_back(static_cast<int>(i));
  }
  sqlite3_finalize(st);
  return out;
}

RankSchedule load_rank_schedule(const std::string& path) {
  RankSchedule r;
  try {
    r.proc = load_process_file(path);
  } catch (const LoadError& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  r.nocolor = load_nocolor_splits(r.proc);
  r.shrunk = load_shrunk_comms(r.proc);
  return r;
}

std::vector<std::string> comm_roles(const RankSchedule& r) {
  const auto& comms = r.proc.comms;
  // Creation events in call order: (call_index, comm index or -1 for NOCOLOR, parent).
  struct Ev { int64_t call; int comm; int parent; };
  std::vector<Ev> evs;
  for (size_t i = 0; i < comms.size(); ++i) evs.push_back({comms[i].init_call, static_cast<int>(i), comms[i].parent});
  for (const auto& n : r.nocolor) evs.push_back({n.call_index, -1, n.parent});
  std::sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) { return a.call < b.call; });
  std::vector<std::string> roles(comms.size());
  std::map<int, int> splits_of;  // parent -> split calls so far
  int roots = 0;
  for (const Ev& e : evs) {
    if (e.parent < 0) {
      if (e.comm >= 0) roles[e.comm] = "root#" + std::to_string(roots++);
      continue;
    }
    const int k = splits_of[e.parent]++;
    if (e.comm >= 0) roles[e.comm] = roles[e.parent] + "/split#" + std::to_string(k);
  }
  return roles;
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
    k += (o.comm >= 0 && o.comm < static_cast<int>(roles.size()) ? roles[o.comm] : "?") + ":" + o.op + ";";
  }
  return k;
}

}  // namespace

int reorder_like(RankSchedule& mine, const RankSchedule& source) {
  const auto my_roles = comm_roles(mine), src_roles = comm_roles(source);
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
