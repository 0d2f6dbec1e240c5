#include "ptrace_stacks.h"
#include "elf_symbols.h"

#include <cxxabi.h>
#include <elf.h>
#include <libunwind-ptrace.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <memory>

#include "procfs.h"

namespace lockstep::attach {
namespace {

constexpr int kMaxNativeFrames = 128;
constexpr int kMaxSeized = 1 << 14;

// Threads seized now, for the signal handler (async-signal-safe: atomics and syscalls only).
std::atomic<int> g_seized[kMaxSeized];
std::atomic<int> g_nseized{0};

void detach_all_now() {
  const int n = std::min(g_nseized.load(), kMaxSeized);
  for (int i = 0; i < n; ++i)
    if (int tid = g_seized[i].load(); tid > 0) ::ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
}

void on_termination(int sig) {
  detach_all_now();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

// libunwind's ptrace accessors read the target one word per PTRACE_PEEKDATA. Ours read whole
// pages with process_vm_readv and keep them while the process is stopped (the stacks cannot
// change then), and refuse writes: nothing is ever written into the target.
struct PageCache {
  int pid = 0;
  std::map<unw_word_t, std::vector<uint8_t>> pages;  // page address -> bytes (empty: unreadable)
};
PageCache* g_cache = nullptr;  // the process being unwound (one at a time)
unw_accessors_t g_accessors;

int cached_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t* val, int write, void* arg) {
  if (write) return -UNW_EINVAL;
  if (!g_cache) return _UPT_access_mem(as, addr, val, write, arg);
  constexpr unw_word_t kPage = 4096;
  uint8_t bytes[sizeof(unw_word_t)];
  for (size_t i = 0; i < sizeof bytes;) {
    const unw_word_t a = addr + i, page = a & ~(kPage - 1);
    auto it = g_cache->pages.find(page);
    if (it == g_cache->pages.end()) {
      std::vector<uint8_t> buf(kPage);
      iovec local{buf.data(), kPage}, remote{reinterpret_cast<void*>(page), kPage};
      if (::process_vm_readv(g_cache->pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(kPage)) buf.clear();
      it = g_cache->pages.emplace(page, std::move(buf)).first;
    }
    if (it->second.empty()) return -UNW_EINVAL;
    const size_t off = a - page, n = std::min(sizeof bytes - i, static_cast<size_t>(kPage - off));
    std::memcpy(bytes + i, it->second.data() + off, n);
    i += n;
  }
  std::memcpy(val, bytes, sizeof bytes);
  return 0;
}

// libunwind's own lookup (_UPT_find_proc_info) keeps one ELF image per thread's accessor state:
// every change of module on every thread's stack parses /proc/PID/maps and opens and maps the
// file again, all while the process is stopped. The lookup tables (.eh_frame_hdr) are in the
// process's read-only memory, so they are located once, before the stop; the stop only searches
// them (libunwind's table search, through the page cache above).
extern "C" int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t, unw_word_t, unw_dyn_info_t*, unw_proc_info_t*,
                                                 int, void*);

constexpr uint8_t DW_EH_PE_udata4 = 0x03, DW_EH_PE_udata8 = 0x04, DW_EH_PE_sdata4 = 0x0b, DW_EH_PE_sdata8 = 0x0c,
                  DW_EH_PE_datarel = 0x30;

struct UnwindTable {
  unw_dyn_info_t di{};  // UNW_INFO_FORMAT_REMOTE_TABLE over [di.start_ip, di.end_ip)
};
const std::vector<UnwindTable>* g_tables = nullptr;  // sorted by start_ip, disjoint

bool read_remote(int pid, uint64_t addr, void* out, size_t n) {
  iovec local{out, n}, remote{reinterpret_cast<void*>(addr), n};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

// The .eh_frame_hdr table of the ELF object mapped at `at` (its ELF and program headers there):
// {eh_frame_hdr address, table address, entries}, or entries 0 when it has none (or an encoding
// other than the linkers' datarel|sdata4): libunwind's own lookup serves those.
struct HdrTable {
  uint64_t hdr = 0, table = 0, entries = 0;
};
HdrTable eh_frame_hdr_table(int pid, uint64_t at) {
  Elf64_Ehdr eh;
  if (!read_remote(pid, at, &eh, sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 256)
    return {};
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!read_remote(pid, at + eh.e_phoff, ph.data(), ph.size() * sizeof(Elf64_Phdr))) return {};
  const Elf64_Phdr* first_load = nullptr;
  const Elf64_Phdr* hdr = nullptr;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type == PT_LOAD && !first_load) first_load = &p;
    if (p.p_type == PT_GNU_EH_FRAME) hdr = &p;
  }
  if (!first_load || !hdr || first_load->p_offset != 0) return {};
  const uint64_t hdr_at = at - first_load->p_vaddr + hdr->p_vaddr;  // offset 0 is mapped at `at`
  uint8_t h[4 + 8 + 4];  // version, eh_frame_ptr_enc, fde_count_enc, table_enc, eh_frame_ptr, fde_count
  if (!read_remote(pid, hdr_at, h, sizeof h)) return {};
  const unsigned ptr_size = (h[1] & 0x0f) == DW_EH_PE_udata4 || (h[1] & 0x0f) == DW_EH_PE_sdata4   ? 4
                            : (h[1] & 0x0f) == DW_EH_PE_udata8 || (h[1] & 0x0f) == DW_EH_PE_sdata8 ? 8
                                                                                                   : 0;
  if (h[0] != 1 || ptr_size == 0 || h[2] != DW_EH_PE_udata4 || h[3] != (DW_EH_PE_datarel | DW_EH_PE_sdata4)) return {};
  uint32_t fde_count = 0;
  std::memcpy(&fde_count, h + 4 + ptr_size, 4);
  return {hdr_at, hdr_at + 4 + ptr_size + 4, fde_count};
}

// The search table of every executable mapping of an ELF file, from the process's memory. An
// executable mapping belongs to the last offset-0 mapping of its file before it (a library
// loaded twice has two).
std::vector<UnwindTable> unwind_tables(int pid) {
  std::vector<UnwindTable> out;
  std::map<std::string, uint64_t> base;  // path -> its latest offset-0 mapping
  std::map<uint64_t, HdrTable> tables;   // base -> its table
  for (const Mapping& m : mappings_of(pid)) {
    if (m.path.empty() || m.path[0] != '/') continue;
    if (m.offset == 0) base[m.path] = m.start;
    auto b = base.find(m.path);
    if (!m.exec || b == base.end()) continue;
    auto t = tables.find(b->second);
    if (t == tables.end()) t = tables.emplace(b->second, eh_frame_hdr_table(pid, b->second)).first;
    if (t->second.entries == 0) continue;
    UnwindTable u;
    u.di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
    u.di.start_ip = m.start;
    u.di.end_ip = m.end;
    u.di.u.rti.segbase = t->second.hdr;
    u.di.u.rti.table_data = t->second.table;
    u.di.u.rti.table_len = t->second.entries * 8 / sizeof(unw_word_t);  // entries of two int32
    out.push_back(u);
  }
  std::sort(out.begin(), out.end(), [](const UnwindTable& a, const UnwindTable& b) { return a.di.start_ip < b.di.start_ip; });
  return out;
}

int table_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t* pi, int need_unwind_info, void* arg) {
  if (g_tables) {
    auto it = std::upper_bound(g_tables->begin(), g_tables->end(), ip,
                               [](unw_word_t v, const UnwindTable& t) { return v < t.di.start_ip; });
    if (it != g_tables->begin() && ip < std::prev(it)->di.end_ip) {
      unw_dyn_info_t di = std::prev(it)->di;
      return UNW_OBJ(dwarf_search_unwind_table)(as, ip, &di, pi, need_unwind_info, arg);
    }
  }
  return _UPT_find_proc_info(as, ip, pi, need_unwind_info, arg);
}

