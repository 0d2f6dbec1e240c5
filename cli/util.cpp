#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "analyze_common.h"
#include "env_vars.h"
#include "commands.h"
#include "exit_codes.h"
#include "flightrec.h"
#include "node_summary.h"
#include "trace_schema.h"

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
  if (const char* env = std::getenv(schema::env::kPreload); env && *env) return env;
  // Relative to this executable, so an installed prefix can move: PREFIX/lib/lockstep/ (cmake
  // --install, the Debian package), then the build tree's lib/.
  const std::filesystem::path bin = std::filesystem::path(self_exe()).parent_path();
  std::filesystem::path lib;
  for (const auto& dir : {bin / ".." / "lib" / "lockstep", bin / ".." / "lib"}) {
    lib = dir / "liblockstep.so";
    if (file_exists(lib.string())) break;
  }
  std::error_code ec;
  auto canon = std::filesystem::weakly_canonical(lib, ec);
  return (ec ? lib : canon).string();
}

std::vector<std::string> trace_files_in(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.ends_with(schema::kFileSuffix) && name != schema::kFileSuffix) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool check_dir(const std::string& cmd, const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    std::cerr << "lockstep " << cmd << ": no such directory: " << printable(dir) << "\n";
    return false;
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    std::cerr << "lockstep " << cmd << ": not a directory: " << printable(dir) << "\n";
    return false;
  }
  return true;
}

bool trace_bytes_at_most(const std::string& dir, uint64_t n, bool* summaries) {
  std::error_code ec;
  uint64_t bytes = 0;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (summaries && name.ends_with(kSummarySuffix)) *summaries = true;
    if (!name.ends_with(schema::kFileSuffix)) continue;
    std::error_code size_ec;
    const uintmax_t size = it->file_size(size_ec);
    if (!size_ec && (bytes += size) > n) return false;
  }
  return !ec;
}

void add_read_options(Command* sub, ReadArgs& r) {
  auto* full = sub->add_flag("--full-read", r.full_read,
                             "Read every op row of every file (the default while the directory's traces add up to 1 GiB "
                             "or less and it holds no node summary)");
  auto* first = sub->add_flag("--summary-first", r.summary_first,
                              "Read each file from its newest op back to the newest checkpoint every member agrees on "
                              "(the default above 1 GiB, or with node summaries: docs/scaling.md); what it does not read "
                              "is named. Clean is said only where the rows it skips are proven to hold no order "
                              "inversion and no all-to-all split that differs; else the verdict is incomplete (exit 4)");
  first->excludes(full);
  sub->add_option("--threads", r.threads, "Files read at once (default 0: one per hardware thread)")->non_negative();
}

void explain_no_trace_file(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec) || !trace_files_in(dir).empty()) return;
  const flightrec::Converted fr = flightrec::converted_trace_files(dir);
  if (!fr.trace_files.empty() || !fr.skipped.empty()) return;
  std::cerr << "  " << kNoTraceFileWhy << " (run: lockstep doctor " << printable(dir) << ")\n";
}

}  // namespace lockstep::cli
