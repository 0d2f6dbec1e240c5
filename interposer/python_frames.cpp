// Python frame capture without the GIL. See python_frames.h for the contract and
// docs/python-frames.md for what is captured when.
//
// Safety argument: the frames walked belong to the calling thread, which is inside our hook
// and so cannot run Python; its frame chain, the code objects the frames hold strong
// references to, and the strings/bytes those code objects own cannot be freed or changed by
// other threads meanwhile. (The specializing interpreter may rewrite co_code_adaptive from
// other threads; we never read bytecode.) Nothing here calls Python, takes the GIL or a lock.
#include "python_frames.h"

#include "python_layouts.h"

#include <dlfcn.h>
#include <pthread.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

namespace lockstep {

// Everything needed to resolve a frame after its code object is gone, plus the guard that
// tells a live code object from a dead one whose address was reused.
struct PyCodeInfo {
  uintptr_t code = 0;  // address of the code object when interned
  // Code-watcher guard: the destroy count of this address's bucket when the entry was last
  // proven to describe the live code object at `code` (kUnwatched: never under the watcher).
  mutable std::atomic<uint64_t> watched_gen{0};
  // guard: identity of the objects the code owned, and its exact location table
  uintptr_t filename_obj = 0;
  uintptr_t qualname_obj = 0;
  uintptr_t linetable_obj = 0;
  int firstlineno = 0;
  pyframes_detail::LineTable linetable_format = pyframes_detail::LineTable::kLocations;
  uint64_t hash = 0;  // content hash: file, qualname, firstlineno (stable across processes)
  std::string file;      // UTF-8
  std::string function;  // UTF-8
  std::string file_raw;  // as stored by CPython (kind bytes per character), for the guard
  std::string function_raw;
  std::vector<uint8_t> linetable;
};

namespace {

using pyframes_detail::kNoField;
using pyframes_detail::PyLayout;

constexpr size_t kMaxWalk = 1u << 16;      // frames visited per capture: a corrupt cycle ends
constexpr size_t kMaxStringChars = 4096;   // longer names are cut
constexpr size_t kMaxLinetable = 1u << 20;  // bytes; larger tables keep only firstlineno
constexpr unsigned kTableBits = 16;        // 65536 live code objects
constexpr size_t kTableSize = size_t{1} << kTableBits;
constexpr size_t kMaxProbe = 64;
constexpr size_t kMaxInterned = size_t{1} << 18;  // bound on memory lost to code churn

using Runtime = pyframes_detail::PyRuntimeView;

template <typename T>
inline T load(const char* p, uint32_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof v);
  return v;
}
inline const char* load_ptr(const char* p, uint32_t off) { return load<const char*>(p, off); }

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// Every offset read from a debug-offsets table must lie inside the struct size the same table
// publishes (and sizes must be plausible), or the table is not what we think it is.
bool within(uint64_t off, uint64_t size, uint64_t width = 8) {
  return size > 0 && size < (1u << 16) && off + width <= size;
}

template <typename D>
bool layout_from_debug_offsets(const D& d, int minor, PyLayout& l, char* why, size_t n) {
  const bool sane =
      within(d.thread_state.current_frame, d.thread_state.size) &&
      within(d.interpreter_frame.previous, d.interpreter_frame.size) &&
      within(d.interpreter_frame.executable, d.interpreter_frame.size) &&
      within(d.interpreter_frame.instr_ptr, d.interpreter_frame.size) &&
      within(d.interpreter_frame.owner, d.interpreter_frame.size, 1) &&
      within(d.code_object.filename, d.code_object.size) &&
      within(d.code_object.qualname, d.code_object.size) &&
      within(d.code_object.linetable, d.code_object.size) &&
      within(d.code_object.firstlineno, d.code_object.size, 4) &&
      d.code_object.co_code_adaptive < (1u << 16) &&
      within(d.pyobject.ob_type, d.pyobject.size) &&
      within(d.tuple_object.ob_size, d.tuple_object.size) &&
      within(d.bytes_object.ob_size, d.bytes_object.size) && d.bytes_object.ob_sval < 256 &&
      within(d.unicode_object.state, d.unicode_object.asciiobject_size, 4) &&
      within(d.unicode_object.length, d.unicode_object.asciiobject_size) &&
      d.unicode_object.asciiobject_size <= d.unicode_object.size && d.free_threaded <= 1;
  if (!sane) {
    std::snprintf(why, n, "CPython 3.%d: debug offsets fail validation; frames not read", minor);
    return false;
  }
  l.minor = minor;
  l.free_threaded = d.free_threaded != 0;
  l.ts_current_frame = static_cast<uint32_t>(d.thread_state.current_frame);
  l.fr_code = static_cast<uint32_t>(d.interpreter_frame.executable);
  l.fr_previous = static_cast<uint32_t>(d.interpreter_frame.previous);
  l.fr_instr = static_cast<uint32_t>(d.interpreter_frame.instr_ptr);
  l.fr_owner = static_cast<uint32_t>(d.interpreter_frame.owner);
  if (within(d.thread_state.interp, d.thread_state.size))
    l.ts_interp = static_cast<uint32_t>(d.thread_state.interp);
  l.co_size = static_cast<uint32_t>(d.tuple_object.ob_size);  // PyVarObject.ob_size
  l.co_filename = static_cast<uint32_t>(d.code_object.filename);
  l.co_qualname = static_cast<uint32_t>(d.code_object.qualname);
  l.co_linetable = static_cast<uint32_t>(d.code_object.linetable);
  l.co_firstlineno = static_cast<uint32_t>(d.code_object.firstlineno);
  l.co_code_adaptive = static_cast<uint32_t>(d.code_object.co_code_adaptive);
  l.ob_type = static_cast<uint32_t>(d.pyobject.ob_type);
  l.bytes_size = static_cast<uint32_t>(d.bytes_object.ob_size);
  l.bytes_sval = static_cast<uint32_t>(d.bytes_object.ob_sval);
  l.uni_length = static_cast<uint32_t>(d.unicode_object.length);
  l.uni_state = static_cast<uint32_t>(d.unicode_object.state);
  l.uni_ascii_size = static_cast<uint32_t>(d.unicode_object.asciiobject_size);
  // PyCompactUnicodeObject = PyASCIIObject + utf8_length + utf8 (checked in layout_check).
  l.uni_compact_size = l.uni_ascii_size + 2 * sizeof(void*);
  return true;
}

bool layout_from_runtime(const void* runtime_sym, unsigned minor, PyLayout& l, char* why,
                         size_t n) {
  char cookie[8];
  uint64_t version;
  std::memcpy(cookie, runtime_sym, sizeof cookie);
  std::memcpy(&version, static_cast<const char*>(runtime_sym) + 8, sizeof version);
  if (std::memcmp(cookie, "xdebugpy", 8) != 0) {
    std::snprintf(why, n, "CPython 3.%u: _PyRuntime.debug_offsets has no cookie", minor);
    return false;
  }
  // The table's own version field decides its layout, not the symbol we found it through.
  if ((version >> 24) != 3 || ((version >> 16) & 0xff) != minor) {
    std::snprintf(why, n, "CPython 3.%u: debug offsets of version %#llx", minor,
                  static_cast<unsigned long long>(version));
    return false;
  }
  if (minor == 13) {
    pyframes_detail::PyDebugOffsets313 d;
    std::memcpy(&d, runtime_sym, sizeof d);
    return layout_from_debug_offsets(d, 13, l, why, n);
  }
  pyframes_detail::PyDebugOffsets314 d;
  std::memcpy(&d, runtime_sym, sizeof d);
  if (!layout_from_debug_offsets(d, 14, l, why, n)) return false;
  l.executable_tagged = true;
  if (l.free_threaded) {
    l.state_shift = pyframes_detail::kStateShiftFreeThreaded314;
    if (d.interpreter_frame.tlbc_index != 0 &&
        within(d.interpreter_frame.tlbc_index, d.interpreter_frame.size, 4))
      l.fr_tlbc_index = static_cast<uint32_t>(d.interpreter_frame.tlbc_index);
  }
  return true;
}

// "3.10.13 (main, ...)" -> 3, 10, 13
bool parse_version_string(const char* s, unsigned& major, unsigned& minor, unsigned& micro) {
  if (!s) return false;
  return std::sscanf(s, "%u.%u.%u", &major, &minor, &micro) == 3;
}

}  // namespace