struct Seized {
  int tid = 0;
  bool stopped = false;
  int signal = 0;  // a signal-delivery-stop's signal: given back at detach, never swallowed
  ThreadSnapshot* out = nullptr;
};

// One look at tid's stop after PTRACE_INTERRUPT: 1 stopped, 0 not yet, -1 exited (or gone).
int poll_stop(Seized& s) {
  int status = 0;
  const pid_t r = ::waitpid(s.tid, &status, __WALL | WNOHANG);
  if (r == s.tid) {
    if (WIFEXITED(status) || WIFSIGNALED(status)) return -1;
    if (WIFSTOPPED(status)) {
      // PTRACE_EVENT_STOP: our interrupt (or a group-stop). Otherwise a signal was pending and
      // this is its signal-delivery-stop: the thread is stopped all the same, and the signal
      // goes back to it with PTRACE_DETACH.
      if ((status >> 16) != PTRACE_EVENT_STOP) s.signal = WSTOPSIG(status);
      return 1;
    }
    return 0;
  }
  return r < 0 && errno != EINTR ? -1 : 0;
}

// How long the seized threads of a process may take to stop, all of them together: a thread that
// cannot (uninterruptible sleep: a file system, a driver call, vfork) keeps the others stopped
// this long at most, not a timeout of its own each. docs/attach.md states the bound.
constexpr auto kStopDeadline = std::chrono::milliseconds(200);

