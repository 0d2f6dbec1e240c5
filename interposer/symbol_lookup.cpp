#include "symbol_lookup.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

// libc's dlsym, resolved once (dlsym_hook.cpp's trampoline jumps through it). dlvsym is not
// hooked, so this call reaches libc's: RTLD_NEXT from liblockstep is the next definition.
extern "C" {
__attribute__((visibility("hidden"))) void* (*lockstep_real_dlsym)(void*, const char*) = nullptr;
__attribute__((visibility("hidden"))) void* lockstep_resolve_real_dlsym() {
  using Fn = void* (*)(void*, const char*);
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");    // glibc >= 2.34 (in libc)
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");  // older: libdl, x86-64 base version
  __atomic_store_n(&lockstep_real_dlsym, reinterpret_cast<Fn>(p), __ATOMIC_RELEASE);
  return p;
}
}

namespace lockstep::rec {

void* real_dlsym(void* handle, const char* name) {
  auto fn = __atomic_load_n(&lockstep_real_dlsym, __ATOMIC_ACQUIRE);
  if (!fn) {
    lockstep_resolve_real_dlsym();
    fn = __atomic_load_n(&lockstep_real_dlsym, __ATOMIC_ACQUIRE);
  }
  return fn ? fn(handle, name) : nullptr;
}

namespace {

__attribute__((tls_model("initial-exec"))) thread_local int t_nccl_slot = 0;
std::atomic<unsigned> g_reach{0};

// Slots 1..: libraries reached through dlsym on their own handle (slot 0 is library_handle()).
struct SlotTable {
  std::mutex mu;
  std::atomic<void*> handle[kNcclSlots] = {};
  const void* base[kNcclSlots] = {};
  std::string path[kNcclSlots];
};
SlotTable& slots() {
  static SlotTable* t = new SlotTable();  // never destroyed: hooks may run during exit
  return *t;
}

void* own_base() {
  static void* base = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<void*>(&own_base), &info);
    return info.dli_fbase;
  }();
  return base;
}

bool defined_in_self(const void* p) {
  Dl_info info{};
  return p && dladdr(p, &info) && info.dli_fbase == own_base();
}

const char* probe_symbol(Library lib) {
  switch (lib) {
    case Library::Nccl: return "ncclAllReduce";
    case Library::Cudart: return "cudaGraphLaunch";
    case Library::Driver: return "cuInit";  // not defined by liblockstep
  }
  return "";
}

// The handle of the loaded library of this kind, found once (NOLOAD: never loads anything).
void* library_handle(Library lib) {
  static std::atomic<void*> handles[3];
  std::atomic<void*>& slot = handles[static_cast<int>(lib)];
  if (void* h = slot.load(std::memory_order_acquire)) return h;

  const char* probe = probe_symbol(lib);
  std::vector<std::string> candidates;
  // Global scope first: the next definition after ours.
  bool global = false;
  if (void* p = real_dlsym(RTLD_NEXT, probe)) {
    Dl_info info{};
    if (dladdr(p, &info) && info.dli_fname && info.dli_fbase != own_base()) {
      candidates.emplace_back(info.dli_fname);
      global = true;
    }
  }
  // Every mapped object (RTLD_LOCAL loads are invisible to RTLD_NEXT). Names are collected
  // first: dlopen is not called from inside the dl_iterate_phdr callback.
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name && info->dlpi_name[0])
          static_cast<std::vector<std::string>*>(data)->emplace_back(info->dlpi_name);
        return 0;
      },
      &candidates);

  for (const std::string& name : candidates) {
    void* h = dlopen(name.c_str(), RTLD_NOLOAD | RTLD_LAZY);
    if (!h) continue;
    void* p = real_dlsym(h, probe);
    Dl_info info{};
    // dlsym(handle) also searches the object's dependencies: keep the object that defines it.
    if (p && !defined_in_self(p) && dladdr(p, &info) && info.dli_fname &&
        name == info.dli_fname) {
      if (lib == Library::Nccl)
        note_reach(global && &name == &candidates.front() ? kReachGlobal : kReachLocal);
      slot.store(h, std::memory_order_release);
      return h;  // the reference is kept for the life of the process on purpose
    }
    dlclose(h);
  }
  return nullptr;
}

