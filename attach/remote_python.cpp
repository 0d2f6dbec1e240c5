#include "remote_python.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <set>

#include "elf_symbols.h"
#include "procfs.h"
#include "python_layouts.h"

namespace lockstep::attach {

namespace lp = lockstep::pyframes_detail;

namespace {

constexpr size_t kMaxThreads = 4096;
constexpr size_t kMaxInterpreters = 64;
constexpr size_t kMaxFrames = 256;
constexpr size_t kMaxStringChars = 4096;
constexpr size_t kMaxLinetable = 1 << 20;

// Where the thread list and the GIL live; offsetof() values of each version's internal headers
// (Include/internal/pycore_runtime.h, pycore_interp.h, cpython/pystate.h, pycore_gil.h), x86-64
// and aarch64 LP64, GIL builds. 3.13+ read them from _Py_DebugOffsets instead. The attach tests
// run every CPython the suite finds (tests/attach), so a wrong number fails there.
struct ThreadListLayout {
  uint64_t runtime_interpreters_head = 0;
  uint64_t interp_next = 0;
  uint64_t interp_threads_head = 0;
  uint64_t ts_next = 0;
  uint64_t ts_thread_id = 0;
  uint64_t ts_native_thread_id = UINT64_MAX;  // 3.10: none
  // GIL: in _PyRuntime (3.10/3.11), behind interp->ceval.gil (3.12), in the interpreter (3.13+)
  enum GilWhere { kInRuntime, kBehindInterpPointer, kInInterp } gil_where = kInRuntime;
  uint64_t gil_pointer = 0;  // 3.12: offsetof(PyInterpreterState, ceval.gil)
  uint64_t gil_last_holder = 0;
  uint64_t gil_locked = 0;
};

constexpr ThreadListLayout kThreads310{32, 0, 8, 8, 176, UINT64_MAX, ThreadListLayout::kInRuntime, 0, 360, 368};
constexpr ThreadListLayout kThreads311{40, 0, 16, 8, 152, 160, ThreadListLayout::kInRuntime, 0, 368, 376};
constexpr ThreadListLayout kThreads312{40, 0, 72, 8, 136, 144, ThreadListLayout::kBehindInterpPointer, 384, 8, 16};

template <typename D>
ThreadListLayout threads_from_debug_offsets(const D& d) {
  ThreadListLayout t;
  t.runtime_interpreters_head = d.runtime_state.interpreters_head;
  t.interp_next = d.interpreter_state.next;
  t.interp_threads_head = d.interpreter_state.threads_head;
  t.ts_next = d.thread_state.next;
  t.ts_thread_id = d.thread_state.thread_id;
  t.ts_native_thread_id = d.thread_state.native_thread_id;
  t.gil_where = ThreadListLayout::kInInterp;
  t.gil_last_holder = d.interpreter_state.gil_runtime_state_holder;
  t.gil_locked = d.interpreter_state.gil_runtime_state_locked;
  return t;
}

class Mem {
 public:
  explicit Mem(int pid) : pid_(pid) {}
  bool read(uint64_t addr, void* out, size_t n) const {
    if (addr == 0 || n == 0) return false;
    if (paging_ && n <= kPage && read_paged(addr, out, n)) return true;
    iovec local{out, n}, remote{reinterpret_cast<void*>(addr), n};
    return ::process_vm_readv(pid_, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
  }
  template <typename T>
  T get(uint64_t addr, T fallback = T{}) const {
    T v;
    return read(addr, &v, sizeof v) ? v : fallback;
  }
  uint64_t ptr(uint64_t addr) const { return get<uint64_t>(addr, 0); }

  // A walk of the interpreter's structs reads thousands of small fields: between begin_pages()
  // and end_pages() whole pages are read once and kept (one syscall per page, not per field).
  // Only while the process is stopped, or for one walk of a running one (each page as it was
  // when read, as field reads would be).
  void begin_pages() const { paging_ = true; }
  void end_pages() const {
    paging_ = false;
    pages_.clear();
  }

 private:
  static constexpr uint64_t kPage = 4096;
  static constexpr size_t kMaxPages = 16384;
  bool read_paged(uint64_t addr, void* out, size_t n) const {
    for (size_t done = 0; done < n;) {
      const uint64_t a = addr + done, page = a & ~(kPage - 1);
      auto it = pages_.find(page);
      if (it == pages_.end()) {
        if (pages_.size() >= kMaxPages) return false;
        std::vector<uint8_t> buf(kPage);
        iovec local{buf.data(), kPage}, remote{reinterpret_cast<void*>(page), kPage};
        if (::process_vm_readv(pid_, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(kPage)) buf.clear();
        it = pages_.emplace(page, std::move(buf)).first;
      }
      if (it->second.empty()) return false;  // unreadable as a whole page: the caller reads the bytes
      const size_t off = a - page, take = std::min<size_t>(n - done, kPage - off);
      std::memcpy(static_cast<uint8_t*>(out) + done, it->second.data() + off, take);
      done += take;
    }
    return true;
  }
  int pid_;
  mutable bool paging_ = false;
  mutable std::unordered_map<uint64_t, std::vector<uint8_t>> pages_;
};

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x110000) {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += '?';
  }
}

struct CodeInfo {
  std::string file, function;
  int firstlineno = 0;
  std::vector<uint8_t> linetable;
  bool ok = false;
};

}  // namespace

struct RemotePythonReader::Impl {
  int pid = 0;
  Mem mem{0};
  bool found = false;
  std::string status;
  lp::PyLayout layout;
  ThreadListLayout threads;
  uint64_t runtime = 0, code_type = 0, unicode_type = 0, bytes_type = 0;