// Waits for every seized thread's stop, polling them all in turn until kStopDeadline.
void wait_all_stopped(std::vector<Seized>& seized) {
  std::vector<Seized*> pending;
  for (Seized& s : seized) pending.push_back(&s);
  const auto deadline = std::chrono::steady_clock::now() + kStopDeadline;
  while (!pending.empty()) {
    std::erase_if(pending, [](Seized* s) {
      const int r = poll_stop(*s);
      if (r != 0) s->stopped = r > 0;
      if (r < 0 && s->out->native_error.empty()) s->out->native_error = "the thread exited";
      return r != 0;
    });
    if (pending.empty() || std::chrono::steady_clock::now() >= deadline) break;
    ::usleep(20);
  }
  for (Seized* s : pending)
    if (s->out->native_error.empty())
      s->out->native_error = "did not stop within " + std::to_string(kStopDeadline.count()) +
                             " ms (uninterruptible sleep?): its stack is not read";
}

// Threads seized that had not stopped when their process was let go (a vfork, a driver call,
// uninterruptible sleep): PTRACE_DETACH needs a stopped tracee, so they stay seized, and our
// interrupt stops them when their system call returns. They are detached as soon as that
// stop is seen (release_late_threads), and the kernel detaches whatever is left when lockstep
// exits. Their tids stay in g_seized[0..g_nseized) for the signal handlers.
std::vector<Seized> g_late;

void keep_late_in_handler_list() {
  g_nseized.store(0);
  int n = 0;
  for (const Seized& s : g_late)
    if (n < kMaxSeized) g_seized[n++].store(s.tid);
  g_nseized.store(n);
}

// The thread's pthread_t (x86-64: its fs base), by which Python thread states are matched to it
// (3.10 records no native id): one register read, done even for a thread left unwound.
void read_thread_pointer(Seized& s) {
#if defined(__x86_64__)
  user_regs_struct regs{};
  if (::ptrace(PTRACE_GETREGS, s.tid, nullptr, &regs) == 0) s.out->pthread_self = regs.fs_base;
#else
  (void)s;
#endif
}

void unwind(unw_addr_space_t as, Seized& s) {
  void* upt = _UPT_create(s.tid);
  if (!upt) {
    s.out->native_error = "libunwind: _UPT_create failed";
    return;
  }
  unw_cursor_t c;
  int rc = unw_init_remote(&c, as, upt);
  if (rc < 0) {
    s.out->native_error = std::string("libunwind: unw_init_remote: ") + unw_strerror(rc);
  } else {
    for (int i = 0; i < kMaxNativeFrames; ++i) {
      unw_word_t ip = 0;
      if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0) break;
      NativeFrame f;
      f.ip = ip;
      s.out->native.push_back(f);
      rc = unw_step(&c);
      if (rc < 0) {
        s.out->native_error = std::string("libunwind: unw_step: ") + unw_strerror(rc);
        break;
      }
      if (rc == 0) break;
    }
  }
  _UPT_destroy(upt);
}