namespace pyframes_detail {

bool python_layout_from_runtime_copy(const void* runtime_copy, unsigned minor, PyLayout& layout,
                                     char* why, size_t why_size) {
  return layout_from_runtime(runtime_copy, minor, layout, why, why_size);
}

PyRuntimeView python_runtime_from(const PySymbols& sym) {
  Runtime rt;
  rt.sym = sym;
  if (!sym.is_initialized || !sym.this_thread_state) {
    std::snprintf(rt.status, sizeof rt.status, "no CPython in this process");
    return rt;
  }
  if (!sym.code_type || !sym.unicode_type || !sym.bytes_type) {
    std::snprintf(rt.status, sizeof rt.status, "CPython type objects not found");
    return rt;
  }
  unsigned major = 0, minor = 0, micro = 0;
  if (sym.py_version) {  // Py_Version appeared in 3.11
    const unsigned long v = *sym.py_version;
    major = (v >> 24) & 0xff, minor = (v >> 16) & 0xff, micro = (v >> 8) & 0xff;
  } else if (!sym.get_version || !parse_version_string(sym.get_version(), major, minor, micro)) {
    std::snprintf(rt.status, sizeof rt.status, "CPython version unknown; frames not read");
    return rt;
  }
  if (major == 3 && minor == 10) {
    rt.layout = kLayout310;
  } else if (major == 3 && minor == 11) {
    rt.layout = kLayout311;
  } else if (major == 3 && minor == 12) {
    rt.layout = kLayout312;
  } else if (major == 3 && (minor == 13 || minor == 14)) {
    if (!sym.runtime) {
      std::snprintf(rt.status, sizeof rt.status, "CPython 3.%u: _PyRuntime not exported", minor);
      return rt;
    }
    if (!layout_from_runtime(sym.runtime, minor, rt.layout, rt.status, sizeof rt.status))
      return rt;
  } else {
    std::snprintf(rt.status, sizeof rt.status,
                  "CPython %u.%u not supported (supported: 3.10 to 3.14)", major, minor);
    return rt;
  }
  std::snprintf(rt.status, sizeof rt.status, "CPython %u.%u.%u%s", major, minor, micro,
                rt.layout.free_threaded ? " (free-threaded)" : "");
  rt.ok = true;
  return rt;
}

}  // namespace pyframes_detail

