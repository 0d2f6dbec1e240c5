#include "elf_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <set>

namespace lockstep::attach {
namespace {

bool pread_all(int fd, void* buf, size_t n, uint64_t off, uint64_t file_size) {
  if (off > file_size || n > file_size - off) return false;
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(off + done));
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

ElfSymbols read_elf_symbols(const std::string& path, const std::vector<std::string>& wanted) {
  ElfSymbols out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    out.error = "cannot open " + path + ": " + std::strerror(errno);
    return out;
  }
  struct stat st;
  const uint64_t size = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  Elf64_Ehdr eh;
  auto fail = [&](const std::string& why) {
    out.error = path + ": " + why;
    ::close(fd);
    return out;
  };
  if (!pread_all(fd, &eh, sizeof eh, 0, size) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return fail("not a 64-bit little-endian ELF file");
  if (eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum < 4096) {
    for (unsigned i = 0; i < eh.e_phnum; ++i) {
      Elf64_Phdr ph;
      if (!pread_all(fd, &ph, sizeof ph, eh.e_phoff + uint64_t{i} * sizeof ph, size)) break;
      if (ph.p_type == PT_LOAD) {
        out.first_load_vaddr = ph.p_vaddr & ~uint64_t{0xfff};
        break;
      }
    }
  }
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0)
    return fail("no section headers");
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  if (!pread_all(fd, sh.data(), sh.size() * sizeof(Elf64_Shdr), eh.e_shoff, size))
    return fail("section headers outside the file");
  std::set<std::string> want(wanted.begin(), wanted.end());
  for (const Elf64_Shdr& s : sh) {
    if (s.sh_type != SHT_DYNSYM && s.sh_type != SHT_SYMTAB) continue;
    if (s.sh_link >= sh.size() || s.sh_entsize != sizeof(Elf64_Sym)) continue;
    const Elf64_Shdr& strs = sh[s.sh_link];
    if (s.sh_size > (256u << 20) || strs.sh_size > (256u << 20)) continue;
    std::vector<char> names(strs.sh_size + 1, 0);
    std::vector<Elf64_Sym> syms(s.sh_size / sizeof(Elf64_Sym));
    if (!pread_all(fd, names.data(), strs.sh_size, strs.sh_offset, size) ||
        !pread_all(fd, syms.data(), syms.size() * sizeof(Elf64_Sym), s.sh_offset, size))
      continue;
    for (const Elf64_Sym& sym : syms) {
      if (sym.st_name >= strs.sh_size || sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
      const char* name = names.data() + sym.st_name;
      if (want.count(name) && out.values.emplace(name, sym.st_value).second) out.sizes.emplace(name, sym.st_size);
    }
    if (out.values.size() == want.size()) break;
  }
  ::close(fd);
  return out;
}

}  // namespace lockstep::attach
