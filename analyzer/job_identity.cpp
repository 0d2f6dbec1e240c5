#include "job_identity.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <set>
#include <nlohmann/json.hpp>

#include "hang.h"
#include "meta_keys.h"
#include "rank_env.h"
#include "trace_loader.h"

namespace lockstep {
namespace {

std::string get(const std::map<std::string, std::string>& m, const char* k) {
  auto it = m.find(k);
  return it == m.end() ? std::string() : it->second;
}

std::vector<int> ranks_of(const Schedule& s, const std::vector<int>& procs) {
  std::vector<int> r;
  for (int p : procs) r.push_back(display_rank(s, p));
  return r;
}

// Untrusted trace text: no control characters for the terminal, no invalid UTF-8 for JSON.
std::string printable(std::string v) {
  for (char& c : v)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return v;
}

// Host names "node7" then "node8" (or "gpu-009" then "gpu-010"): one prefix, the next number.
bool next_host_name(const std::string& a, const std::string& b) {
  auto split = [](const std::string& n) {
    size_t d = n.size();
    while (d > 0 && n[d - 1] >= '0' && n[d - 1] <= '9') --d;
    return d;
  };
  const size_t da = split(a), db = split(b);
  if (da == a.size() || db == b.size() || a.compare(0, da, b, 0, db) != 0 || a.size() - da > 18 || b.size() - db > 18)
    return false;
  const std::string na = a.substr(da), nb = b.substr(db);
  const bool padded = (na.size() > 1 && na[0] == '0') || (nb.size() > 1 && nb[0] == '0');
  return std::stoll(nb) == std::stoll(na) + 1 && (!padded || na.size() == nb.size());
}

// "hosts: node0..node511 (512 hosts, 8 ranks each in order: ranks 0-4095)": hosts that each hold
// the next block of ranks, named in sequence, are one entry; at most kMaxHostEntries entries.
constexpr size_t kMaxHostEntries = 16;
std::string hosts_line(const Schedule& s, const std::vector<HostGroup>& hosts) {
  struct Block {
    bool whole = false;  // the host's ranks are one range, each once
    int lo = 0, n = 0;
  };
  std::vector<Block> blocks;
  for (const HostGroup& h : hosts) {
    std::vector<int> r = ranks_of(s, h.procs);
    std::sort(r.begin(), r.end());
    Block b;
    b.whole = !r.empty() && r.back() - r.front() + 1 == static_cast<int>(r.size()) &&
              std::adjacent_find(r.begin(), r.end()) == r.end();
    if (b.whole) b.lo = r.front(), b.n = static_cast<int>(r.size());
    blocks.push_back(b);
  }
  std::string out = "hosts:";
  size_t entries = 0, h = 0;
  for (; h < hosts.size() && entries < kMaxHostEntries; ++entries) {
    size_t e = h + 1;  // hosts[h, e) one entry
    while (e < hosts.size() && blocks[h].whole && blocks[e].whole && blocks[e].n == blocks[h].n &&
           blocks[e].lo == blocks[e - 1].lo + blocks[e - 1].n && next_host_name(hosts[e - 1].host, hosts[e].host))
      ++e;
    if (e - h < 3) e = h + 1;  // two in sequence read as well apart
    out += entries ? "; " : " ";
    if (e - h > 1)
      out += printable(hosts[h].host) + ".." + printable(hosts[e - 1].host) + " (" + std::to_string(e - h) + " hosts, " +
             plural(blocks[h].n, "rank", "ranks") + " each in order: ranks " + std::to_string(blocks[h].lo) + "-" +
             std::to_string(blocks[e - 1].lo + blocks[e - 1].n - 1) + ")";
    else
      out += printable(hosts[h].host) + " " + ranks_phrase(ranks_of(s, hosts[h].procs));
    h = e;
  }
  if (h < hosts.size())
    out += "; and " + std::to_string(hosts.size() - h) + " more hosts (--json lists them)";
  return out + "\n";
}

std::string seconds(int64_t ns) { return std::to_string((ns + 500'000'000) / 1'000'000'000) + " s"; }

}  // namespace

std::map<std::string, std::string> launcher_vars(const Process& p) {
  std::map<std::string, std::string> out;
  for (auto it = p.meta.lower_bound(kLauncherMetaPrefix);
       it != p.meta.end() && it->first.rfind(kLauncherMetaPrefix, 0) == 0; ++it)
    out[it->first.substr(sizeof kLauncherMetaPrefix - 1)] = it->second;
  return out;
}

std::vector<JobGroup> group_by_job(const Schedule& s) {
  std::vector<JobGroup> jobs;
  for (size_t i = 0; i < s.procs.size(); ++i) {
    auto v = launcher_vars(s.procs[i].info);
    JobGroup g;
    if (!get(v, "slurm_job_id").empty()) {
      g.launcher = "slurm";
      g.job_id = get(v, "slurm_job_id");
      if (!get(v, "slurm_array_job_id").empty())
        g.job_id = get(v, "slurm_array_job_id") + "_" + get(v, "slurm_array_task_id");
      g.step_id = get(v, "slurm_step_id");
      g.nodelist = get(v, "slurm_job_nodelist");
    } else if (!get(v, "torchelastic_run_id").empty()) {
      g.launcher = "torchrun";
      g.job_id = get(v, "torchelastic_run_id");
    } else if (!get(v, "ompi_comm_world_rank").empty()) {
      g.launcher = "mpi";
    }
    auto same = [&](const JobGroup& o) {
      return o.launcher == g.launcher && o.job_id == g.job_id && o.step_id == g.step_id && o.nodelist == g.nodelist;
    };
    auto it = std::find_if(jobs.begin(), jobs.end(), same);
    if (it == jobs.end()) it = jobs.insert(jobs.end(), g);
    it->procs.push_back(static_cast<int>(i));
  }
  return jobs;
}

std::vector<HostGroup> group_by_host(const Schedule& s, int64_t stale_ns) {
  std::vector<HostGroup> hosts;
  std::vector<int64_t> newest;  // per host: wall clock of its freshest trace's last flush
  std::vector<bool> silent;     // per host: no process exited cleanly or recorded a signal
  std::unordered_map<std::string_view, size_t> index;  // host name -> hosts[i] (16,384 hosts: no linear search)
  for (size_t i = 0; i < s.procs.size(); ++i) {
    const Process& p = s.procs[i].info;
    auto [at, fresh] = index.try_emplace(p.host, hosts.size());
    if (fresh) {
      hosts.push_back(HostGroup{p.host, {}, 0, {}});
      newest.push_back(INT64_MIN);
      silent.push_back(true);
    }
    const size_t h = at->second;
    hosts[h].procs.push_back(static_cast<int>(i));
    // Monotonic clocks differ between hosts: compare wall clocks, each derived on its own host.
    const trace_file::TextInt start_wall = meta_int(p, schema::meta::kStartWallNs), start_mono = meta_int(p, schema::meta::kStartMonoNs);
    const bool ok = start_wall.integer() && start_mono.integer();
    const int64_t wall = start_wall.value, mono = start_mono.value;
    // Times from an untrusted file: a sum that overflows is no evidence of a flush time.
    int64_t since_start = 0, flushed = 0;
    if (ok && p.last_flush_mono_ns > 0 && !__builtin_sub_overflow(p.last_flush_mono_ns, mono, &since_start) &&
        !__builtin_add_overflow(wall, since_start, &flushed))
      newest[h] = std::max(newest[h], flushed);
    if (p.finished || !p.exit_reason.empty()) silent[h] = false;
  }
  // The freshest host other than h: the first with the newest flush (best), or when that is h the
  // first with the newest flush of the others (second). Once for all hosts, not once per host.
  auto first_newest = [&](size_t skip) {
    size_t f = hosts.size();
    for (size_t o = 0; o < hosts.size(); ++o)
      if (o != skip && newest[o] != INT64_MIN && (f == hosts.size() || newest[o] > newest[f])) f = o;
    return f;
  };
  const size_t best = first_newest(hosts.size());
  const size_t second = best < hosts.size() ? first_newest(best) : hosts.size();
  for (size_t h = 0; h < hosts.size() && hosts.size() > 1; ++h) {
    if (!silent[h] || newest[h] == INT64_MIN) continue;
    const size_t other = h != best ? best : second;
    const size_t fresher = other < hosts.size() ? other : h;
    int64_t behind = 0;
    if (fresher == h || __builtin_sub_overflow(newest[fresher], newest[h], &behind) || behind <= stale_ns) continue;
    hosts[h].stopped_before_ns = behind;
    hosts[h].stopped_before_host = hosts[fresher].host;
  }
  return hosts;
}

std::string identity_warnings_text(const Schedule& s) {
  // Every process a claim names carries the claim's text: one line per conflict (under the
  // first process that has it), not one per process.
  std::string out;
  std::set<std::string> said;
  for (size_t i = 0; i < s.procs.size(); ++i) {
    const Process& p = s.procs[i].info;
    if (!p.rank_conflict.empty() && said.insert(p.rank_conflict).second)
      out += "warning: rank identity of " + printable(process_label(p)) + ": " + printable(p.rank_conflict) + "\n";
  }
  return out;
}

std::string job_header_text(const Schedule& s, const std::vector<HostGroup>& hosts) {
  std::string out;
  for (const JobGroup& g : group_by_job(s)) {
    if (g.launcher.empty()) continue;
    std::string line = "job: ";
    if (g.launcher == "slurm") {
      line += "Slurm job " + printable(g.job_id);
      if (!g.step_id.empty()) line += " step " + printable(g.step_id);
      if (!g.nodelist.empty()) line += ", nodes " + printable(g.nodelist);
    } else if (g.launcher == "torchrun") {
      line += "torchrun run " + printable(g.job_id);
    } else {
      line += "MPI job";
    }
    out += line + ": " + ranks_phrase(ranks_of(s, g.procs)) + "\n";
  }
  std::vector<int> inferred;
  for (size_t i = 0; i < s.procs.size(); ++i)
    if (s.procs[i].info.global_rank_source.rfind("inferred:", 0) == 0) inferred.push_back(display_rank(s, int(i)));
  if (!inferred.empty())
    out += "ranks inferred from a communicator spanning every process (no launcher variable): " +
           rank_ranges(inferred) + "\n";
  if (hosts.size() > 1) {
    out += hosts_line(s, hosts);
    for (const HostGroup& h : hosts)
      if (h.stopped_before_ns > 0)
        out += "host " + printable(h.host) + ": every trace (" + ranks_phrase(ranks_of(s, h.procs)) + ") stopped " +
               seconds(h.stopped_before_ns) + " before " + printable(h.stopped_before_host) +
               "'s, with no exit or signal recorded: the node or its job step died?\n";
  }
  return out;
}

void add_identity_json(nlohmann::json& j, const Schedule& s, const std::vector<HostGroup>& hosts) {
  using nlohmann::json;
  json jobs = json::array();
  for (const JobGroup& g : group_by_job(s))
    jobs.push_back({{"launcher", g.launcher},
                    {"job_id", printable(g.job_id)},
                    {"step_id", printable(g.step_id)},
                    {"nodelist", printable(g.nodelist)},
                    {"ranks", rank_ranges(ranks_of(s, g.procs))}});
  j["jobs"] = std::move(jobs);
  json hj = json::array();
  for (const HostGroup& h : hosts)
    hj.push_back({{"host", printable(h.host)},
                  {"ranks", rank_ranges(ranks_of(s, h.procs))},
                  {"stopped_before_s", h.stopped_before_ns > 0 ? json(double(h.stopped_before_ns) / 1e9) : json(nullptr)},
                  {"stopped_before_host", h.stopped_before_ns > 0 ? json(printable(h.stopped_before_host)) : json(nullptr)}});
  j["hosts"] = std::move(hj);
  json& procs = j["processes"];
  if (!procs.is_array()) return;
  for (size_t i = 0; i < s.procs.size() && i < procs.size(); ++i) add_process_identity_json(procs[i], s.procs[i].info);
}

void add_process_identity_json(nlohmann::json& proc, const Process& p) {
  using nlohmann::json;
  json vars = json::object();
  for (auto& [k, v] : launcher_vars(p)) vars[printable(k)] = printable(v);
  proc["launcher"] = std::move(vars);
  proc["global_rank_source"] = printable(p.global_rank_source);
  proc["rank_conflict"] = p.rank_conflict.empty() ? json(nullptr) : json(printable(p.rank_conflict));
}

}  // namespace lockstep