namespace {

Runtime detect() {
  pyframes_detail::PySymbols sym;
  sym.py_version = static_cast<const unsigned long*>(dlsym(RTLD_DEFAULT, "Py_Version"));
  sym.get_version = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "Py_GetVersion"));
  sym.is_initialized = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  sym.this_thread_state =
      reinterpret_cast<void* (*)()>(dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState"));
  sym.runtime = dlsym(RTLD_DEFAULT, "_PyRuntime");
  sym.code_type = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyCode_Type"));
  sym.unicode_type = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyUnicode_Type"));
  sym.bytes_type = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyBytes_Type"));
  sym.add_pending_call =
      reinterpret_cast<int (*)(int (*)(void*), void*)>(dlsym(RTLD_DEFAULT, "Py_AddPendingCall"));
  sym.add_code_watcher =
      reinterpret_cast<int (*)(int (*)(int, void*))>(dlsym(RTLD_DEFAULT, "PyCode_AddWatcher"));
  sym.at_exit = reinterpret_cast<int (*)(void (*)())>(dlsym(RTLD_DEFAULT, "Py_AtExit"));
  sym.err_clear = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "PyErr_Clear"));
  sym.interpreter_get =
      reinterpret_cast<void* (*)()>(dlsym(RTLD_DEFAULT, "PyInterpreterState_Get"));
  return pyframes_detail::python_runtime_from(sym);
}

const Runtime& runtime() {
  static const Runtime rt = detect();  // first call: dlsym (and Py_GetVersion on 3.10) only
  return rt;
}

// --- strings and bytes, read from the object layout -------------------------------------

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
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The character data of a str object as CPython stores it: `kind` bytes per character.
struct RawStr {
  const char* data = nullptr;
  size_t nbytes = 0;
  unsigned kind = 0;
  bool ascii = false;
};

bool raw_unicode(const Runtime& rt, const char* obj, RawStr& out) {
  const PyLayout& L = rt.layout;
  if (!obj || load<uintptr_t>(obj, L.ob_type) != rt.sym.unicode_type) return false;
  const uint32_t state = load<uint32_t>(obj, L.uni_state);
  const unsigned kind = (state >> (pyframes_detail::kStateKindShift + L.state_shift)) & 7;
  const bool compact = state & (pyframes_detail::kStateCompactBit << L.state_shift);
  out.ascii = state & (pyframes_detail::kStateAsciiBit << L.state_shift);
  if (L.uni_has_ready_bit && !(state & pyframes_detail::kStateReadyBit)) return false;
  if (kind != 1 && kind != 2 && kind != 4) return false;
  int64_t length = load<int64_t>(obj, L.uni_length);
  if (length < 0) return false;
  if (static_cast<size_t>(length) > kMaxStringChars) length = kMaxStringChars;
  if (compact)
    out.data = obj + (out.ascii ? L.uni_ascii_size : L.uni_compact_size);
  else
    out.data = load_ptr(obj, L.uni_compact_size);  // legacy string: PyUnicodeObject.data.any
  out.kind = kind;
  out.nbytes = static_cast<size_t>(length) * kind;
  return out.data != nullptr;
}

std::string to_utf8(const RawStr& s) {
  if (s.ascii) return std::string(s.data, s.nbytes);
  std::string out;
  out.reserve(s.nbytes * 2);
  for (size_t off = 0; off < s.nbytes; off += s.kind) {
    uint32_t cp;
    if (s.kind == 1)
      cp = static_cast<uint8_t>(s.data[off]);
    else if (s.kind == 2)
      cp = load<uint16_t>(s.data, static_cast<uint32_t>(off));
    else
      cp = load<uint32_t>(s.data, static_cast<uint32_t>(off));
    append_utf8(out, cp);
  }
  return out;
}

// Returns the bytes' data and size, or nullptr if `obj` is not a bytes object.
const uint8_t* read_bytes(const Runtime& rt, const char* obj, size_t& size) {
  const PyLayout& L = rt.layout;
  if (!obj || load<uintptr_t>(obj, L.ob_type) != rt.sym.bytes_type) return nullptr;
  const int64_t n = load<int64_t>(obj, L.bytes_size);
  if (n < 0) return nullptr;
  size = static_cast<size_t>(n);
  return reinterpret_cast<const uint8_t*>(obj + L.bytes_sval);
}

// --- the intern table: code object address -> PyCodeInfo ---------------------------------
//
// Lock-free open addressing. Slots only ever go from null to an entry, or from an entry to its
// replacement (the old code object died and a new one took its address). Entries are never
// freed: raw frames captured earlier may still point at them.

std::atomic<const PyCodeInfo*> g_table[kTableSize];
std::atomic<size_t> g_interned{0};
std::atomic<bool> g_exact_only{false};  // benchmarking only: python_frames_bench_exact_guard

