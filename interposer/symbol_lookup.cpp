#include "symbol_lookup.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <string>
#include <vector>

namespace lockstep::rec {
namespace {

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
  return lib == Library::Nccl ? "ncclAllReduce" : "cudaGraphLaunch";
}

// The handle of the loaded library of this kind, found once (NOLOAD: never loads anything).
void* library_handle(Library lib) {
  static std::atomic<void*> handles[2];
  std::atomic<void*>& slot = handles[static_cast<int>(lib)];
  if (void* h = slot.load(std::memory_order_acquire)) return h;

  const char* probe = probe_symbol(lib);
  std::vector<std::string> candidates;
  // Global scope first: the next definition after ours.
  if (void* p = dlsym(RTLD_NEXT, probe)) {
    Dl_info info{};
    if (dladdr(p, &info) && info.dli_fname && info.dli_fbase != own_base())
      candidates.emplace_back(info.dli_fname);
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
    void* p = dlsym(h, probe);
    Dl_info info{};
    // dlsym(handle) also searches the object's dependencies: keep the object that defines it.
    if (p && !defined_in_self(p) && dladdr(p, &info) && info.dli_fname &&
        name == info.dli_fname) {
      slot.store(h, std::memory_order_release);
      return h;  // the reference is kept for the life of the process on purpose
    }
    dlclose(h);
  }
  return nullptr;
}

}  // namespace

void* find_real(Library lib, const char* name) {
  void* h = library_handle(lib);
  if (!h) return nullptr;
  void* p = nullptr;
  if (lib == Library::Nccl) {
    std::string pname = std::string("p") + name;
    p = dlsym(h, pname.c_str());
  }
  if (!p) p = dlsym(h, name);
  if (p && defined_in_self(p)) return nullptr;  // never call back into ourselves
  return p;
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
