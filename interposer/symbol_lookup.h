// Finding the real NCCL / CUDA runtime functions wherever the application loaded them:
// the global scope (linked, or dlopen RTLD_GLOBAL) through dlsym(RTLD_NEXT), else any mapped
// object exporting a probe symbol (dlopen RTLD_LOCAL, e.g. libnccl.so.2 pulled in by torch._C),
// found with dl_iterate_phdr. Never returns a function of liblockstep itself.
#pragma once

#include <atomic>

namespace lockstep::rec {

enum class Library { Nccl, Cudart };

// The real function `name` of `lib`; for NCCL, the profiling name "p<name>" is preferred (it
// is the strong symbol; ncclX is a weak alias in real builds). nullptr if not loaded.
void* find_real(Library lib, const char* name);

// Cached lookup: resolves once per slot (a benign race: all threads find the same pointer).
// A miss is retried on the next call, since the library may be dlopened later.
template <class Fn>
Fn real_fn(std::atomic<void*>& slot, Library lib, const char* name) {
  void* p = slot.load(std::memory_order_acquire);
  if (!p) {
    p = find_real(lib, name);
    if (p) slot.store(p, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(p);
}

// Path of the object that defines `fn` ("" if unknown).
const char* module_path_of(const void* fn);

// True if pc lies in liblockstep.so itself (stack capture skips our own frames).
bool in_own_module(const void* pc);

}  // namespace lockstep::rec