// --- the code-watcher guard (CPython 3.12+, GIL builds) ----------------------------------
//
// The exact guard below re-reads a code object's names and location table at every capture
// (~140 ns a frame when they are cold in cache). Once a code watcher (PyCode_AddWatcher) is
// registered, CPython calls on_code_event(DESTROY) from code_dealloc for every code object of
// the watched interpreter before its memory is freed; it bumps the destroy count of the
// address's bucket. An entry remembers the bucket's count read (before reading the code
// object) while that code object was alive in the capturing thread's frame; a lookup that
// reads the same count trusts the entry without reading the code object's contents.
//
// Why that is sound (GIL builds): let X be the code object at address A when entry E took
// count g, read at R in thread T while T's frame held a strong reference to X. X's dealloc
// comes after T dropped that reference, which T does holding the GIL after R, so R
// happens-before X's DESTROY bump B_X: R cannot have read B_X or a later value, and g < the
// count after B_X. A later code object Y at A is allocated after X's memory is freed (after
// B_X), and reaches a capturing thread's frame only through Python's own synchronization
// (the GIL): B_X happens-before every capture that sees Y, whose acquire load then reads a
// count > g, so E is not trusted for Y and the exact guard decides. Counts only grow, and a
// spurious bump (another address of the same bucket, or a DESTROY whose object a watcher
// resurrected) only sends a lookup to the exact guard, which then refreshes E's count.
// Registration happens-before any trusted lookup (release store of kWatchActive, acquire
// load per capture), and the dealloc of X happens-after R, so it sees our watcher.
// Not trusted (exact guard instead): before registration; threads of another interpreter
// (watchers are per interpreter: code freed there would not be reported); once the
// interpreter is finalized (watchers are cleared then; Py_AtExit turns the guard off for good,
// so a re-initialized interpreter is never trusted); free-threaded builds (whose reference
// counting does not give the happens-before chain above); 3.10/3.11 (no watchers).
// Residual: a code object of the main interpreter whose last reference is dropped by a thread
// of another interpreter sharing its allocator is not reported to our watcher.

constexpr uint64_t kUnwatched = ~uint64_t{0};
std::atomic<uint64_t> g_destroyed[kTableSize];  // per address bucket: DESTROY events seen
// Every DESTROY event, whatever its bucket: a cached stack proven when this read N and it
// still reads N lost no code object anywhere since (one load instead of one per frame, each
// a miss in the 512 KiB of buckets; in a training loop code objects rarely die).
std::atomic<uint64_t> g_destroyed_total{0};

enum WatchState : int { kWatchIdle, kWatchRequested, kWatchActive, kWatchOff };
std::atomic<int> g_watch_state{kWatchIdle};
std::atomic<uintptr_t> g_watch_interp{0};  // the interpreter whose code objects we watch
std::atomic<const char*> g_watch_why{"exact guard: no capture has asked for the code watcher"};
std::atomic<bool> g_watch_allowed{true};  // test hook: python_frames_allow_code_watcher
std::atomic<unsigned> g_watch_attempts{0};
const pyframes_detail::PySymbols* g_watch_api = nullptr;  // set before the pending call

inline size_t bucket_of(uintptr_t code) {
  return static_cast<size_t>(mix64(code) >> (64 - kTableBits));
}

int on_code_event(int event, void* code) {  // with the GIL, from CPython (create/dealloc)
  if (event == pyframes_detail::kPyCodeEventDestroy) {
    g_destroyed[bucket_of(reinterpret_cast<uintptr_t>(code))].fetch_add(
        1, std::memory_order_acq_rel);
    g_destroyed_total.fetch_add(1, std::memory_order_acq_rel);
  }
  return 0;
}

void on_python_exit() {  // Py_AtExit: end of Py_FinalizeEx, after the watchers were cleared
  const int was = g_watch_state.exchange(kWatchOff, std::memory_order_seq_cst);
  g_watch_why.store(was == kWatchActive
                        ? "exact guard: the interpreter was finalized (code watcher until then)"
                        : "exact guard: the interpreter was finalized");
}

void watch_off(const char* why) {
  g_watch_why.store(why);
  g_watch_state.store(kWatchOff, std::memory_order_release);
}

// Pending call: runs in the main thread of the main interpreter, with the GIL.
int register_code_watcher(void*) {
  if (g_watch_state.load(std::memory_order_acquire) != kWatchRequested) return 0;
  const pyframes_detail::PySymbols& api = *g_watch_api;
  if (api.at_exit(on_python_exit) != 0) {
    watch_off("exact guard: Py_AtExit table full");
    return 0;
  }
  if (api.add_code_watcher(on_code_event) < 0) {
    api.err_clear();
    watch_off("exact guard: no free code watcher slot (CPython has 8)");
    return 0;
  }
  g_watch_interp.store(reinterpret_cast<uintptr_t>(api.interpreter_get()),
                       std::memory_order_relaxed);
  g_watch_why.store("code watcher (exact guard for other interpreters)");
  g_watch_state.store(kWatchActive, std::memory_order_release);
  return 0;
}

// From a capture that found Python frames, any thread, without the GIL: Py_AddPendingCall
// needs neither the GIL nor a thread state.
void request_code_watcher(const Runtime& rt) {
  const pyframes_detail::PySymbols& api = rt.sym;
  if (!g_watch_allowed.load(std::memory_order_relaxed)) return;
  if (rt.layout.minor < 12 || rt.layout.free_threaded || rt.layout.ts_interp == kNoField ||
      !api.add_pending_call || !api.add_code_watcher || !api.at_exit || !api.err_clear ||
      !api.interpreter_get) {
    watch_off(rt.layout.free_threaded ? "exact guard: free-threaded build"
                                      : "exact guard: no code watchers in this CPython");
    return;
  }
  int idle = kWatchIdle;
  if (!g_watch_state.compare_exchange_strong(idle, kWatchRequested, std::memory_order_acq_rel))
    return;
  g_watch_api = &api;
  g_watch_why.store("exact guard: code watcher registration pending (main thread)");
  if (api.add_pending_call(register_code_watcher, nullptr) != 0) {  // queue full: later
    if (g_watch_attempts.fetch_add(1, std::memory_order_relaxed) >= 32)
      watch_off("exact guard: the pending-call queue stayed full");
    else
      g_watch_state.store(kWatchIdle, std::memory_order_release);
  }
}

