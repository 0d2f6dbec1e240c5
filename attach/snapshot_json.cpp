#include "snapshot_json.h"

#include <type_traits>

namespace lockstep::attach {

using nlohmann::json;

namespace {

// One field list per struct, walked by the writer and by the reader, so that what is written
// and what is read back can never drift apart. A field the reader does not find with the
// expected JSON type keeps its struct default (the file is untrusted: nothing throws).
// `omit`: the writer leaves the field out (the reader sees the default).
template <class V> void fields(NativeFrame& f, V&& v) {
  v("ip", f.ip), v("function", f.function), v("function_offset", f.function_offset), v("module", f.module),
      v("module_offset", f.module_offset);
}
template <class V> void fields(PythonFrame& f, V&& v) { v("file", f.file), v("function", f.function), v("line", f.line); }
template <class V> void fields(ThreadSnapshot& t, V&& v) {
  v("tid", t.tid), v("name", t.name), v("state", t.state), v("wchan", t.wchan), v("native", t.native),
      v("native_error", t.native_error), v("exited", t.exited), v("has_python", t.has_python), v("gil_holder", t.gil_holder),
      v("python", t.python), v("switches_read", t.switches_read), v("voluntary_switches", t.voluntary_switches);
}
template <class V> void fields(RasRank& r, V&& v) {
  v("rank", r.rank), v("host", r.host), v("pid", r.pid), v("cuda_dev", r.cuda_dev), v("init_state", r.init_state),
      v("async_error", r.async_error), v("finalize_called", r.finalize_called), v("destroy_flag", r.destroy_flag),
      v("abort_flag", r.abort_flag), v("collective_counts", r.coll_counts);
}
template <class V> void fields(RasMissingRank& m, V&& v) {
  v("rank", m.rank), v("host", m.host), v("pid", m.pid), v("unresponsive", m.unresponsive),
      v("considered_dead", m.considered_dead);
}
template <class V> void fields(RasComm& c, V&& v) {
  v("hash", c.hash), v("size", c.size), v("ranks", c.ranks), v("missing_ranks", c.missing);
}
template <class V> void fields(RasAnswer& a, V&& v) {
  v("address", a.address), v("reached", a.reached), v("error", a.error), v("server_protocol", a.server_protocol),
      v("nccl_version", a.nccl_version), v("json", a.json), v("raw", a.raw, /*omit=*/a.json),
      v("communicators", a.comms);
}
template <class V> void fields(StopBreakdown& s, V&& v) {
  v("interrupt_ms", s.interrupt_ms), v("unwind_ms", s.unwind_ms), v("python_ms", s.python_ms),
      v("detach_ms", s.detach_ms), v("cpu_ms", s.cpu_ms);
}
template <class V> void fields(ProcessSnapshot& p, V&& v) {
  v("pid", p.pid), v("host", p.host), v("cmdline", p.cmdline), v("rank", p.rank), v("world_size", p.world_size),
      v("error", p.error), v("fix", p.fix), v("stopped_ms", p.stopped_ms), v("threads_stopped", p.threads_stopped),
      v("stop", p.stop), v("threads", p.threads), v("python_status", p.python_status),
      v("python_cut_short", p.python_cut_short), v("nccl_library", p.nccl_library),
      v("ras_address", p.ras_address), v("lockstep_dir", p.lockstep_dir), v("lockstep_dir_from", p.lockstep_dir_from),
      v("fr_dump_prefix", p.fr_dump_prefix), v("fr_dump_variable", p.fr_dump_variable), v("fr_dumps", p.fr_dumps),
      v("fr_dumps_stale", p.fr_dumps_stale), v("nccl_env", p.nccl_env), v("recorder_mapped", p.recorder_mapped),
      v("start_time", p.start_time);
}
template <class V> void fields(SecondLook& l, V&& v) {
  v("taken", l.taken), v("after_ms", l.after_ms), v("ras", l.ras), v("processes", l.procs),
      v("stacks_skipped", l.stacks_skipped);
}
template <class V> void fields(NodeSnapshot& n, V&& v) {
  v("host", n.host), v("taken_at", n.taken_at), v("session", n.session), v("lockstep_version", n.lockstep_version),
      v("processes", n.procs),
      v("ras", n.ras), v("second_look", n.second);
}

template <class T> struct is_vector : std::false_type {};
template <class T> struct is_vector<std::vector<T>> : std::true_type {};
// A vector of structs (written element by element through their field lists).
template <class T> struct is_struct_vector : std::false_type {};
template <class T>
struct is_struct_vector<std::vector<T>> : std::bool_constant<std::is_class_v<T> && !std::is_same_v<T, std::string>> {};

struct Writer {
  json& out;
  template <class T> void operator()(const char* key, const T& value, bool omit = false) {
    if (!omit) out[key] = write(value);
  }
  template <class T> static json write(const T& value) {
    if constexpr (std::is_same_v<T, char>) {
      return std::string(1, value);
    } else if constexpr (std::is_class_v<T> && !std::is_same_v<T, std::string> && !is_vector<T>::value &&
                         !std::is_constructible_v<json, const T&>) {
      json o = json::object();
      fields(const_cast<T&>(value), Writer{o});  // fields() only reads through a Writer
      return o;
    } else if constexpr (is_struct_vector<T>::value) {
      json a = json::array();
      for (const auto& e : value) a.push_back(write(e));
      return a;
    } else {
      return json(value);
    }
  }
};

struct Reader {
  const json& in;
  template <class T> void operator()(const char* key, T& value, bool /*omit*/ = false) {
    if (in.is_object() && in.contains(key)) read(in[key], value);
  }
  static void read(const json& j, std::string& v) {
    if (j.is_string()) v = j.get<std::string>();
  }
  static void read(const json& j, char& v) {
    if (j.is_string() && !j.get_ref<const std::string&>().empty()) v = j.get_ref<const std::string&>()[0];
  }
  static void read(const json& j, bool& v) {
    if (j.is_boolean()) v = j.get<bool>();
  }
  static void read(const json& j, int& v) {
    if (j.is_number_integer()) v = static_cast<int>(j.get<long long>());
  }
  static void read(const json& j, uint64_t& v) {
    if (j.is_number_unsigned()) v = j.get<uint64_t>();
  }
  static void read(const json& j, double& v) {
    if (j.is_number()) v = j.get<double>();
  }
  template <class T> static void read(const json& j, std::map<std::string, T>& v) {
    if (!j.is_object()) return;
    for (const auto& [k, e] : j.items()) {
      T value{};
      bool ok = std::is_same_v<T, std::string> ? e.is_string() : e.is_number_unsigned();
      if (!ok) continue;
      read(e, value);
      v[k] = std::move(value);
    }
  }
  template <class T> static void read(const json& j, std::vector<T>& v) {
    if (!j.is_array()) return;
    for (const json& e : j) {
      if constexpr (std::is_same_v<T, std::string>) {
        if (e.is_string()) v.push_back(e.get<std::string>());
      } else {
        T value{};
        read(e, value);
        v.push_back(std::move(value));
      }
    }
  }
  template <class T, class = decltype(fields(std::declval<T&>(), std::declval<Reader>()))>
  static void read(const json& j, T& v) {
    if (j.is_object()) fields(v, Reader{j});
  }
};

}  // namespace

json to_json(const NodeSnapshot& n) {
  json j = Writer::write(n);
  j["lockstep_attach_format"] = kSnapshotFormat;
  return j;
}

std::optional<NodeSnapshot> node_from_json(const json& j, std::string& error) {
  if (!j.is_object() || !j.contains("lockstep_attach_format") || !j["lockstep_attach_format"].is_number_integer() ||
      j["lockstep_attach_format"].get<long long>() != kSnapshotFormat) {
    error = "not a lockstep attach snapshot of format " + std::to_string(kSnapshotFormat);
    return std::nullopt;
  }
  NodeSnapshot n;
  Reader::read(j, n);
  return n;
}

}  // namespace lockstep::attach
