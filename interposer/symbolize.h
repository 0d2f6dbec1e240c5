// Turns a captured return address into (function, module, offset); runs in the writer thread,
// never on the hot path. Uses the dynamic symbol table (dladdr), then the module's ELF .symtab
// for functions that are not exported (static functions, executables without -rdynamic).
#pragma once

#include <cstdint>
#include <string>

namespace lockstep::rec {

struct NativeFrame {
  std::string function;  // demangled; "" when unknown
  std::string module;    // path of the shared object / executable
  uint64_t offset = 0;   // pc - load base of the module
};

// `pc` is a return address (the caller's frame); `innermost` selects pc itself instead of pc-1.
NativeFrame symbolize(uintptr_t pc, bool innermost);

}  // namespace lockstep::rec