  bool unicode(uint64_t obj, std::string& out) const {
    const lp::PyLayout& L = layout;
    if (!obj || mem.ptr(obj + L.ob_type) != unicode_type) return false;
    const uint32_t state = mem.get<uint32_t>(obj + L.uni_state);
    const unsigned kind = (state >> (lp::kStateKindShift + L.state_shift)) & 7;
    const bool compact = state & (lp::kStateCompactBit << L.state_shift);
    const bool ascii = state & (lp::kStateAsciiBit << L.state_shift);
    if (L.uni_has_ready_bit && !(state & lp::kStateReadyBit)) return false;
    if (kind != 1 && kind != 2 && kind != 4) return false;
    int64_t length = mem.get<int64_t>(obj + L.uni_length, -1);
    if (length < 0) return false;
    if (static_cast<size_t>(length) > kMaxStringChars) length = kMaxStringChars;
    uint64_t data = compact ? obj + (ascii ? L.uni_ascii_size : L.uni_compact_size) : mem.ptr(obj + L.uni_compact_size);
    std::string raw(static_cast<size_t>(length) * kind, '\0');
    if (length > 0 && !mem.read(data, raw.data(), raw.size())) return false;
    out.clear();
    if (kind == 1 && ascii) {
      out = raw;
    } else {
      for (size_t off = 0; off + kind <= raw.size(); off += kind) {
        uint32_t cp = 0;
        if (kind == 1) cp = static_cast<uint8_t>(raw[off]);
        else if (kind == 2) { uint16_t v; std::memcpy(&v, raw.data() + off, 2); cp = v; }
        else std::memcpy(&cp, raw.data() + off, 4);
        append_utf8(out, cp);
      }
    }
    return true;
  }

