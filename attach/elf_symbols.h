// Symbol values from an ELF file's .dynsym/.symtab (64-bit, little-endian), read with bounded
// preads: how `lockstep attach` finds _PyRuntime and friends in another process's libpython.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::attach {

struct ElfSymbols {
  std::string error;                        // empty when the file was read
  uint64_t first_load_vaddr = 0;            // p_vaddr of the first PT_LOAD (page-aligned)
  std::map<std::string, uint64_t> values;   // the wanted names that were found
  std::map<std::string, uint64_t> sizes;    // their st_size (0: the table does not say)
};

// Looks up `wanted` (exact names) in path's symbol tables. Untrusted input: every offset and
// size is checked against the file.
ElfSymbols read_elf_symbols(const std::string& path, const std::vector<std::string>& wanted);

}  // namespace lockstep::attach
