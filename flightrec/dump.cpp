#include "dump.h"

#include "text_escape.h"

#include <map>

#include "json_reader.h"
#include "pickle.h"

namespace lockstep::flightrec {

Format sniff(std::string_view head) {
  if (head.size() >= 2 && static_cast<uint8_t>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5) return Format::kPickle;
  for (char c : head) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    return c == '{' ? Format::kJson : Format::kNone;
  }
  return Format::kNone;
}

bool looks_like_dump(const Document& doc) {
  if (doc.at(doc.root).kind != Kind::kDict) return false;
  return doc.get(doc.root, "version") && (doc.get(doc.root, "entries") || doc.get(doc.root, "pg_config"));
}

namespace {

class Reader {
 public:
  Reader(const Document& d, const Limits& lim) : d_(d), lim_(lim) {}

  FrDump read() {
    FrDump out;
    uint32_t root = d_.root;
    d_.dict(root, "dump");
    auto v = d_.get(root, "version");
    if (!v) throw DumpError("no 'version' key: not a Flight Recorder dump");
    out.version = printable(d_.str(*v, "version"));
    if (auto c = d_.get(root, "comm_lib_version")) out.comm_lib_version = printable(d_.str(*c, "comm_lib_version"));
    if (auto pc = d_.get(root, "pg_config")) read_config(*pc, out);
    if (auto ps = d_.get(root, "pg_status")) {
      const Node& n = d_.dict(*ps, "pg_status");
      for (size_t k = 0; k + 1 < n.items.size(); k += 2) {
        std::string id = key_text(n.items[k]);
        const Node& st = small_dict(n.items[k + 1], "pg_status value");
        for (size_t j = 0; j + 1 < st.items.size(); j += 2)
          out.pg_status[id][printable(d_.str(st.items[j], "pg_status key"))] = d_.integer(st.items[j + 1], "pg_status value");
      }
    }
    if (auto es = d_.get(root, "entries")) {
      const auto& items = d_.seq(*es, "entries");
      out.entries.reserve(items.size());
      for (size_t k = 0; k < items.size(); ++k) {
        try {
          out.entries.push_back(read_entry(items[k], out));
        } catch (const DumpError& e) {
          throw DumpError("entries[" + std::to_string(k) + "]: " + e.what());
        }
      }
    }
    return out;
  }

 private:
  std::string key_text(uint32_t id) {
    const Node& n = d_.at(id);
    if (n.kind == Kind::kInt) return std::to_string(n.i);
    return printable(d_.str(id, "key"));
  }

  static std::vector<int> parse_ranks(std::string_view s) {
    // "[0, 1, 2]" as torch's ranks_str writes it.
    std::vector<int> out;
    size_t k = 0;
    auto blank = [&] { while (k < s.size() && (s[k] == ' ' || s[k] == ',')) ++k; };
    blank();
    if (k >= s.size() || s[k] != '[') throw DumpError("pg_config ranks: expected '[...]', found '" + printable(s.substr(0, 40)) + "'");
    ++k;
    while (true) {
      blank();
      if (k < s.size() && s[k] == ']') break;
      if (k >= s.size() || s[k] < '0' || s[k] > '9') throw DumpError("pg_config ranks: unreadable '" + printable(s.substr(0, 40)) + "'");
      int64_t v = 0;
      while (k < s.size() && s[k] >= '0' && s[k] <= '9') {
        v = v * 10 + (s[k++] - '0');
        if (v > (1 << 24)) throw DumpError("pg_config ranks: rank out of range");
      }
      out.push_back(static_cast<int>(v));
      if (out.size() > (1u << 22)) throw DumpError("pg_config ranks: too many");
    }
    return out;
  }