  // By reference (a line table is up to 1 MiB: copied for every frame it was): the cached entry,
  // or, once the cache is full, the last one computed (valid until the next call).
  const CodeInfo& code_info(uint64_t code, std::map<uint64_t, CodeInfo>& cache) const {
    auto it = cache.find(code);
    if (it != cache.end()) return it->second;
    const lp::PyLayout& L = layout;
    CodeInfo ci;
    ci.ok = unicode(mem.ptr(code + L.co_filename), ci.file) | unicode(mem.ptr(code + L.co_qualname), ci.function);
    if (ci.file.empty()) ci.file = "<unknown>";
    if (ci.function.empty()) ci.function = "<unknown>";
    ci.firstlineno = mem.get<int32_t>(code + L.co_firstlineno);
    const uint64_t table = mem.ptr(code + L.co_linetable);
    if (table && mem.ptr(table + L.ob_type) == bytes_type) {
      const int64_t n = mem.get<int64_t>(table + L.bytes_size, -1);
      if (n > 0 && static_cast<size_t>(n) <= kMaxLinetable) {
        ci.linetable.resize(static_cast<size_t>(n));
        if (!mem.read(table + L.bytes_sval, ci.linetable.data(), ci.linetable.size())) ci.linetable.clear();
      }
    }
    if (cache.size() < 100000) return cache.emplace(code, std::move(ci)).first->second;
    uncached_ = std::move(ci);
    return uncached_;
  }
  mutable CodeInfo uncached_;
  // Line-table bytes decoded in one read, while the target is stopped: a hostile or damaged
  // process (4,096 threads x 256 frames of 1 MiB tables) would otherwise stretch the stop by
  // minutes. Past the budget, frames keep their file and function, not their line.
  static constexpr size_t kMaxLineTableBytes = size_t(64) << 20;
  mutable size_t line_table_bytes_ = 0;

  PythonFrame frame_of(const CodeInfo& ci, int32_t addr) const {
    PythonFrame f;
    f.file = ci.file;
    f.function = ci.function;
    if (addr == lp::kAddrNoLine) return f;
    if (line_table_bytes_ + ci.linetable.size() > kMaxLineTableBytes) return f;
    line_table_bytes_ += ci.linetable.size();
    const int line = layout.linetable == lp::LineTable::kPep626
                         ? lp::python_linetable_line_310(ci.linetable.data(), ci.linetable.size(), ci.firstlineno, addr)
                         : lp::python_linetable_line(ci.linetable.data(), ci.linetable.size(), ci.firstlineno, addr);
    f.line = line > 0 ? line : 0;
    return f;
  }

  std::vector<PythonFrame> frames_of(uint64_t ts, std::map<uint64_t, CodeInfo>& cache) const {
    const lp::PyLayout& L = layout;
    std::vector<PythonFrame> out;
    if (L.ts_frame != lp::kNoField) {  // 3.10: PyFrameObject chain
      uint64_t frame = mem.ptr(ts + L.ts_frame);
      for (size_t walked = 0; frame && out.size() < kMaxFrames && walked < 4 * kMaxFrames; ++walked) {
        const uint64_t code = mem.ptr(frame + L.fr_code);
        if (code && mem.ptr(code + L.ob_type) == code_type) {
          const int32_t lasti = mem.get<int32_t>(frame + L.fr_lasti, -1);
          out.push_back(frame_of(code_info(code, cache), lasti >= 0 && lasti < (1 << 29) ? lasti * 2 : -1));
        }
        frame = mem.ptr(frame + L.fr_previous);
      }
      return out;
    }
    uint64_t frame;
    if (L.ts_cframe != lp::kNoField) {
      const uint64_t cframe = mem.ptr(ts + L.ts_cframe);
      frame = cframe ? mem.ptr(cframe + L.cframe_current) : 0;
    } else {
      frame = mem.ptr(ts + L.ts_current_frame);
    }
    const uint64_t exec_mask = L.executable_tagged ? ~uint64_t{7} : ~uint64_t{0};
    for (size_t walked = 0; frame && out.size() < kMaxFrames && walked < 4 * kMaxFrames; ++walked) {
      const uint64_t code = mem.ptr(frame + L.fr_code) & exec_mask;
      const int owner = mem.get<int8_t>(frame + L.fr_owner, lp::kFirstShimOwner);
      const uint64_t instr = mem.ptr(frame + L.fr_instr);
      const uint64_t previous = mem.ptr(frame + L.fr_previous);
      if (owner < lp::kFirstShimOwner && code && mem.ptr(code + L.ob_type) == code_type) {
        const int64_t units = mem.get<int64_t>(code + L.co_size);
        const bool own_bytecode = L.fr_tlbc_index != lp::kNoField && mem.get<int32_t>(frame + L.fr_tlbc_index) != 0;
        const int64_t index = own_bytecode ? -1 : (static_cast<int64_t>(instr) - static_cast<int64_t>(code + L.co_code_adaptive)) / 2;
        const bool incomplete = L.co_firsttraceable != lp::kNoField && owner != lp::kOwnedByGenerator &&
                                index < mem.get<int32_t>(code + L.co_firsttraceable);
        if (!incomplete) {
          const int32_t addr = own_bytecode ? lp::kAddrNoLine
                               : (index >= 0 && index < units) ? static_cast<int32_t>(index * 2)
                                                               : -1;
          out.push_back(frame_of(code_info(code, cache), addr));
        }
      }
      frame = previous;
    }
    return out;
  }

