#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "commands.h"
#include "exit_codes.h"

namespace lockstep::cli {

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("lockstep") : p.string();
}

bool stdout_color() { return isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"); }

std::string preload_library_path() {
  if (const char* env = std::getenv("LOCKSTEP_PRELOAD"); env && *env) return env;
  std::filesystem::path exe = self_exe();
  auto lib = exe.parent_path() / ".." / "lib" / "liblockstep.so";
  std::error_code ec;
  auto canon = std::filesystem::weakly_canonical(lib, ec);
  return (ec ? lib : canon).string();
}

}  // namespace lockstep::cli
