#include "snapshot_json.h"

namespace lockstep::attach {

using nlohmann::json;

namespace {

json frames_json(const ThreadSnapshot& t) {
  json native = json::array();
  for (const NativeFrame& f : t.native)
    native.push_back({{"ip", f.ip}, {"function", f.function}, {"function_offset", f.function_offset},
                      {"module", f.module}, {"module_offset", f.module_offset}});
  return native;
}

std::string s_of(const json& o, const char* k) {
  return o.is_object() && o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : std::string();
}
long long i_of(const json& o, const char* k, long long d = 0) {
  return o.is_object() && o.contains(k) && o[k].is_number_integer() ? o[k].get<long long>() : d;
}
uint64_t u_of(const json& o, const char* k) {
  return o.is_object() && o.contains(k) && o[k].is_number_unsigned() ? o[k].get<uint64_t>() : 0;
}
double d_of(const json& o, const char* k) {
  return o.is_object() && o.contains(k) && o[k].is_number() ? o[k].get<double>() : 0.0;
}
bool b_of(const json& o, const char* k) {
  return o.is_object() && o.contains(k) && o[k].is_boolean() && o[k].get<bool>();
}
const json& arr(const json& o, const char* k) {
  static const json empty = json::array();
  return o.is_object() && o.contains(k) && o[k].is_array() ? o[k] : empty;
}

}  // namespace

json to_json(const NodeSnapshot& n) {
  json procs = json::array();
  for (const ProcessSnapshot& p : n.procs) {
    json threads = json::array();
    for (const ThreadSnapshot& t : p.threads) {
      json py = json::array();
      for (const PythonFrame& f : t.python) py.push_back({{"file", f.file}, {"function", f.function}, {"line", f.line}});
      threads.push_back({{"tid", t.tid}, {"name", t.name}, {"state", std::string(1, t.state)}, {"wchan", t.wchan},
                         {"native", frames_json(t)}, {"native_error", t.native_error}, {"has_python", t.has_python},
                         {"gil_holder", t.gil_holder}, {"python", py}});
    }
    procs.push_back({{"pid", p.pid}, {"host", p.host}, {"cmdline", p.cmdline}, {"rank", p.rank},
                     {"world_size", p.world_size}, {"error", p.error}, {"fix", p.fix}, {"stopped_ms", p.stopped_ms},
                     {"threads_stopped", p.threads_stopped}, {"threads", threads}, {"python_status", p.python_status},
                     {"nccl_library", p.nccl_library}, {"ras_address", p.ras_address},
                     {"lockstep_dir", p.lockstep_dir}, {"fr_dumps", p.fr_dumps}, {"nccl_env", p.nccl_env}});
  }
  json ras = json::array();
  for (const RasAnswer& a : n.ras) {
    json comms = json::array();
    for (const RasComm& c : a.comms) {
      json ranks = json::array(), missing = json::array();
      for (const RasRank& r : c.ranks)
        ranks.push_back({{"rank", r.rank}, {"host", r.host}, {"pid", r.pid}, {"cuda_dev", r.cuda_dev},
                         {"init_state", r.init_state}, {"async_error", r.async_error},
                         {"finalize_called", r.finalize_called}, {"destroy_flag", r.destroy_flag},
                         {"abort_flag", r.abort_flag}, {"collective_counts", r.coll_counts}});
      for (const RasMissingRank& m : c.missing)
        missing.push_back({{"rank", m.rank}, {"host", m.host}, {"pid", m.pid}, {"unresponsive", m.unresponsive},
                           {"considered_dead", m.considered_dead}});
      comms.push_back({{"hash", c.hash}, {"size", c.size}, {"ranks", ranks}, {"missing_ranks", missing}});
    }
    ras.push_back({{"address", a.address}, {"reached", a.reached}, {"error", a.error},
                   {"server_protocol", a.server_protocol}, {"nccl_version", a.nccl_version}, {"json", a.json},
                   {"raw", a.json ? std::string() : a.raw}, {"communicators", comms}});
  }
  return {{"lockstep_attach_format", kSnapshotFormat}, {"host", n.host}, {"taken_at", n.taken_at},
          {"lockstep_version", n.lockstep_version}, {"processes", procs}, {"ras", ras}};
}

std::optional<NodeSnapshot> node_from_json(const json& j, std::string& error) {
  if (!j.is_object() || i_of(j, "lockstep_attach_format", -1) != kSnapshotFormat) {
    error = "not a lockstep attach snapshot of format " + std::to_string(kSnapshotFormat);
    return std::nullopt;
  }
  NodeSnapshot n;
  n.host = s_of(j, "host");
  n.taken_at = s_of(j, "taken_at");
  n.lockstep_version = s_of(j, "lockstep_version");
  for (const json& pj : arr(j, "processes")) {
    ProcessSnapshot p;
    p.pid = static_cast<int>(i_of(pj, "pid"));
    p.host = s_of(pj, "host");
    for (const json& a : arr(pj, "cmdline"))
      if (a.is_string()) p.cmdline.push_back(a.get<std::string>());
    p.rank = static_cast<int>(i_of(pj, "rank", -1));
    p.world_size = static_cast<int>(i_of(pj, "world_size", -1));
    p.error = s_of(pj, "error");
    p.fix = s_of(pj, "fix");
    p.stopped_ms = d_of(pj, "stopped_ms");
    p.threads_stopped = static_cast<int>(i_of(pj, "threads_stopped"));
    p.python_status = s_of(pj, "python_status");
    p.nccl_library = s_of(pj, "nccl_library");
    p.ras_address = s_of(pj, "ras_address");
    p.lockstep_dir = s_of(pj, "lockstep_dir");
    for (const json& a : arr(pj, "fr_dumps"))
      if (a.is_string()) p.fr_dumps.push_back(a.get<std::string>());
    for (const json& tj : arr(pj, "threads")) {
      ThreadSnapshot t;
      t.tid = static_cast<int>(i_of(tj, "tid"));
      t.name = s_of(tj, "name");
      std::string st = s_of(tj, "state");
      t.state = st.empty() ? '?' : st[0];
      t.wchan = s_of(tj, "wchan");
      t.native_error = s_of(tj, "native_error");
      t.has_python = b_of(tj, "has_python");
      t.gil_holder = b_of(tj, "gil_holder");
      for (const json& fj : arr(tj, "native")) {
        NativeFrame f;
        f.ip = u_of(fj, "ip");
        f.function = s_of(fj, "function");
        f.function_offset = u_of(fj, "function_offset");
        f.module = s_of(fj, "module");
        f.module_offset = u_of(fj, "module_offset");
        t.native.push_back(std::move(f));
      }
      for (const json& fj : arr(tj, "python"))
        t.python.push_back({s_of(fj, "file"), s_of(fj, "function"), static_cast<int>(i_of(fj, "line"))});
      p.threads.push_back(std::move(t));
    }
    n.procs.push_back(std::move(p));
  }
  for (const json& aj : arr(j, "ras")) {
    RasAnswer a;
    a.address = s_of(aj, "address");
    a.reached = b_of(aj, "reached");
    a.error = s_of(aj, "error");
    a.server_protocol = static_cast<int>(i_of(aj, "server_protocol"));
    a.nccl_version = s_of(aj, "nccl_version");
    a.json = b_of(aj, "json");
    a.raw = s_of(aj, "raw");
    for (const json& cj : arr(aj, "communicators")) {
      RasComm c;
      c.hash = s_of(cj, "hash");
      c.size = static_cast<int>(i_of(cj, "size"));
      for (const json& rj : arr(cj, "ranks")) {
        RasRank r;
        r.rank = static_cast<int>(i_of(rj, "rank", -1));
        r.host = s_of(rj, "host");
        r.pid = static_cast<int>(i_of(rj, "pid", -1));
        r.cuda_dev = static_cast<int>(i_of(rj, "cuda_dev", -1));
        r.init_state = static_cast<int>(i_of(rj, "init_state"));
        r.async_error = static_cast<int>(i_of(rj, "async_error"));
        r.finalize_called = b_of(rj, "finalize_called");
        r.destroy_flag = b_of(rj, "destroy_flag");
        r.abort_flag = b_of(rj, "abort_flag");
        if (rj.is_object() && rj.contains("collective_counts") && rj["collective_counts"].is_object())
          for (const auto& [k, v] : rj["collective_counts"].items())
            if (v.is_number_unsigned()) r.coll_counts[k] = v.get<uint64_t>();
        c.ranks.push_back(std::move(r));
      }
      for (const json& mj : arr(cj, "missing_ranks")) {
        RasMissingRank m;
        m.rank = static_cast<int>(i_of(mj, "rank", -1));
        m.host = s_of(mj, "host");
        m.pid = static_cast<int>(i_of(mj, "pid", -1));
        m.unresponsive = b_of(mj, "unresponsive");
        m.considered_dead = b_of(mj, "considered_dead");
        c.missing.push_back(std::move(m));
      }
      a.comms.push_back(std::move(c));
    }
    n.ras.push_back(std::move(a));
  }
  return n;
}

}  // namespace lockstep::attach
