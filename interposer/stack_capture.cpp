#include "stack_capture.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <new>

#include <cstdlib>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bench_knobs.h"
#include "config.h"
#include "log.h"
#include "python_frames.h"
#include "symbol_lookup.h"

namespace lockstep::rec {
namespace {

using UnwBacktrace = int (*)(void**, int);
UnwBacktrace g_unw = nullptr;

int glibc_backtrace(void** buf, int n) { return backtrace(buf, n); }

}  // namespace

StackMode stacks_init() {
  // RTLD_LOCAL, never DT_NEEDED: libunwind.so.8 exports the C++ exception ABI and a weak
  // backtrace(); in the global scope they would take over the application's (DESIGN.md).
  if (void* h = dlopen("libunwind.so.8", RTLD_LOCAL | RTLD_NOW)) {
    g_unw = reinterpret_cast<UnwBacktrace>(dlsym(h, "unw_backtrace"));
    // libunwind's default global cache takes a process-wide lock in every unw_step: a fork while
    // another thread unwinds leaves it locked in the child, whose first stack then hangs. A
    // per-thread cache takes no lock (UNW_CACHE_PER_THREAD = 2 in libunwind-common.h).
    using SetCachingPolicy = int (*)(void* addr_space, int policy);
    auto set_policy = reinterpret_cast<SetCachingPolicy>(dlsym(h, "_ULx86_64_set_caching_policy"));
    auto* local_as = static_cast<void**>(dlsym(h, "_ULx86_64_local_addr_space"));
    if (set_policy && local_as && *local_as) set_policy(*local_as, 2);
  }
  if (!g_unw) {
    // glibc's backtrace() loads libgcc_s on first use; do it now, not on the hot path.
    void* warm[4];
    backtrace(warm, 4);
  }

  const StacksSetting setting = config().stacks;  // bad values: warned there, default here
  bool has_python = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState") != nullptr;
  StackMode want = has_python ? StackMode::Python : StackMode::Native;
  if (setting == StacksSetting::None) want = StackMode::None;
  else if (setting == StacksSetting::Native) want = StackMode::Native;
  else if (setting == StacksSetting::Python) want = StackMode::Python;
  if (want == StackMode::Python && !lockstep::python_frames_available()) {
    if (setting == StacksSetting::Python)
      warn("%s=python but %s; recording native stacks only", lockstep::schema::env::kStacks,
           lockstep::python_frames_status());
    want = StackMode::Native;
  }
  return want;
}

const char* unwinder_name() { return g_unw ? "libunwind" : "glibc-backtrace"; }

__attribute__((tls_model("initial-exec"))) thread_local HookSite t_hook_site;

// ---- memoized native frames -----------------------------------------------------------------
//
// Unwinding costs ~1.2 us a stack under PyTorch; the native path from a given Python call site
// (or a given C++ caller) to NCCL rarely changes. An entry is keyed by the Python stack id
// (python_frames.h: equal ids, equal frames; 0 without Python frames), the hook's caller
// return address, the hook's frame address (the caller's stack depth) and the frames asked for.
// When it was made, each kept return address was located in the thread's stack, at an offset
// from the hook's frame (the first occurrence above the previous one). A capture with the same
// key re-reads those stack words: all equal, the memoized frames are used; any different, the
// stack is unwound (and the entry remade). A return address that could not be located makes
// the entry unverifiable: its stacks are always unwound. On top, hits are re-unwound by
// sampling (hit 1, 2, 4, ... then every kSampleEvery): a sample that disagrees marks the entry
// so that its stacks are always unwound from then on, and counts (meta native_stack_memo).
namespace {
constexpr unsigned kMemoSlots = 256;         // per thread: 64 sets of kMemoWays
constexpr unsigned kMemoWays = 4;
constexpr uint32_t kSampleEvery = 1024;
constexpr uintptr_t kMaxScanBytes = 64 * 1024;  // how far above the hook a return address is sought

std::atomic<uint64_t> g_unwound{0}, g_sampled{0}, g_disagreed{0}, g_unverifiable{0};

struct MemoEntry {
  uint64_t py_id = 0;
  uintptr_t ra = 0, frame = 0;
  int want = 0;
  int n = 0;
  bool always_unwind = false;
  uint32_t hits = 0, next_sample = 1;
  uint64_t last_use = 0;
  uint64_t hash = 0;
  uintptr_t pcs[kMaxNativeFrames];
  uint32_t slot[kMaxNativeFrames];  // byte offset above `frame` of pcs[i]'s stack word
};
}  // namespace

struct NativeMemo {
  uintptr_t stack_lo = 0, stack_hi = 0;  // the thread's stack (pthread_getattr_np), 0: unknown
  uint64_t uses = 0;
  MemoEntry* slots[kMemoSlots] = {};
  ~NativeMemo() {
    for (MemoEntry* e : slots) delete e;
  }
};

StackBuf::~StackBuf() { delete memo; }

NativeMemoStats native_memo_stats() {
  return {g_unwound.load(), g_sampled.load(), g_disagreed.load(), g_unverifiable.load()};
}

namespace {

NativeMemo* thread_memo(StackBuf& buf) {
  if (buf.memo) return buf.memo;
  auto* m = new (std::nothrow) NativeMemo;
  if (!m) return nullptr;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr) {
      m->stack_lo = reinterpret_cast<uintptr_t>(addr);
      m->stack_hi = m->stack_lo + size;
    }
    pthread_attr_destroy(&attr);
  }
  buf.memo = m;
  return m;
}

