#include "coverage.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "meta_keys.h"
#include "text_escape.h"
#include "trace_loader.h"

namespace lockstep {
namespace {

using json = nlohmann::json;

std::string who(const Schedule& s, int proc) {
  const Process& p = s.procs[size_t(proc)].info;
  return printable(rank_or_process(p, proc) + " (pid " + std::to_string(p.pid) + ")");
}

std::string describe(const MissedCall& m) {
  std::ostringstream os;
  os << m.op;
  if (!m.dtype.empty()) os << " " << m.dtype;
  os << " count=" << m.count << " on NCCL comm " << m.nccl_comm;
  if (m.nccl_seq >= 0) os << " (NCCL's " << m.op << " #" << m.nccl_seq << ")";
  if (m.call_index >= 0) os << ", recorded from the plugin as op call " << m.call_index;
  return printable(os.str());
}

}  // namespace

int64_t Coverage::missed() const {
  int64_t n = 0;
  for (const auto& p : procs) n += p.missed;
  return n;
}

int64_t Coverage::missed_by_loaded_interposer() const {
  int64_t n = 0;
  for (const auto& p : procs)
    if (p.interposer) n += p.missed;
  return n;
}

Coverage read_coverage(const Schedule& s, size_t max_examples) {
  Coverage c;
  for (size_t i = 0; i < s.procs.size(); i++) {
    const Process& info = s.procs[i].info;
    if (info.meta.find(schema::meta::kProfilerPlugin) == info.meta.end()) continue;
    ProcessCoverage pc;
    pc.proc = int(i);
    pc.interposer = meta_int(info, schema::meta::kInterposerPreloaded).or_default(0) == 1;
    pc.dropped = meta_int(info, schema::meta::kProfilerDropped).or_default(0);
    if (!load_plugin_coverage(info.path, max_examples, &pc) && pc.error.empty())
      pc.error = "the profiler tables are missing or unreadable";
    c.procs.push_back(std::move(pc));
  }
  return c;
}

std::vector<EvidenceIssue> coverage_evidence(const Schedule& s, const Coverage& c) {
  std::vector<EvidenceIssue> out;
  for (const auto& p : c.procs) {
    if (p.dropped <= 0 && p.error.empty()) continue;
    EvidenceIssue e;
    e.kind = EvidenceKind::kDroppedRecords;
    e.procs.push_back(p.proc);
    int r = s.procs[size_t(p.proc)].info.global_rank;
    if (r >= 0) e.ranks.push_back(r);
    e.what = p.dropped > 0 ? "NCCL's profiler plugin dropped " + std::to_string(p.dropped) +
                                 " records (queue full): calls only it saw may be missing"
                           : "its profiler plugin tables cannot be read: " + printable(p.error);
    e.detail = who(s, p.proc) + ": " + e.what;
    out.push_back(std::move(e));
  }
  return out;
}

std::string coverage_text(const Schedule& s, const Coverage& c) {
  if (c.procs.empty()) return "";
  std::ostringstream os;
  os << "COVERAGE (NCCL's profiler plugin): " << c.missed()
     << " NCCL calls not seen by the interposer\n";
  for (const auto& p : c.procs) {
    os << "  " << who(s, p.proc) << ": the plugin saw " << p.plugin_calls << " calls; ";
    if (!p.interposer)
      os << "no interposer (liblockstep only as NCCL's plugin): all recorded from the plugin";
    else if (p.missed == 0)
      os << "the interposer saw every one";
    else
      os << p.missed << " not seen by the interposer (a static or private NCCL), recorded from the plugin";
    if (p.missed > 0) os << " (no reduction op)";
    os << "\n";
    if (p.interposer)
      for (const auto& m : p.examples) os << "    missed: " << describe(m) << "\n";
    if (p.interposer && p.missed > int64_t(p.examples.size()))
      os << "    ... and " << p.missed - int64_t(p.examples.size()) << " more\n";
    if (!p.error.empty()) os << "    unreadable: " << printable(p.error) << "\n";
  }
  return os.str();
}

std::string coverage_json(const Schedule& s, const Coverage& c) {
  json procs = json::array();
  for (const auto& p : c.procs) {
    json missed = json::array();
    for (const auto& m : p.examples) {
      json jm = {{"op", printable(m.op)}, {"count", m.count}, {"nccl_comm", printable(m.nccl_comm)}};
      jm["dtype"] = m.dtype.empty() ? json(nullptr) : json(printable(m.dtype));
      jm["nccl_seq"] = m.nccl_seq >= 0 ? json(m.nccl_seq) : json(nullptr);
      jm["call_index"] = m.call_index >= 0 ? json(m.call_index) : json(nullptr);
      missed.push_back(jm);
    }
    const Process& info = s.procs[size_t(p.proc)].info;
    procs.push_back({{"process", p.proc},
                     {"rank", info.global_rank},
                     {"pid", info.pid},
                     {"interposer", p.interposer},
                     {"plugin_calls", p.plugin_calls},
                     {"missed_by_interposer", p.missed},
                     {"missed_examples", missed},
                     {"plugin_dropped", p.dropped},
                     {"error", printable(p.error)}});
  }
  json j = {{"plugin_processes", c.procs.size()},
            {"missed_by_interposer", c.missed()},
            {"missed_by_loaded_interposer", c.missed_by_loaded_interposer()},
            {"processes", procs}};
  return j.dump();
}

std::string coverage_junit_text(const Schedule& s, const Coverage& c) {
  std::string out;
  for (const auto& p : c.procs) {
    if (!p.interposer || p.missed == 0) continue;
    out += who(s, p.proc) + ": " + std::to_string(p.missed) +
           " NCCL calls not seen by the interposer (a static or private NCCL)";
    if (!p.examples.empty()) out += ", first: " + describe(p.examples.front());
    out += "\n";
  }
  return out;
}

}  // namespace lockstep