void* lookup_in(void* h, Library lib, const char* name) {
  if (!h) return nullptr;
  void* p = nullptr;
  if (lib == Library::Nccl) {
    char pname[128];
    if (snprintf(pname, sizeof pname, "p%s", name) < int(sizeof pname)) p = real_dlsym(h, pname);
  }
  if (!p) p = real_dlsym(h, name);
  if (p && defined_in_self(p)) return nullptr;  // never call back into ourselves
  return p;
}

}  // namespace

void* find_real_nccl(int slot, const char* name) {
  if (slot <= 0 || slot >= kNcclSlots) return lookup_in(library_handle(Library::Nccl), Library::Nccl, name);
  return lookup_in(slots().handle[slot].load(std::memory_order_acquire), Library::Nccl, name);
}

void* find_real(Library lib, const char* name) {
  if (lib == Library::Nccl) return find_real_nccl(t_nccl_slot, name);
  return lookup_in(library_handle(lib), lib, name);
}

int current_nccl_slot() noexcept { return t_nccl_slot; }
NcclSlotScope::NcclSlotScope(int slot) noexcept : saved_(t_nccl_slot) { t_nccl_slot = slot; }
NcclSlotScope::~NcclSlotScope() noexcept { t_nccl_slot = saved_; }

int nccl_slot_of_object(const void* base, const char* path) {
  if (!base || !path || base == own_base()) return -1;
  // Slot 0: the library the exported hooks call.
  if (void* p = find_real_nccl(0, "ncclAllReduce")) {
    Dl_info info{};
    if (dladdr(p, &info) && info.dli_fbase == base) return 0;
  }
  SlotTable& t = slots();
  std::lock_guard<std::mutex> g(t.mu);
  for (int i = 1; i < kNcclSlots; i++)
    if (t.base[i] == base) return i;
  // Is it an NCCL? It must itself define the probe (not merely depend on a libnccl).
  void* h = dlopen(path, RTLD_NOLOAD | RTLD_LAZY);
  if (!h) return -1;
  void* p = real_dlsym(h, "pncclAllReduce");
  if (!p) p = real_dlsym(h, "ncclAllReduce");
  Dl_info info{};
  if (!p || !dladdr(p, &info) || info.dli_fbase != base) {
    dlclose(h);
    return -1;
  }
  for (int i = 1; i < kNcclSlots; i++)
    if (!t.base[i]) {
      t.base[i] = base;
      t.path[i] = path;
      t.handle[i].store(h, std::memory_order_release);  // reference kept for the process's life
      return i;
    }
  dlclose(h);
  return -1;
}

std::string nccl_slot_path(int slot) {
  if (slot <= 0 || slot >= kNcclSlots) return module_path_of(find_real_nccl(0, "ncclAllReduce"));
  SlotTable& t = slots();
  std::lock_guard<std::mutex> g(t.mu);
  return t.path[slot];
}

void note_reach(unsigned bits) noexcept { g_reach.fetch_or(bits, std::memory_order_relaxed); }
unsigned reach_bits() noexcept { return g_reach.load(std::memory_order_relaxed); }
std::string reach_names(unsigned bits) {
  static const char* const names[] = {"global", "local", "dlsym", "profiler_plugin", "unhooked"};
  std::string s;
  for (int i = 0; i < 5; i++)
    if (bits & (1u << i)) {
      if (!s.empty()) s += ",";
      s += names[i];
    }
  return s;
}


const char* module_path_of(const void* fn) {
  Dl_info info{};
  if (fn && dladdr(fn, &info) && info.dli_fname) return info.dli_fname;
  return "";
}

bool in_own_module(const void* pc) {
  static const auto range = [] {
    struct R { uintptr_t lo = 0, hi = 0; } r;
    struct Ctx { uintptr_t base; R* r; } ctx{reinterpret_cast<uintptr_t>(own_base()), &r};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
          auto* c = static_cast<Ctx*>(data);
          if (info->dlpi_addr != c->base) return 0;
          for (int i = 0; i < info->dlpi_phnum; i++) {
            const auto& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_LOAD) continue;
            uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
            if (!c->r->lo || lo < c->r->lo) c->r->lo = lo;
            if (hi > c->r->hi) c->r->hi = hi;
          }
          return 1;
        },
        &ctx);
    return r;
  }();
  auto a = reinterpret_cast<uintptr_t>(pc);
  return a >= range.lo && a < range.hi;
}

}  // namespace lockstep::rec