inline uintptr_t stack_word(uintptr_t addr) { return *reinterpret_cast<const uintptr_t*>(addr); }

// The innermost `want` frames below liblockstep's own; returns how many unwound.
int unwind(StackBuf& buf, int want) {
  void* raw[kMaxNativeFrames + kOwnFrames];
  int n = g_unw ? g_unw(raw, want + kOwnFrames) : glibc_backtrace(raw, want + kOwnFrames);
  int skip = 0;
  while (skip < n && in_own_module(raw[skip])) skip++;
  buf.n = 0;
  for (int i = skip; i < n && buf.n < want; i++)
    buf.pcs[buf.n++] = reinterpret_cast<uintptr_t>(raw[i]);
  return n;
}

// Locates buf's return addresses in the stack above `frame`, innermost first, each above the
// previous; false if one is not found within the thread's stack.
bool locate(const NativeMemo& m, uintptr_t frame, const StackBuf& buf, uint32_t* slot) {
  uintptr_t hi = std::min(m.stack_hi, frame + kMaxScanBytes);
  uintptr_t at = frame;
  for (int i = 0; i < buf.n; i++) {
    while (at + sizeof(uintptr_t) <= hi && stack_word(at) != buf.pcs[i]) at += sizeof(uintptr_t);
    if (at + sizeof(uintptr_t) > hi) return false;
    slot[i] = static_cast<uint32_t>(at - frame);
    at += sizeof(uintptr_t);
  }
  return true;
}

uint64_t stack_hash(const StackBuf& buf) {
  uint64_t h = XXH3_64bits(buf.pcs, sizeof(uintptr_t) * buf.n);
  if (buf.npy > 0) h = lockstep::python_frames_hash(buf.py, size_t(buf.npy), h);
  return h ? h : 1;
}

}  // namespace

