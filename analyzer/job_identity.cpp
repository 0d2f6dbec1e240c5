#include "job_identity.h"

#include <algorithm>
#include <set>
#include <nlohmann/json.hpp>

#include "hang.h"
#include "trace_loader.h"

namespace lockstep {
namespace {

constexpr const char kPrefix[] = "launcher_";

std::string get(const std::map<std::string, std::string>& m, const char* k) {
  auto it = m.find(k);
  return it == m.end() ? std::string() : it->second;
}

std::vector<int> ranks_of(const Schedule& s, const std::vector<int>& procs) {
  std::vector<int> r;
  for (int p : procs) r.push_back(display_rank(s, p));
  return r;
}

std::string plural_ranks(const std::vector<int>& r) {
  return std::string(r.size() == 1 ? "rank " : "ranks ") + rank_ranges(r);
}

std::string seconds(int64_t ns) { return std::to_string((ns + 500'000'000) / 1'000'000'000) + " s"; }

// Untrusted trace text: no control characters for the terminal, no invalid UTF-8 for JSON.
std::string printable(std::string v) {
  for (char& c : v)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return v;
}

}  // namespace

std::map<std::string, std::string> launcher_vars(const Process& p) {
  std::map<std::string, std::string> out;
  for (auto it = p.meta.lower_bound(kPrefix); it != p.meta.end() && it->first.rfind(kPrefix, 0) == 0; ++it)
    out[it->first.substr(sizeof kPrefix - 1)] = it->second;
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
  for (size_t i = 0; i < s.procs.size(); ++i) {
    const Process& p = s.procs[i].info;
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const HostGroup& h) { return h.host == p.host; });
    if (it == hosts.end()) {
      it = hosts.insert(hosts.end(), HostGroup{p.host, {}, 0, {}});
      newest.push_back(INT64_MIN);
      silent.push_back(true);
    }
    size_t h = static_cast<size_t>(it - hosts.begin());
    it->procs.push_back(static_cast<int>(i));
    // Monotonic clocks differ between hosts: compare wall clocks, each derived on its own host.
    const trace_file::TextInt start_wall = meta_int(p, "start_wall_ns"), start_mono = meta_int(p, "start_mono_ns");
    const bool ok = start_wall.integer() && start_mono.integer();
    const int64_t wall = start_wall.value, mono = start_mono.value;
    // Times from an untrusted file: a sum that overflows is no evidence of a flush time.
    int64_t since_start = 0, flushed = 0;
    if (ok && p.last_flush_mono_ns > 0 && !__builtin_sub_overflow(p.last_flush_mono_ns, mono, &since_start) &&
        !__builtin_add_overflow(wall, since_start, &flushed))
      newest[h] = std::max(newest[h], flushed);
    if (p.finished || !p.exit_reason.empty()) silent[h] = false;
  }
  for (size_t h = 0; h < hosts.size() && hosts.size() > 1; ++h) {
    if (!silent[h] || newest[h] == INT64_MIN) continue;
    size_t fresher = h;
    for (size_t o = 0; o < hosts.size(); ++o)
      if (o != h && newest[o] != INT64_MIN && (fresher == h || newest[o] > newest[fresher])) fresher = o;
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
    out += line + ": " + plural_ranks(ranks_of(s, g.procs)) + "\n";
  }
  std::vector<int> inferred;
  for (size_t i = 0; i < s.procs.size(); ++i)
    if (s.procs[i].info.global_rank_source.rfind("inferred:", 0) == 0) inferred.push_back(display_rank(s, int(i)));
  if (!inferred.empty())
    out += "ranks inferred from a communicator spanning every process (no launcher variable): " +
           rank_ranges(inferred) + "\n";
  if (hosts.size() > 1) {
    out += "hosts:";
    for (size_t h = 0; h < hosts.size(); ++h)
      out += (h ? "; " : " ") + printable(hosts[h].host) + " " + plural_ranks(ranks_of(s, hosts[h].procs));
    out += "\n";
    for (const HostGroup& h : hosts)
      if (h.stopped_before_ns > 0)
        out += "host " + printable(h.host) + ": every trace (" + plural_ranks(ranks_of(s, h.procs)) + ") stopped " +
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
  j["jobs"] = jobs;
  json hj = json::array();
  for (const HostGroup& h : hosts)
    hj.push_back({{"host", printable(h.host)},
                  {"ranks", rank_ranges(ranks_of(s, h.procs))},
                  {"stopped_before_s", h.stopped_before_ns > 0 ? json(double(h.stopped_before_ns) / 1e9) : json(nullptr)},
                  {"stopped_before_host", h.stopped_before_ns > 0 ? json(printable(h.stopped_before_host)) : json(nullptr)}});
  j["hosts"] = hj;
  json& procs = j["processes"];
  for (size_t i = 0; i < s.procs.size() && i < procs.size(); ++i) {
    const Process& p = s.procs[i].info;
    json vars = json::object();
    for (auto& [k, v] : launcher_vars(p)) vars[printable(k)] = printable(v);
    procs[i]["launcher"] = vars;
    procs[i]["global_rank_source"] = printable(p.global_rank_source);
    procs[i]["rank_conflict"] = p.rank_conflict.empty() ? json(nullptr) : json(printable(p.rank_conflict));
  }
}

}  // namespace lockstep