// May this capture trust watched entries? Read once per capture.
bool watcher_trusted(const Runtime& rt, const char* tstate) {
  if (g_watch_state.load(std::memory_order_acquire) != kWatchActive ||
      g_exact_only.load(std::memory_order_relaxed))
    return false;
  return load<uintptr_t>(tstate, rt.layout.ts_interp) ==
         g_watch_interp.load(std::memory_order_relaxed);
}

bool same_str(const Runtime& rt, const char* obj, const std::string& raw) {
  RawStr s;
  if (!raw_unicode(rt, obj, s)) return raw.empty();
  return s.nbytes == raw.size() && std::memcmp(s.data, raw.data(), s.nbytes) == 0;
}

// Is `info` still the description of the live code object at `code`? Objects it owned can die
// with it and their addresses be reused too, so compare every byte that decides what we
// report: file and qualname characters, first line, location table. A stale entry can then
// never give a wrong answer; the pointer checks only make the common mismatch cheap.
bool guard_matches(const Runtime& rt, const PyCodeInfo& info, const char* code) {
  const PyLayout& L = rt.layout;
  if (load<uintptr_t>(code, L.co_filename) != info.filename_obj ||
      load<uintptr_t>(code, L.co_qualname) != info.qualname_obj ||
      load<uintptr_t>(code, L.co_linetable) != info.linetable_obj ||
      load<int32_t>(code, L.co_firstlineno) != info.firstlineno)
    return false;
  if (!same_str(rt, load_ptr(code, L.co_filename), info.file_raw) ||
      !same_str(rt, load_ptr(code, L.co_qualname), info.function_raw))
    return false;
  size_t n = 0;
  const uint8_t* t = read_bytes(rt, load_ptr(code, L.co_linetable), n);
  if (!t) return info.linetable.empty();
  if (n > kMaxLinetable) return info.linetable.empty();
  return n == info.linetable.size() && std::memcmp(t, info.linetable.data(), n) == 0;
}

PyCodeInfo* make_info(const Runtime& rt, const char* code) {
  if (g_interned.fetch_add(1, std::memory_order_relaxed) >= kMaxInterned) return nullptr;
  const PyLayout& L = rt.layout;
  auto* info = new (std::nothrow) PyCodeInfo;
  if (!info) return nullptr;
  info->code = reinterpret_cast<uintptr_t>(code);
  info->filename_obj = load<uintptr_t>(code, L.co_filename);
  info->qualname_obj = load<uintptr_t>(code, L.co_qualname);
  info->linetable_obj = load<uintptr_t>(code, L.co_linetable);
  info->firstlineno = load<int32_t>(code, L.co_firstlineno);
  info->linetable_format = L.linetable;
  RawStr str;
  if (raw_unicode(rt, load_ptr(code, L.co_filename), str)) {
    info->file = to_utf8(str);
    info->file_raw.assign(str.data, str.nbytes);
  } else {
    info->file = "<unknown>";
  }
  if (raw_unicode(rt, load_ptr(code, L.co_qualname), str)) {
    info->function = to_utf8(str);
    info->function_raw.assign(str.data, str.nbytes);
  } else {
    info->function = "<unknown>";
  }
  size_t n = 0;
  const uint8_t* t = read_bytes(rt, load_ptr(code, L.co_linetable), n);
  if (t && n <= kMaxLinetable) info->linetable.assign(t, t + n);
  uint64_t h = fnv1a(info->file.data(), info->file.size(), 0xcbf29ce484222325ull);
  h = fnv1a("\0", 1, h);
  h = fnv1a(info->function.data(), info->function.size(), h);
  h = fnv1a(&info->firstlineno, sizeof info->firstlineno, h);
  info->hash = mix64(h);
  return info;
}