  void read_config(uint32_t id, FrDump& out) {
    const Node& n = d_.dict(id, "pg_config");
    for (size_t k = 0; k + 1 < n.items.size(); k += 2) {
      FrGroup g;
      g.name = key_text(n.items[k]);
      uint32_t info = n.items[k + 1];
      small_dict(info, "pg_config entry");
      if (auto nm = d_.get(info, "name")) g.name = text(*nm, "pg_config name");
      if (auto ds = d_.get(info, "desc")) g.desc = text(*ds, "pg_config desc");
      auto rk = d_.get(info, "ranks");
      if (!rk) throw DumpError("pg_config " + g.name + ": no ranks");
      if (d_.at(*rk).kind == Kind::kStr) {
        charge(1, d_.at(*rk).s.size());
        g.ranks = parse_ranks(d_.at(*rk).s);
      } else {
        const auto& rs = d_.seq(*rk, "pg_config ranks");
        charge(rs.size(), 0);
        for (uint32_t r : rs) g.ranks.push_back(static_cast<int>(in_range(d_.integer(r, "rank"), 0, 1 << 24, "pg_config rank")));
      }
      out.groups.push_back(std::move(g));
    }
  }

  // Numbers the mapping computes with are checked where they are first read: a value torch
  // cannot write makes the dump unreadable (named in the skip reason), never an overflow later.
  static int64_t in_range(int64_t v, int64_t lo, int64_t hi, const char* key) {
    if (v < lo || v > hi)
      throw DumpError(std::string(key) + " " + std::to_string(v) + " is out of range (valid: " + std::to_string(lo) + ".." +
                      std::to_string(hi) + ")");
    return v;
  }

  uint32_t need(uint32_t e, const char* key) {
    auto v = d_.get(e, key);
    if (!v) throw DumpError(std::string("no '") + key + "'");
    return *v;
  }
  int64_t opt_int(uint32_t e, const char* key) {
    auto v = d_.get(e, key);
    return v && !d_.is_none(*v) ? d_.integer(*v, key) : 0;
  }
  std::vector<std::vector<int64_t>> sizes(uint32_t e, const char* key) {
    std::vector<std::vector<int64_t>> out;
    auto v = d_.get(e, key);
    if (!v) return out;
    const auto& tensors = d_.seq(*v, key);
    charge(tensors.size(), 0);
    for (uint32_t t : tensors) {
      std::vector<int64_t> dims;
      const auto& ds = d_.seq(t, key);
      charge(ds.size(), 0);
      for (uint32_t x : ds) {
        int64_t dim = d_.integer(x, key);
        if (dim < 0) throw DumpError(std::string(key) + ": negative size");
        dims.push_back(dim);
      }
      out.push_back(std::move(dims));
    }
    return out;
  }
  std::vector<std::string> strings(uint32_t e, const char* key) {
    std::vector<std::string> out;
    auto v = d_.get(e, key);
    if (!v) return out;
    const auto& items = d_.seq(*v, key);
    charge(items.size(), 0);
    for (uint32_t t : items) out.push_back(text(t, key));
    return out;
  }

  FrEntry read_entry(uint32_t e, FrDump& dump) {
    small_dict(e, "entry");
    FrEntry x;
    x.record_id = in_range(d_.integer(need(e, "record_id"), "record_id"), 0, kMaxRecordId, "record_id");
    x.pg_id = opt_int(e, "pg_id");
    const auto& pg = d_.seq(need(e, "process_group"), "process_group");
    if (pg.size() != 2) throw DumpError("process_group: expected (name, desc)");
    x.pg_name = text(pg[0], "process_group name");
    x.pg_desc = text(pg[1], "process_group desc");
    x.collective_seq_id = in_range(opt_int(e, "collective_seq_id"), 0, kMaxSeqId, "collective_seq_id");
    x.p2p_seq_id = in_range(opt_int(e, "p2p_seq_id"), 0, kMaxSeqId, "p2p_seq_id");
    x.op_id = opt_int(e, "op_id");
    x.profiling_name = text(need(e, "profiling_name"), "profiling_name");
    x.input_sizes = sizes(e, "input_sizes");
    x.output_sizes = sizes(e, "output_sizes");
    x.input_dtypes = strings(e, "input_dtypes");
    x.output_dtypes = strings(e, "output_dtypes");
    x.state = text(need(e, "state"), "state");
    if (x.state != "scheduled" && x.state != "started" && x.state != "completed")
      throw DumpError("state '" + x.state + "' (scheduled, started or completed expected)");
    x.time_created_ns = in_range(opt_int(e, "time_created_ns"), 0, kMaxTimeNs, "time_created_ns");
    x.time_started_ns = in_range(opt_int(e, "time_discovered_started_ns"), 0, kMaxTimeNs, "time_discovered_started_ns");
    x.time_completed_ns = in_range(opt_int(e, "time_discovered_completed_ns"), 0, kMaxTimeNs, "time_discovered_completed_ns");
    if (auto r = d_.get(e, "retired")) x.retired = d_.boolean(*r, "retired");
    if (auto p = d_.get(e, "is_p2p")) x.is_p2p = d_.boolean(*p, "is_p2p");
    x.timeout_ms = in_range(opt_int(e, "timeout_ms"), 0, kMaxTimeNs / 1000000, "timeout_ms");
    if (auto t = d_.get(e, "thread_name")) x.thread_name = text(*t, "thread_name");
    if (auto t = d_.get(e, "thread_id")) {
      const Node& n = d_.at(*t);
      if (n.kind == Kind::kInt) x.thread_id = n.i;
      else if (n.kind == Kind::kStr) x.thread_id = static_cast<int64_t>(std::strtoull(n.s.c_str(), nullptr, 10));
    }
    if (auto f = d_.get(e, "frames")) x.stack = stack(*f, dump);
    return x;
  }