// After the resume: function names from the ELF symbol tables of the mapped files (libunwind
// reads them from the files, not from the process), module + offset from /proc/PID/maps.
void symbolize(int pid, unw_addr_space_t as, std::vector<ThreadSnapshot>& threads) {
  const std::vector<Mapping> maps = mappings_of(pid);
  void* upt = _UPT_create(pid);
  struct Name {
    std::string raw, shown;
    uint64_t offset = 0;
  };
  std::map<uint64_t, Name> cache;
  std::map<std::string, std::set<std::string>> raw_names;  // per module: the symbols named
  std::vector<std::pair<NativeFrame*, const Name*>> named;
  for (ThreadSnapshot& t : threads) {
    for (size_t i = 0; i < t.native.size(); ++i) {
      NativeFrame& f = t.native[i];
      // Return addresses point after the call: look up the call instruction.
      const uint64_t pc = i == 0 ? f.ip : f.ip - 1;
      for (const Mapping& m : maps)
        if (pc >= m.start && pc < m.end) {
          f.module = m.path;
          f.module_offset = pc - m.start + m.offset;
          break;
        }
      auto it = cache.find(pc);
      if (it == cache.end()) {
        char name[1024];
        unw_word_t off = 0;
        Name v;
        if (upt && cache.size() < 65536 && _UPT_get_proc_name(as, pc, name, sizeof name, &off, upt) == 0)
          v = {name, demangle(name), off};
        it = cache.emplace(pc, v).first;
      }
      f.function = it->second.shown;
      f.function_offset = it->second.offset;
      if (!f.function.empty() && !f.module.empty()) {
        raw_names[f.module].insert(it->second.raw);
        named.emplace_back(&f, &it->second);
      }
    }
  }
  if (upt) _UPT_destroy(upt);
  // The nearest symbol below an address in a stripped library is often an unrelated exported one
  // (libc's __nptl_death_event for its internal futex wait): past the symbol's size the name is
  // wrong, so the frame keeps its module and offset only. A size the tables do not give: kept.
  const std::string root = "/proc/" + std::to_string(pid) + "/root";
  std::map<std::string, ElfSymbols> tables;
  for (const auto& [module, names] : raw_names) {
    const std::vector<std::string> wanted(names.begin(), names.end());
    ElfSymbols es = read_elf_symbols(root + module, wanted);
    if (!es.error.empty()) es = read_elf_symbols(module, wanted);
    tables.emplace(module, std::move(es));
  }
  for (auto& [f, name] : named) {
    const ElfSymbols& es = tables[f->module];
    auto size = es.sizes.find(name->raw);
    if (size != es.sizes.end() && size->second > 0 && name->offset >= size->second) {
      f->function.clear();
      f->function_offset = 0;
    }
  }
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

void install_detach_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_termination;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

NativeCapture capture_native_stacks(
    int pid, std::vector<ThreadSnapshot>& threads,
    const std::function<void(std::chrono::steady_clock::time_point deadline)>& while_stopped,
    std::chrono::milliseconds read_budget) {
  NativeCapture result;
  threads.clear();
  const std::string proc = "/proc/" + std::to_string(pid);
  for (int tid : thread_ids(pid)) {
    ThreadSnapshot t;
    t.tid = tid;
    const std::string task = proc + "/task/" + std::to_string(tid);
    t.name = trim(read_small_file(task + "/comm", 256).value_or(""));
    t.wchan = trim(read_small_file(task + "/wchan", 256).value_or(""));
    if (t.wchan == "0") t.wchan.clear();
    t.state = thread_state(pid, tid);
    threads.push_back(std::move(t));
  }
  if (threads.empty()) {
    result.error = "no threads listed in " + proc + "/task (the process exited?)";
    return result;
  }
  const std::vector<UnwindTable> tables = unwind_tables(pid);
  // Ctrl-Z (or a background job's terminal read or write) while the threads are stopped would
  // stop lockstep with them held: the stop is deferred until they are let go.
  sigset_t job_control, old_mask;
  sigemptyset(&job_control);
  for (int sig : {SIGTSTP, SIGTTIN, SIGTTOU}) sigaddset(&job_control, sig);
  ::sigprocmask(SIG_BLOCK, &job_control, &old_mask);
  std::vector<Seized> seized;
  seized.reserve(threads.size());
  g_nseized.store(0);
  // Seize first (no stop yet), then interrupt them all together: the stop window starts at the
  // first interrupt.
  for (ThreadSnapshot& t : threads) {
    if (static_cast<int>(seized.size()) >= kMaxSeized) {
      t.native_error = "not stopped: more than 16384 threads";
      continue;
    }
    // The kernel refuses a seize while the process execs (its credentials are being changed):
    // the first thread is tried a few times before the refusal counts.
    int seize_rc = ::ptrace(PTRACE_SEIZE, t.tid, nullptr, nullptr);
    for (int retry = 0; seize_rc != 0 && errno == EPERM && seized.empty() && retry < 3; ++retry) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      seize_rc = ::ptrace(PTRACE_SEIZE, t.tid, nullptr, nullptr);
    }
    if (seize_rc != 0) {
      t.native_error = std::string("PTRACE_SEIZE: ") + std::strerror(errno);
      t.exited = errno == ESRCH;
      if (errno == EPERM && seized.empty()) {
        // A zombie (or a process exiting right now) refuses PTRACE_SEIZE with EPERM too: say so
        // rather than "run as root".
        char state = '?';
        if (FILE* f = std::fopen((proc + "/stat").c_str(), "re")) {
          char buf[512];
          const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
          std::fclose(f);
          buf[n] = 0;
          if (const char* close = std::strrchr(buf, ')'); close && close[1] == ' ') state = close[2];
        }
        // A main thread that exited (pthread_exit) while others run: the process lives on in
        // them, so they are read.
        if (state == 'Z' && t.tid == pid && threads.size() > 1) {
          t.native_error = "the main thread exited (its process lives on in its other threads)";
          t.exited = true;
          continue;
        }
        result.refused = state != 'Z' && state != 'X' && state != '?';
        result.error = result.refused ? "ptrace refused (" + std::string(std::strerror(EPERM)) + ")"
                                      : std::string("the process exited (a zombie, or gone while attaching)");
        ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
        return result;
      }
      continue;
    }
    g_seized[seized.size()].store(t.tid);
    seized.push_back(Seized{t.tid, false, 0, &t});
    g_nseized.store(static_cast<int>(seized.size()));
  }
  const auto cpu_now = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
  };
  const double cpu0 = cpu_now();
  const auto t0 = std::chrono::steady_clock::now();
  for (Seized& s : seized) ::ptrace(PTRACE_INTERRUPT, s.tid, nullptr, nullptr);
  wait_all_stopped(seized);
  const auto t_stopped = std::chrono::steady_clock::now();
  g_accessors = _UPT_accessors;
  g_accessors.access_mem = cached_access_mem;
  g_accessors.find_proc_info = table_find_proc_info;
  unw_addr_space_t as = unw_create_addr_space(&g_accessors, 0);
  if (as) unw_set_caching_policy(as, UNW_CACHE_GLOBAL);
  PageCache cache;
  cache.pid = pid;
  g_cache = &cache;
  g_tables = &tables;
  const auto deadline = t_stopped + read_budget;
  for (Seized& s : seized) {
    if (!s.stopped) continue;
    read_thread_pointer(s);
    if (!as) continue;
    if (std::chrono::steady_clock::now() >= deadline) {
      s.out->native_error = "not unwound: the stop's read budget of " + std::to_string(read_budget.count()) +
                            " ms was spent on other threads";
      continue;
    }
    unwind(as, s);
  }
  g_cache = nullptr;
  g_tables = nullptr;
  const auto t_unwound = std::chrono::steady_clock::now();
  if (while_stopped) while_stopped(deadline);
  const auto t_python = std::chrono::steady_clock::now();
  for (Seized& s : seized) {
    if (::ptrace(PTRACE_DETACH, s.tid, nullptr, reinterpret_cast<void*>(static_cast<long>(s.signal))) == 0) continue;
    if (!s.stopped && errno == ESRCH && ::kill(s.tid, 0) == 0) g_late.push_back(Seized{s.tid, false, 0, nullptr});
  }
  const auto t1 = std::chrono::steady_clock::now();
  const double cpu1 = cpu_now();
  keep_late_in_handler_list();
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);  // a job-control stop asked meanwhile: now, after the release
  release_late_threads(std::chrono::milliseconds(0));
  const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  result.stopped_ms = ms(t0, t1);
  result.stop = {ms(t0, t_stopped), ms(t_stopped, t_unwound), ms(t_unwound, t_python), ms(t_python, t1), cpu1 - cpu0};
  for (const Seized& s : seized) result.threads_stopped += s.stopped;
  if (as) {
    symbolize(pid, as, threads);
    unw_destroy_addr_space(as);
  }
  return result;
}

size_t release_late_threads(std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    std::erase_if(g_late, [](Seized& s) {
      const int r = poll_stop(s);
      if (r > 0) ::ptrace(PTRACE_DETACH, s.tid, nullptr, reinterpret_cast<void*>(static_cast<long>(s.signal)));
      return r != 0;
    });
    if (g_late.empty() || std::chrono::steady_clock::now() >= until) break;
    ::usleep(1000);
  }
  keep_late_in_handler_list();
  return g_late.size();
}

}  // namespace lockstep::attach