// `trust`: watcher_trusted() for this capture (see the code-watcher guard above).
const PyCodeInfo* intern_code(const Runtime& rt, const char* code, bool trust) {
  const uintptr_t key = reinterpret_cast<uintptr_t>(code);
  const size_t home = bucket_of(key);
  // Read before anything of the code object: see the ordering argument above.
  const uint64_t gen = trust ? g_destroyed[home].load(std::memory_order_acquire) : kUnwatched;
  size_t i = home;
  for (size_t probe = 0; probe < kMaxProbe; ++probe, i = (i + 1) & (kTableSize - 1)) {
    std::atomic<const PyCodeInfo*>& slot = g_table[i];
    const PyCodeInfo* cur = slot.load(std::memory_order_acquire);
    while (true) {
      if (cur && cur->code != key) break;  // another code object's slot: probe on
      if (cur) {
        if (trust && cur->watched_gen.load(std::memory_order_relaxed) == gen) return cur;
        if (guard_matches(rt, *cur, code)) {
          if (trust) cur->watched_gen.store(gen, std::memory_order_relaxed);
          return cur;
        }
      }
      // Empty slot, or a dead code object's entry at this address: publish a new entry.
      PyCodeInfo* fresh = make_info(rt, code);
      if (!fresh) return nullptr;
      fresh->watched_gen.store(gen, std::memory_order_relaxed);
      const PyCodeInfo* desired = fresh;
      if (slot.compare_exchange_strong(cur, desired, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
        return fresh;
      delete fresh;  // lost a race; `cur` now holds the winner: re-examine it
      g_interned.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  return nullptr;
}

}  // namespace

namespace pyframes_detail {

namespace {
uint32_t read_varint(const uint8_t* t, size_t len, size_t& p) {
  uint32_t value = 0;
  unsigned shift = 0;
  while (p < len) {
    const uint8_t b = t[p++];
    if (shift < 32) value |= static_cast<uint32_t>(b & 63) << shift;
    shift += 6;
    if (!(b & 64)) break;
  }
  return value;
}
int read_svarint(const uint8_t* t, size_t len, size_t& p) {
  const uint32_t u = read_varint(t, len, p);
  return (u & 1) ? -static_cast<int>(u >> 1) : static_cast<int>(u >> 1);
}
}  // namespace

// As PyCode_Addr2Line in 3.10 (Objects/codeobject.c: advance/_PyCode_CheckLineNumber):
// (start delta, line delta) byte pairs; line delta -128 = no line; empty ranges skipped.
int python_linetable_line_310(const uint8_t* table, size_t len, int firstlineno, int addr) {
  if (addr < 0) return firstlineno;
  int computed = firstlineno;
  int64_t end = 0;
  for (size_t i = 0; i + 1 < len; i += 2) {
    const int64_t start = end;
    end += table[i];
    const int ldelta = static_cast<int8_t>(table[i + 1]);
    int line = -1;
    if (ldelta != -128) {
      computed += ldelta;
      line = computed;
    }
    if (start != end && addr >= start && addr < end) return line;
  }
  return -1;
}

int python_linetable_line(const uint8_t* table, size_t len, int firstlineno, int addr) {
  if (addr < 0) return firstlineno;
  int line = firstlineno;
  int64_t end = 0;
  size_t i = 0;
  while (i < len) {
    const uint8_t head = table[i];
    if (!(head & 0x80)) {  // not an entry start: corrupt table, resynchronize
      ++i;
      continue;
    }
    const int code = (head >> 3) & 15;
    end += ((head & 7) + 1) * 2;  // entry covers (length + 1) code units of 2 bytes
    size_t p = i + 1;
    if (code == 14 || code == 13)  // long form / no columns: signed line delta first
      line += read_svarint(table, len, p);
    else if (code >= 10 && code <= 12)  // one-line forms: delta 0, 1, 2
      line += code - 10;
    if (addr < end) return code == 15 ? -1 : line;
    for (++i; i < len && !(table[i] & 0x80); ++i) {
    }
  }
  return -1;
}

}  // namespace pyframes_detail

bool python_frames_available() { return runtime().ok; }

void python_frames_bench_exact_guard(bool on) { g_exact_only.store(on, std::memory_order_relaxed); }

const char* python_frames_guard_status() { return g_watch_why.load(); }

void pyframes_detail::python_frames_allow_code_watcher(bool allow) {
  g_watch_allowed.store(allow, std::memory_order_relaxed);
}

const char* python_frames_status() { return runtime().status; }

namespace {

// 3.10: the chain of PyFrameObjects from PyThreadState.frame.
size_t capture_frame_objects(const Runtime& rt, const char* tstate, PyFrameRaw* out,
                             size_t max) {  // no code watchers on 3.10: the exact guard
  const PyLayout& L = rt.layout;
  const char* frame = load_ptr(tstate, L.ts_frame);
  size_t n = 0;
  for (size_t walked = 0; frame && n < max && walked < kMaxWalk; ++walked) {
    const char* code = load_ptr(frame, L.fr_code);
    if (code && load<uintptr_t>(code, L.ob_type) == rt.sym.code_type) {
      const int32_t lasti = load<int32_t>(frame, L.fr_lasti);
      out[n].code = intern_code(rt, code, false);
      out[n].addr = lasti >= 0 && lasti < (1 << 29) ? lasti * 2 : -1;
      out[n].reserved = 0;
      ++n;
    }
    frame = load_ptr(frame, L.fr_previous);
  }
  return n;
}

}  // namespace

namespace pyframes_detail {

size_t python_capture_from(const PyRuntimeView& rt, const void* tstate_v, PyFrameRaw* out,
                           size_t max) {
  const char* tstate = static_cast<const char*>(tstate_v);
  if (!rt.ok || max == 0 || !tstate) return 0;
  const PyLayout& L = rt.layout;
  if (L.ts_frame != kNoField) return capture_frame_objects(rt, tstate, out, max);
  const char* frame;
  if (L.ts_cframe != kNoField) {
    const char* cframe = load_ptr(tstate, L.ts_cframe);
    if (!cframe) return 0;
    frame = load_ptr(cframe, L.cframe_current);
  } else {
    frame = load_ptr(tstate, L.ts_current_frame);
  }
  const bool trust = watcher_trusted(rt, tstate);
  // 3.14's _PyStackRef keeps tag bits below the object's alignment.
  const uintptr_t exec_mask = L.executable_tagged ? ~uintptr_t{7} : ~uintptr_t{0};
  size_t n = 0;
  for (size_t walked = 0; frame && n < max && walked < kMaxWalk; ++walked) {
    const char* code =
        reinterpret_cast<const char*>(load<uintptr_t>(frame, L.fr_code) & exec_mask);
    const int owner = load<int8_t>(frame, L.fr_owner);
    const char* instr = load_ptr(frame, L.fr_instr);
    const char* previous = load_ptr(frame, L.fr_previous);
    // Shim frames of the C stack / interpreter entry (3.12+) and non-code executables (3.13+)
    // are not Python code.
    if (owner < kFirstShimOwner && code && load<uintptr_t>(code, L.ob_type) == rt.sym.code_type) {
      const int64_t units = load<int64_t>(code, L.co_size);
      // Free-threaded 3.14: a thread may run its own copy of the bytecode (tlbc_index > 0),
      // whose address we do not chase (another thread may be resizing that array): the
      // frame is reported without a line.
      const bool own_bytecode =
          L.fr_tlbc_index != kNoField && load<int32_t>(frame, L.fr_tlbc_index) != 0;
      const int64_t index =
          own_bytecode ? -1 : (instr - (code + L.co_code_adaptive)) / 2;
      // Like _PyFrame_IsIncomplete: a frame still setting up cells/generator before its first
      // RESUME is not yet visible to Python either.
      const bool incomplete = L.co_firsttraceable != kNoField && owner != kOwnedByGenerator &&
                              index < load<int32_t>(code, L.co_firsttraceable);
      if (!incomplete) {
        out[n].code = intern_code(rt, code, trust);
        out[n].addr = own_bytecode                    ? kAddrNoLine
                      : (index >= 0 && index < units) ? static_cast<int32_t>(index * 2)
                                                      : -1;
        out[n].reserved = 0;
        ++n;
      }
    }
    frame = previous;
  }
  return n;
}

}  // namespace pyframes_detail

size_t capture_python_frames(PyFrameRaw* out, size_t max) {
  const Runtime& rt = runtime();
  if (!rt.ok || max == 0 || !rt.sym.is_initialized()) return 0;
  const size_t n = pyframes_detail::python_capture_from(rt, rt.sym.this_thread_state(), out, max);
  if (n && g_watch_state.load(std::memory_order_relaxed) == kWatchIdle) request_code_watcher(rt);
  return n;
}

namespace {

// --- the thread stack cache ---------------------------------------------------------------
//
// A thread issues its NCCL calls from few Python stacks. The walk below reads only the thread's
// own frames (executable, instruction pointer, owner): no code object, no intern table. Those
// words, equal to the ones of a stack proven right (by the interning walk above, under the code
// watcher) while no code object died in the address buckets of its frames since (each frame's
// g_destroyed bucket count unchanged since before the walk), name the same code objects at the
// same instructions: a code object at the same address is the same live object (its death
// would have moved its bucket's count before the address could be reused), and the
// shim/incomplete decisions and the instruction offsets are functions of those words. So the
// proven frames are returned as they are. Code objects dying elsewhere (exec'd or generated
// code) leave the stacks that do not share their buckets cached. Only under the code watcher
// (watcher_trusted); otherwise, and for stacks deeper than kCachedWalk, every capture takes the
// interning walk.
constexpr size_t kCachedWalk = 96;   // frames walked (shims included) for a cacheable stack
constexpr size_t kCachedFrames = 64;  // Python frames kept per cached stack
constexpr size_t kCacheWays = 4;     // per thread, 4-way set associative by the words' hash
constexpr size_t kCacheSets = 16;

struct PyStackEntry {
  uint64_t key = 0;
  const char* tstate = nullptr;
  uint64_t id = 0;     // process-unique, never 0; a replaced entry gets a new one
  uint64_t used = 0;   // the cache's use counter at its last hit (least recently used goes)
  uint32_t nwords = 0;
  uint32_t n = 0;
  uintptr_t words[3 * kCachedWalk];
  uint64_t gens[kCachedWalk];  // each frame's g_destroyed bucket count, read before the walk
  uint64_t deaths = 0;         // g_destroyed_total, read before the walk (or a later proof)
  PyFrameRaw frames[kCachedFrames];
};
struct PyStackCache {
  PyStackEntry* slot[kCacheSets * kCacheWays] = {};
  uint64_t uses = 0;
};
std::atomic<uint64_t> g_stack_ids{0};
pthread_key_t g_cache_key;
pthread_once_t g_cache_once = PTHREAD_ONCE_INIT;
__attribute__((tls_model("initial-exec"))) thread_local PyStackCache* t_cache = nullptr;

PyStackCache* thread_cache() {
  if (t_cache) return t_cache;
  pthread_once(&g_cache_once, [] {
    pthread_key_create(&g_cache_key, [](void* p) {
      auto* c = static_cast<PyStackCache*>(p);
      for (PyStackEntry* e : c->slot) delete e;
      delete c;
    });
  });
  t_cache = new (std::nothrow) PyStackCache;
  if (t_cache) pthread_setspecific(g_cache_key, t_cache);
  return t_cache;
}

// The frame words of the calling thread (3.11+ layouts); false when not cacheable.
bool stack_words(const Runtime& rt, const char* tstate, uintptr_t* words, uint32_t& nwords) {
  const PyLayout& L = rt.layout;
  if (L.ts_frame != kNoField) return false;  // 3.10: frame objects, no code watcher
  const char* frame;
  if (L.ts_cframe != kNoField) {
    const char* cframe = load_ptr(tstate, L.ts_cframe);
    if (!cframe) return false;
    frame = load_ptr(cframe, L.cframe_current);
  } else {
    frame = load_ptr(tstate, L.ts_current_frame);
  }
  size_t k = 0;
  for (; frame; ++k) {
    if (k == kCachedWalk) return false;
    words[3 * k] = load<uintptr_t>(frame, L.fr_code);
    words[3 * k + 1] = reinterpret_cast<uintptr_t>(load_ptr(frame, L.fr_instr));
    words[3 * k + 2] = static_cast<uintptr_t>(static_cast<uint8_t>(load<int8_t>(frame, L.fr_owner)));
    frame = load_ptr(frame, L.fr_previous);
  }
  nwords = static_cast<uint32_t>(3 * k);
  return true;
}

}  // namespace

size_t capture_python_frames_cached(PyFrameRaw* out, size_t max, uint64_t* stack_id) {
  *stack_id = 0;
  const Runtime& rt = runtime();
  if (!rt.ok || max == 0 || !rt.sym.is_initialized()) return 0;
  const char* tstate = static_cast<const char*>(rt.sym.this_thread_state());
  if (!tstate) return 0;
  uintptr_t words[3 * kCachedWalk];
  uint32_t nwords = 0;
  PyStackCache* cache = nullptr;
  uint64_t key = 0;
  PyStackEntry** set = nullptr;
  if (watcher_trusted(rt, tstate) && stack_words(rt, tstate, words, nwords) &&
      (cache = thread_cache())) {
    key = XXH3_64bits(words, nwords * sizeof(uintptr_t));
    set = &cache->slot[(key % kCacheSets) * kCacheWays];
    for (size_t w = 0; w < kCacheWays; ++w) {
      PyStackEntry* e = set[w];
      if (!e || e->key != key || e->tstate != tstate || e->nwords != nwords || e->n > max ||
          std::memcmp(e->words, words, nwords * sizeof(uintptr_t)) != 0)
        continue;
      const uint64_t deaths = g_destroyed_total.load(std::memory_order_acquire);
      if (deaths != e->deaths) {
        // Code died somewhere since: in none of this stack's frames' buckets, and the entry
        // is proven up to `deaths` (read before these bucket reads).
        size_t k = 0;
        for (; k < nwords / 3; ++k)
          if (g_destroyed[bucket_of(words[3 * k])].load(std::memory_order_acquire) != e->gens[k]) break;
        if (k < nwords / 3) break;  // a code object died in a frame's bucket: prove again
        e->deaths = deaths;
      }
      std::memcpy(out, e->frames, e->n * sizeof(PyFrameRaw));
      e->used = ++cache->uses;
      *stack_id = e->id;
      return e->n;
    }
  }
  // Prove the frames by the interning walk (guards per code object), and remember them with the
  // frames' bucket counts read before it.
  uint64_t gens[kCachedWalk];
  const uint64_t deaths = g_destroyed_total.load(std::memory_order_acquire);
  if (set)
    for (size_t k = 0; k < nwords / 3; ++k)
      gens[k] = g_destroyed[bucket_of(words[3 * k])].load(std::memory_order_acquire);
  const size_t n = pyframes_detail::python_capture_from(rt, tstate, out, max);
  if (n && g_watch_state.load(std::memory_order_relaxed) == kWatchIdle) request_code_watcher(rt);
  if (!set || n > kCachedFrames) return n;
  for (size_t i = 0; i < n; ++i)
    if (!out[i].code) return n;  // intern table full: not proven
  // The way of this key, else an empty one, else the least recently used.
  size_t victim = 0;
  for (size_t w = 0; w < kCacheWays; ++w) {
    if (set[w] && set[w]->key == key) {
      victim = w;
      break;
    }
    if (!set[w] || (set[victim] && set[w]->used < set[victim]->used)) victim = w;
  }
  PyStackEntry*& slot = set[victim];
  if (!slot) slot = new (std::nothrow) PyStackEntry;
  if (!slot) return n;
  PyStackEntry& e = *slot;
  e.key = key;
  e.tstate = tstate;
  e.id = g_stack_ids.fetch_add(1, std::memory_order_relaxed) + 1;
  e.used = ++cache->uses;
  e.nwords = nwords;
  e.n = static_cast<uint32_t>(n);
  std::memcpy(e.words, words, nwords * sizeof(uintptr_t));
  std::memcpy(e.gens, gens, nwords / 3 * sizeof(uint64_t));
  e.deaths = deaths;
  std::memcpy(e.frames, out, n * sizeof(PyFrameRaw));
  *stack_id = e.id;
  return n;
}

uint64_t python_frames_hash(const PyFrameRaw* frames, size_t n, uint64_t seed) {
  uint64_t h = mix64(seed ^ 0x5079746850796874ull);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t code_hash = frames[i].code ? frames[i].code->hash : 0;
    h = mix64(h ^ code_hash);
    h = mix64(h ^ static_cast<uint32_t>(frames[i].addr));
  }
  return h;
}

PyFrameInfo resolve_python_frame(const PyFrameRaw& frame) {
  PyFrameInfo fi;
  if (!frame.code) {
    fi.file = "<unknown>";
    fi.function = "<unknown>";
    return fi;
  }
  const PyCodeInfo& c = *frame.code;
  fi.file = c.file;
  fi.function = c.function;
  if (frame.addr == pyframes_detail::kAddrNoLine) return fi;
  const int line =
      c.linetable_format == pyframes_detail::LineTable::kPep626
          ? pyframes_detail::python_linetable_line_310(c.linetable.data(), c.linetable.size(),
                                                       c.firstlineno, frame.addr)
          : pyframes_detail::python_linetable_line(c.linetable.data(), c.linetable.size(),
                                                   c.firstlineno, frame.addr);
  fi.line = line > 0 ? line : 0;
  return fi;
}

}  // namespace lockstep
