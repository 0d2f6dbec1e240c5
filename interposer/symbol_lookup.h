// Finding the real NCCL / CUDA runtime functions wherever the application loaded them:
// the global scope (linked, or dlopen RTLD_GLOBAL) through dlsym(RTLD_NEXT), else any mapped
// object exporting a probe symbol (dlopen RTLD_LOCAL, e.g. libnccl.so.2 pulled in by torch._C),
// found with dl_iterate_phdr. Never returns a function of liblockstep itself.
//
// Several NCCLs can be mapped in one process (torch's wheel and a pynccl loading another path).
// Each gets a slot: slot 0 is the one the search above finds (what the exported hooks call);
// slots 1.. are libraries the program reached through dlsym on their own handle (dlsym_hook.cpp
// hands out per-slot hooks for them). A hook runs with its slot set for the thread, so
// find_real(Library::Nccl, ...) made on its behalf (communicator queries) reaches the same NCCL.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace lockstep::rec {

enum class Library { Nccl, Cudart, Driver };

inline constexpr int kNcclSlots = 4;

// libc's dlsym (liblockstep exports its own dlsym: dlsym_hook.cpp). Internal lookups of NCCL
// names must use this one, or they would be handed our own hooks.
void* real_dlsym(void* handle, const char* name);

// The real function `name` of `lib`; for NCCL, the profiling name "p<name>" is preferred (it
// is the strong symbol; ncclX is a weak alias in real builds), from the thread's current NCCL
// slot. nullptr if not loaded.
void* find_real(Library lib, const char* name);
void* find_real_nccl(int slot, const char* name);

// The NCCL slot of the calling thread: set while a hook of that slot runs (0 otherwise).
int current_nccl_slot() noexcept;
class NcclSlotScope {
 public:
  explicit NcclSlotScope(int slot) noexcept;
  ~NcclSlotScope() noexcept;

 private:
  int saved_;
};

// The slot of the NCCL library mapped at `base` (path for dlopen NOLOAD), assigning a free one;
// -1 when the object is not an NCCL or every slot is taken.
int nccl_slot_of_object(const void* base, const char* path);
// Path of the library in `slot` ("" if none yet).
std::string nccl_slot_path(int slot);

// How NCCL was reached in this process (bits, for meta `nccl_reached`).
enum ReachBits : unsigned {
  kReachGlobal = 1,        // slot 0's NCCL is in the global scope (linked / RTLD_GLOBAL)
  kReachLocal = 2,         // slot 0's NCCL was found among RTLD_LOCAL objects
  kReachDlsym = 4,         // hooks handed out by dlsym on a libnccl handle
  kReachProfiler = 8,      // NCCL loaded liblockstep as its profiler plugin
  kReachUnhooked = 16,     // a dlsym on a libnccl returned the real function (no slot left)
};
void note_reach(unsigned bits) noexcept;
unsigned reach_bits() noexcept;
// "global,dlsym"... for meta; empty when nothing was noted.
std::string reach_names(unsigned bits);

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

// The same per NCCL slot: cache[kNcclSlots].
template <class Fn>
Fn real_nccl_fn(std::atomic<void*>* cache, int slot, const char* name) {
  void* p = cache[slot].load(std::memory_order_acquire);
  if (!p) {
    p = find_real_nccl(slot, name);
    if (p) cache[slot].store(p, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(p);
}

// Path of the object that defines `fn` ("" if unknown).
const char* module_path_of(const void* fn);

// True if pc lies in liblockstep.so itself (stack capture skips our own frames).
bool in_own_module(const void* pc);

}  // namespace lockstep::rec
