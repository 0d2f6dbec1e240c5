#include "symbolize.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

namespace lockstep::rec {
namespace {

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !d) return name;
  std::string s(d);
  free(d);
  return s;
}

// Function symbols of one ELF file's .symtab, sorted by address (file-relative vaddr).
struct SymTab {
  struct Sym {
    uint64_t addr, size;
    std::string name;
  };
  std::vector<Sym> syms;
  uint64_t first_load_vaddr = 0;  // p_vaddr of the first PT_LOAD (0 for PIC objects)

  const Sym* find(uint64_t vaddr) const {
    auto it = std::upper_bound(syms.begin(), syms.end(), vaddr,
                               [](uint64_t a, const Sym& s) { return a < s.addr; });
    if (it == syms.begin()) return nullptr;
    --it;
    return vaddr < it->addr + std::max<uint64_t>(it->size, 1) ? &*it : nullptr;
  }
};

std::unique_ptr<SymTab> load_symtab(const std::string& path) {
  auto tab = std::make_unique<SymTab>();
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return tab;
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
    close(fd);
    return tab;
  }
  void* map = mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return tab;
  const auto* base = static_cast<const unsigned char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  size_t size = st.st_size;
  auto in_file = [&](uint64_t off, uint64_t len) { return off <= size && len <= size - off; };
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      !in_file(eh->e_phoff, uint64_t(eh->e_phnum) * sizeof(Elf64_Phdr)) ||
      !in_file(eh->e_shoff, uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr))) {
    munmap(map, size);
    return tab;
  }
  const auto* ph = reinterpret_cast<const Elf64_Phdr*>(base + eh->e_phoff);
  for (int i = 0; i < eh->e_phnum; i++)
    if (ph[i].p_type == PT_LOAD) {
      tab->first_load_vaddr = ph[i].p_vaddr - ph[i].p_offset;
      break;
    }
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
    const Elf64_Shdr& strs = sh[sh[i].sh_link];
    if (!in_file(sh[i].sh_offset, sh[i].sh_size) || !in_file(strs.sh_offset, strs.sh_size))
      continue;
    const auto* sym = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
    size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
    const char* str = reinterpret_cast<const char*>(base + strs.sh_offset);
    for (size_t k = 0; k < n; k++) {
      if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || !sym[k].st_value ||
          sym[k].st_name >= strs.sh_size)
        continue;
      tab->syms.push_back({sym[k].st_value, sym[k].st_size, str + sym[k].st_name});
    }
  }
  munmap(map, size);
  std::sort(tab->syms.begin(), tab->syms.end(),
            [](const SymTab::Sym& a, const SymTab::Sym& b) { return a.addr < b.addr; });
  return tab;
}

const SymTab& symtab_for(const std::string& path) {
  // Writer thread only. Never destroyed: the writer's last commit runs from an atexit handler,
  // after function-local statics created later than it was registered are gone.
  static auto* cache = new std::map<std::string, std::unique_ptr<SymTab>>();
  auto& slot = (*cache)[path];
  if (!slot) slot = load_symtab(path);
  return *slot;
}

}  // namespace

NativeFrame symbolize(uintptr_t pc, bool innermost) {
  NativeFrame f;
  uintptr_t lookup = innermost ? pc : pc - 1;  // a return address points after the call
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(lookup), &info)) return f;
  if (info.dli_fname) f.module = info.dli_fname;
  uintptr_t fbase = reinterpret_cast<uintptr_t>(info.dli_fbase);
  f.offset = pc - fbase;
  if (f.module.empty() || f.module[0] != '/') {
    // The main program is named as it was started (argv[0]); its file is /proc/self/exe.
    char exe[4096] = {};
    char* real = f.module.empty() ? nullptr : realpath(f.module.c_str(), nullptr);
    if (real) {
      f.module = real;
      free(real);
    } else if (readlink("/proc/self/exe", exe, sizeof exe - 1) > 0) {
      f.module = exe;
    }
  }
  if (info.dli_sname) {
    f.function = demangle(info.dli_sname);
    return f;
  }
  const SymTab& tab = symtab_for(f.module);
  if (const SymTab::Sym* s = tab.find(lookup - fbase + tab.first_load_vaddr))
    f.function = demangle(s->name.c_str());
  return f;
}

}  // namespace lockstep::rec