  // Frame lists are shared through the memo; each distinct list is read once. The number of
  // frames materialized is bounded, so a small pickle cannot expand into a huge tree.
  int stack(uint32_t list, FrDump& dump) {
    if (auto by = stack_by_node_.find(list); by != stack_by_node_.end()) return by->second;
    const auto& items = d_.seq(list, "frames");
    if (items.empty()) return -1;
    charge(items.size(), 0);
    auto it = stack_ids_.find(items);
    if (it != stack_ids_.end()) return stack_by_node_[list] = it->second;
    if (items.size() > lim_.max_items - frames_) throw DumpError("frames: more than " + std::to_string(lim_.max_items) + " in all");
    frames_ += items.size();
    std::vector<FrFrame> frames;
    for (uint32_t f : items) {
      small_dict(f, "frame");
      FrFrame fr;
      if (auto n = d_.get(f, "name")) fr.name = text(*n, "frame name");
      if (auto n = d_.get(f, "filename")) fr.filename = text(*n, "frame filename");
      if (auto n = d_.get(f, "line")) fr.line = d_.integer(*n, "frame line");
      frames.push_back(std::move(fr));
    }
    dump.stacks.push_back(std::move(frames));
    int id = static_cast<int>(dump.stacks.size() - 1);
    stack_ids_.emplace(items, id);
    return stack_by_node_[list] = id;
  }

  // A DAG can repeat one big node many times: what is read out is charged against the limits.
  void charge(size_t items, size_t bytes) {
    if (items > lim_.max_items - read_items_ || bytes > lim_.max_string_bytes - read_bytes_)
      throw DumpError("expands beyond the limits (a small pickle repeating shared values)");
    read_items_ += items;
    read_bytes_ += bytes;
  }
  std::string text(uint32_t id, const char* what) {
    const std::string& s = d_.str(id, what);
    charge(1, s.size());
    return printable(s);
  }
  // Entry and frame dicts have a handful of keys; a huge one would make every lookup slow.
  const Node& small_dict(uint32_t id, const char* what) {
    const Node& n = d_.dict(id, what);
    if (n.items.size() > 2 * 64) throw DumpError(std::string(what) + " with " + std::to_string(n.items.size() / 2) + " keys");
    charge(n.items.size(), 0);
    return n;
  }

  const Document& d_;
  const Limits& lim_;
  size_t frames_ = 0, read_items_ = 0, read_bytes_ = 0;
  std::map<uint32_t, int> stack_by_node_;
  std::map<std::vector<uint32_t>, int> stack_ids_;
};

}  // namespace

FrDump read_dump(std::string_view bytes, const std::string& path, const Limits& limits) {
  Format f = sniff(bytes.substr(0, 64));
  if (f == Format::kNone) throw DumpError("neither a pickle nor JSON");
  Document doc = f == Format::kPickle ? parse_pickle(bytes, limits) : parse_json(bytes, limits);
  if (!looks_like_dump(doc)) throw DumpError("not a Flight Recorder dump (no 'version' with 'entries' or 'pg_config')");
  FrDump d = Reader(doc, limits).read();
  d.path = path;
  d.format = f == Format::kPickle ? "pickle" : "json";
  return d;
}

}  // namespace lockstep::flightrec
