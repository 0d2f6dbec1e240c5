// NCCL reached through dlsym on a handle (ctypes.CDLL as vLLM's/SGLang's pynccl, cffi, a
// framework's own loader; RTLD_LOCAL or RTLD_DEEPBIND): dlsym(handle, "ncclAllReduce") searches
// that library and its dependencies, never the preloaded liblockstep, so the program would call
// NCCL directly. The same for the CUDA driver's graph entry points and cuGetProcAddress
// (driver_hooks.cpp), which libcudart gets with dlsym on its libcuda handle. liblockstep exports dlsym: for a real handle and a name starting with 'n' or
// 'p' it looks the symbol up with libc's dlsym, and when it is an NCCL entry point we hook,
// defined by a libnccl, it returns our hook for that library's slot (symbol_lookup.h).
//
// Names starting with 'c': driver_hook_for_dlsym decides. dlsym(RTLD_DEFAULT, name) of a name we
// export finds our hook first: when no real library defines that name it returns NULL instead, so
// a program without NCCL or CUDA that probes for them still finds nothing
// (docs/review-2026-12-02.md L5); the lookup itself stays libc's, with the caller's return
// address (the caller's scope decides what else it finds). Everything else jumps to libc's dlsym with the caller's return address untouched (a tail
// jump, written in assembly): dlsym(RTLD_NEXT, ...) and dlsym(RTLD_DEFAULT, ...) depend on the
// caller's object, and must behave as if we were not there. The cost for other names is a few
// instructions.
#include <dlfcn.h>

#include <cstdint>
#include <cstring>

#include "symbol_lookup.h"

namespace lockstep::rec {
void* nccl_hook_for(const char* name, int slot);  // nccl_hooks.cpp
void* driver_hook_for_dlsym(const char* name, void* p);  // driver_hooks.cpp
}

using namespace lockstep::rec;

extern "C" {
__attribute__((visibility("hidden"))) void* lockstep_resolve_real_dlsym();  // symbol_lookup.cpp

// Slow path: `handle` is a real handle (not RTLD_DEFAULT/RTLD_NEXT) and name starts with n/p/c.
__attribute__((visibility("hidden"))) void* lockstep_dlsym_nccl(void* handle, const char* name) {
  void* p = real_dlsym(handle, name);
  if (!p) return p;
  if (name[0] == 'c') return driver_hook_for_dlsym(name, p);
  bool is_nccl_name = strncmp(name, "nccl", 4) == 0 || strncmp(name, "pnccl", 5) == 0;
  if (!is_nccl_name) return p;
  void* hooks0 = nccl_hook_for(name, 0);
  if (!hooks0 || p == hooks0) return p;  // not a hooked entry point, or already ours
  Dl_info info{};
  if (!dladdr(p, &info) || !info.dli_fbase || !info.dli_fname) return p;
  int slot = nccl_slot_of_object(info.dli_fbase, info.dli_fname);
  if (slot < 0) {
    // A libnccl for which no slot is left (or not an NCCL): the program calls it unrecorded.
    note_reach(kReachUnhooked);
    return p;
  }
  note_reach(kReachDlsym);
  return nccl_hook_for(name, slot);
}

// 1 when dlsym(RTLD_DEFAULT, name) would hand out our hook for a function no loaded library
// defines. Called for names starting with n/p/c only; rare (probes, not calls).
__attribute__((visibility("hidden"))) int lockstep_dlsym_default_hides(const char* name) {
  Library lib;
  const char* real_name = name;
  if (strncmp(name, "nccl", 4) == 0) lib = Library::Nccl;
  else if (strncmp(name, "cuda", 4) == 0) lib = Library::Cudart;
  else if (strncmp(name, "cu", 2) == 0) lib = Library::Driver;
  else return 0;
  static void* self = [] {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&lockstep_dlsym_default_hides), &info) || !info.dli_fname) return static_cast<void*>(nullptr);
    return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }();
  if (!self) return 0;
  void* ours = real_dlsym(self, name);
  if (!ours) return 0;
  Dl_info mine{}, found{};
  if (!dladdr(reinterpret_cast<void*>(&lockstep_dlsym_default_hides), &mine) || !dladdr(ours, &found) ||
      found.dli_fbase != mine.dli_fbase)
    return 0;  // not one of our exports
  return find_real(lib, real_name) ? 0 : 1;
}
}

#if defined(__x86_64__)
// dlsym(handle=%rdi, name=%rsi). RTLD_NEXT is (void*)-1, RTLD_DEFAULT is 0.
__asm__(R"(
  .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
  endbr64
  cmpq $-1, %rdi
  je 1f
  testq %rsi, %rsi
  je 1f
  testq %rdi, %rdi
  je 5f
  je 1f
  movzbl (%rsi), %eax
  cmpb $0x6e, %al
  je 2f
  cmpb $0x70, %al
  je 2f
  cmpb $0x63, %al
  je 2f
1:
  movq lockstep_real_dlsym(%rip), %rax
  testq %rax, %rax
  je 3f
  jmp *%rax
2:
  jmp lockstep_dlsym_nccl
3:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call lockstep_resolve_real_dlsym
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testq %rax, %rax
  je 4f
  jmp *%rax
4:
  ret
5:
  movzbl (%rsi), %eax
  cmpb $0x6e, %al
  je 6f
  cmpb $0x63, %al
  jne 1b
6:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  movq %rsi, %rdi
  call lockstep_dlsym_default_hides
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testl %eax, %eax
  je 1b
  xorl %eax, %eax
  ret
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#endif