uint64_t capture_stack(StackMode mode, StackBuf& buf, unsigned off) {
  const HookSite site = t_hook_site;
  t_hook_site = HookSite{};
  buf.n = 0;
  buf.npy = 0;
  if (mode == StackMode::None) return 0;
  const bool profile = off & kProfile;
  uint64_t t0 = profile ? bench_ticks() : 0;
  const bool python = mode == StackMode::Python && !(off & kOffPython);
  uint64_t py_id = 0;
  if (python) {
    // The Python stack's identity for the memo: the thread stack cache's id of a proven stack
    // (python_frames.h: frame words equal, no code object died in their buckets since), else
    // (not cacheable, or "pycache" off) the content hash of the frames the interning walk read
    // (code objects' file, qualname, first line and instruction offsets). The cache is the
    // default since it became 4-way and per-bucket (docs/performance.md): on the H200 the
    // direct-mapped, process-wide-epoch form cost more than the walk in one run, less in another.
    if (!(off & kOffPyCache))
      buf.npy = int(lockstep::capture_python_frames_cached(buf.py, kMaxPythonFrames, &py_id));
    else
      buf.npy = int(lockstep::capture_python_frames(buf.py, kMaxPythonFrames));
    if (buf.npy > 0 && py_id == 0) py_id = lockstep::python_frames_hash(buf.py, size_t(buf.npy), 0) | 1;
    if (profile) {
      uint64_t t1 = bench_ticks();
      bench_count(kCntPythonTicks, t1 - t0);
      bench_count(kCntPythonFrames, uint64_t(buf.npy));
      t0 = t1;
    }
  }
  if (python && (off & kOffUnwind)) return stack_hash(buf);
  // Below Python frames the native stack is the interpreter's: only the innermost frames
  // (the C/C++ path from the Python call to NCCL) say more than the Python frames do.
  const int want = python && buf.npy > 0 && !(off & kOffUnwindCap) ? kNativeFramesUnderPython
                                                                    : kMaxNativeFrames;
  // Memo: only for a capture from an op hook, and with Python frames only for a proven stack.
  NativeMemo* m = nullptr;
  MemoEntry* e = nullptr;
  if (site.ra && !(off & kOffStackMemo) && (buf.npy == 0 || py_id != 0) && (m = thread_memo(buf)) &&
      site.frame >= m->stack_lo && site.frame < m->stack_hi) {
    // 4-way set associative: the entry of this key, else an empty way, else the least recently
    // used one (direct mapping thrashed between a thread's few hot stacks).
    uint64_t key = XXH3_64bits_withSeed(&site, sizeof site, py_id ^ uint64_t(want));
    MemoEntry** set = &m->slots[(key % (kMemoSlots / kMemoWays)) * kMemoWays];
    MemoEntry** pick = nullptr;
    for (unsigned w = 0; w < kMemoWays && !pick; w++)
      if (set[w] && set[w]->py_id == py_id && set[w]->ra == site.ra && set[w]->frame == site.frame &&
          set[w]->want == want)
        pick = &set[w];
    for (unsigned w = 0; w < kMemoWays && !pick; w++)
      if (!set[w]) pick = &set[w];
    if (!pick) {
      pick = &set[0];
      for (unsigned w = 1; w < kMemoWays; w++)
        if (set[w]->last_use < (*pick)->last_use) pick = &set[w];
    }
    if (!*pick) *pick = new (std::nothrow) MemoEntry;
    e = *pick;
    if (e) e->last_use = ++m->uses;
  }
  bool sample = false;
  if (e && e->py_id == py_id && e->ra == site.ra && e->frame == site.frame && e->want == want &&
      e->n > 0 && !e->always_unwind) {
    bool same = true;
    for (int i = 0; i < e->n && same; i++) same = stack_word(site.frame + e->slot[i]) == e->pcs[i];
    if (same) {
      if (++e->hits != e->next_sample) {
        buf.n = e->n;
        std::memcpy(buf.pcs, e->pcs, sizeof(uintptr_t) * e->n);
        if (profile) bench_count(kCntUnwindTicks, bench_ticks() - t0);
        return e->hash;
      }
      sample = true;
      e->next_sample = e->next_sample < kSampleEvery ? e->next_sample * 2 : e->next_sample + kSampleEvery;
    }
  }
  const int n = unwind(buf, want);
  g_unwound.fetch_add(1, std::memory_order_relaxed);
  if (profile) {
    bench_count(kCntUnwindTicks, bench_ticks() - t0);
    bench_count(kCntUnwindFrames, uint64_t(n));
    bench_count(kCntUnwinds, 1);
  }
  const uint64_t h = stack_hash(buf);
  if (sample) {
    g_sampled.fetch_add(1, std::memory_order_relaxed);
    if (e->n != buf.n || std::memcmp(e->pcs, buf.pcs, sizeof(uintptr_t) * buf.n) != 0 ||
        e->hash != h) {
      e->always_unwind = true;  // the key did not decide the stack here: never trust it again
      g_disagreed.fetch_add(1, std::memory_order_relaxed);
    }
    return h;
  }
  if (e && !(e->always_unwind && e->py_id == py_id && e->ra == site.ra && e->frame == site.frame &&
             e->want == want)) {
    e->py_id = py_id;
    e->ra = site.ra;
    e->frame = site.frame;
    e->want = want;
    e->hits = 0;
    e->next_sample = 1;
    e->hash = h;
    e->n = buf.n;
    std::memcpy(e->pcs, buf.pcs, sizeof(uintptr_t) * buf.n);
    e->always_unwind = buf.n == 0 || !locate(*m, site.frame, buf, e->slot);
    if (e->always_unwind) g_unverifiable.fetch_add(1, std::memory_order_relaxed);
  }
  return h;
}

}  // namespace lockstep::rec