  void find(int target) {
    pid = target;
    mem = Mem(target);
    std::set<std::string> tried;
    const std::string root = "/proc/" + std::to_string(target) + "/root";
    const std::vector<Mapping> maps = mappings_of(target);
    for (const Mapping& m : maps) {
      if (m.path.empty() || m.path[0] != '/' || tried.count(m.path)) continue;
      const std::string base = m.path.substr(m.path.rfind('/') + 1);
      unsigned minor = 0;
      if (std::sscanf(base.c_str(), "libpython3.%u", &minor) != 1 && std::sscanf(base.c_str(), "python3.%u", &minor) != 1)
        continue;
      tried.insert(m.path);
      ElfSymbols es = read_elf_symbols(root + m.path, {"_PyRuntime", "Py_Version", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type"});
      if (!es.error.empty()) es = read_elf_symbols(m.path, {"_PyRuntime", "Py_Version", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type"});
      if (!es.values.count("_PyRuntime")) continue;
      uint64_t load_base = 0;
      bool have_base = false;
      for (const Mapping& mm : maps)
        if (mm.path == m.path && mm.offset == 0) {
          load_base = mm.start - es.first_load_vaddr;
          have_base = true;
          break;
        }
      if (!have_base) continue;
      for (const char* k : {"PyCode_Type", "PyUnicode_Type", "PyBytes_Type"})
        if (!es.values.count(k)) {
          status = "CPython in " + m.path + ": symbol " + k + " not found";
          return;
        }
      runtime = load_base + es.values["_PyRuntime"];
      code_type = load_base + es.values["PyCode_Type"];
      unicode_type = load_base + es.values["PyUnicode_Type"];
      bytes_type = load_base + es.values["PyBytes_Type"];
      unsigned major = 3, micro = 0;
      if (es.values.count("Py_Version")) {
        const uint64_t v = mem.get<uint64_t>(load_base + es.values["Py_Version"]) & 0xffffffffu;
        major = (v >> 24) & 0xff, minor = (v >> 16) & 0xff, micro = (v >> 8) & 0xff;
      }
      char ver[64];
      std::snprintf(ver, sizeof ver, "CPython %u.%u.%u", major, minor, micro);
      if (!es.values.count("Py_Version")) std::snprintf(ver, sizeof ver, "CPython %u.%u", major, minor);
      status = std::string(ver) + " (" + m.path + ")";
      if (major != 3) {
        status = std::string(ver) + ": not supported (3.10 to 3.14)";
        return;
      }
      if (minor == 10) {
        layout = lp::kLayout310, threads = kThreads310;
      } else if (minor == 11) {
        layout = lp::kLayout311, threads = kThreads311;
      } else if (minor == 12) {
        layout = lp::kLayout312, threads = kThreads312;
      } else if (minor == 13 || minor == 14) {
        lp::PyDebugOffsets314 copy;  // the larger of the two prefixes
        if (!mem.read(runtime, &copy, sizeof copy)) {
          status += ": _PyRuntime unreadable";
          return;
        }
        char why[128] = {};
        if (!lp::python_layout_from_runtime_copy(&copy, minor, layout, why, sizeof why)) {
          status += std::string(": ") + why;
          return;
        }
        if (minor == 13) {
          lp::PyDebugOffsets313 d;
          std::memcpy(&d, &copy, sizeof d);
          threads = threads_from_debug_offsets(d);
        } else {
          threads = threads_from_debug_offsets(copy);
        }
        if (layout.free_threaded) status += " free-threaded";
      } else {
        status = std::string(ver) + ": not supported (3.10 to 3.14)";
        return;
      }
      found = true;
      return;
    }
    status = tried.empty() ? "no CPython in the process" : "CPython mapped but _PyRuntime not found in its symbols";
  }

  RemotePython read(std::chrono::steady_clock::time_point deadline) const {
    RemotePython out;
    out.found = found;
    out.status = status;
    if (!found) return out;
    std::map<uint64_t, CodeInfo> cache;
    line_table_bytes_ = 0;
    mem.begin_pages();
    const ThreadListLayout& T = threads;
    uint64_t interp = mem.ptr(runtime + T.runtime_interpreters_head);
    for (size_t ni = 0; interp && ni < kMaxInterpreters; ++ni) {
      uint64_t holder = 0;
      int locked = 0;
      if (T.gil_where == ThreadListLayout::kInRuntime) {
        holder = mem.ptr(runtime + T.gil_last_holder);
        locked = mem.get<int32_t>(runtime + T.gil_locked);
      } else if (T.gil_where == ThreadListLayout::kBehindInterpPointer) {
        const uint64_t gil = mem.ptr(interp + T.gil_pointer);
        holder = gil ? mem.ptr(gil + T.gil_last_holder) : 0;
        locked = gil ? mem.get<int32_t>(gil + T.gil_locked) : 0;
      } else {
        holder = mem.ptr(interp + T.gil_last_holder);
        locked = mem.get<int32_t>(interp + T.gil_locked);
      }
      // The thread states first (pointers only), then their frames in the order that matters
      // if the stop's read budget runs out: the GIL holder, then the oldest (CPython lists the
      // newest first; the main thread is the last).
      std::vector<uint64_t> states;
      for (uint64_t ts = mem.ptr(interp + T.interp_threads_head);
           ts && out.threads.size() + states.size() < kMaxThreads && states.size() < kMaxThreads;
           ts = mem.ptr(ts + T.ts_next))
        states.push_back(ts);
      std::reverse(states.begin(), states.end());
      if (locked && !layout.free_threaded)
        if (auto h = std::find(states.begin(), states.end(), holder); h != states.end())
          std::rotate(states.begin(), h, h + 1);
      for (uint64_t ts : states) {
        if (std::chrono::steady_clock::now() >= deadline) {
          out.cut_short = true;
          out.status += "; the frames of " + std::to_string(out.threads.size()) +
                        " thread states read, the rest not: the stop's read budget was spent";
          mem.end_pages();
          return out;
        }
        PythonThread t;
        t.thread_id = mem.ptr(ts + T.ts_thread_id);
        if (T.ts_native_thread_id != UINT64_MAX) t.native_tid = static_cast<int>(mem.get<uint64_t>(ts + T.ts_native_thread_id));
        t.gil_holder = locked && holder == ts && !layout.free_threaded;
        t.frames = frames_of(ts, cache);
        out.threads.push_back(std::move(t));
      }
      interp = mem.ptr(interp + T.interp_next);
    }
    mem.end_pages();
    return out;
  }
};

RemotePythonReader::RemotePythonReader(int pid) : impl_(new Impl) { impl_->find(pid); }
RemotePythonReader::~RemotePythonReader() { delete impl_; }
const std::string& RemotePythonReader::status() const { return impl_->status; }
bool RemotePythonReader::found() const { return impl_->found; }
RemotePython RemotePythonReader::read(std::chrono::steady_clock::time_point deadline) const {
  return impl_->read(deadline);
}

void merge_python_threads(const RemotePython& py, std::vector<ThreadSnapshot>& threads) {
  for (const PythonThread& pt : py.threads) {
    ThreadSnapshot* hit = nullptr;
    for (ThreadSnapshot& t : threads)
      if ((pt.native_tid > 0 && t.tid == pt.native_tid) ||
          (pt.native_tid <= 0 && pt.thread_id && t.pthread_self == pt.thread_id))
        hit = &t;
    if (!hit) {  // a thread state whose native thread we did not list (or 3.10 off x86-64)
      ThreadSnapshot t;
      t.tid = pt.native_tid;
      t.name = "(python thread state, native thread not matched)";
      threads.push_back(std::move(t));
      hit = &threads.back();
    }
    hit->has_python = true;
    hit->gil_holder = pt.gil_holder;
    hit->python = pt.frames;
  }
}

}  // namespace lockstep::attach
