// lockstep doctor DIR: for each trace file, how this process reached NCCL and what the recorder
// could therefore not see (docs/recorder.md, "How NCCL is reached"). Reads each file's header
// and record counts through the loader (load_process_counts: read-only, validated); every string
// is printed escaped.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "analyze_common.h"
#include "meta_keys.h"
#include "commands.h"
#include "exit_codes.h"
#include "text_escape.h"
#include "trace_loader.h"
#include "trace_schema.h"

namespace lockstep::cli {
namespace {

// Trace strings are untrusted: the one escaper (analyzer/text_escape.h), on at most `max` bytes.
std::string printable_prefix(const std::string& s, size_t max = 300) {
  return lockstep::printable(std::string_view(s).substr(0, max)) + (s.size() > max ? "..." : "");
}

struct FileFacts {
  std::string path, error;
  std::map<std::string, std::string> meta;
  RecordCounts counts;
};

FileFacts read_facts(const std::string& path) {
  FileFacts f;
  f.path = path;
  try {
    f.meta = load_process_counts(path, f.counts).meta;
  } catch (const LoadError& e) {
    f.error = e.what();
  }
  return f;
}

bool has(const std::string& list, const std::string& word) {
  size_t i = 0;
  while (i <= list.size()) {
    size_t j = list.find(',', i);
    if (j == std::string::npos) j = list.size();
    if (list.compare(i, j - i, word) == 0) return true;
    i = j + 1;
  }
  return false;
}

void report(const FileFacts& f) {
  auto m = [&](const char* k) {
    auto it = f.meta.find(k);
    return it == f.meta.end() ? std::string() : it->second;
  };
  // File names are untrusted too (a directory anyone could write to).
  std::cout << printable_prefix(std::filesystem::path(f.path).filename().string());
  if (!f.error.empty()) {
    std::cout << ": unreadable: " << printable_prefix(f.error) << "\n";
    return;
  }
  auto field = [&](const char* label, const char* key) {
    return std::string(label) + (m(key).empty() ? "(not recorded)" : printable_prefix(m(key)));
  };
  std::cout << ": " << field("rank ", schema::meta::kGlobalRank) << ", " << field("pid ", schema::meta::kPid) << " on " << field("", schema::meta::kHost) << "\n";
  std::cout << "  libnccl used: " << (m(schema::meta::kNcclLibrary).empty() ? "(unknown)" : printable_prefix(m(schema::meta::kNcclLibrary)))
            << " (version " << printable_prefix(m(schema::meta::kNcclVersion)) << ")\n";
  std::string libs = m(schema::meta::kNcclLibraries);
  if (!libs.empty() && libs != m(schema::meta::kNcclLibrary))
    std::cout << "  every libnccl it called: " << printable_prefix(libs) << "\n";
  std::string reached = m(schema::meta::kNcclReached);
  std::cout << "  reached through: ";
  if (reached.empty()) {
    std::cout << (f.counts.op_rows == 0 ? "(not recorded: the process made no NCCL call before its trace ended)\n"
                                        : "(not recorded: a recorder older than this field)\n");
  } else {
    std::vector<std::string> how;
    // Without the preloaded library no hook ran: the recorder only looked NCCL up for its meta.
    bool hooks = !has(reached, schema::meta::kReachProfilerPlugin) || m(schema::meta::kInterposerPreloaded) == "1";
    if (!hooks) reached = schema::meta::kReachProfilerPlugin;
    if (has(reached, "global")) how.push_back("linked / global scope");
    if (has(reached, "local")) how.push_back("a library loaded RTLD_LOCAL (found by scanning)");
    if (has(reached, "dlsym")) how.push_back("dlsym on a libnccl handle (ctypes, dlopen)");
    if (has(reached, schema::meta::kReachProfilerPlugin)) how.push_back("NCCL's profiler plugin");
    for (size_t i = 0; i < how.size(); i++) std::cout << (i ? "; " : "") << how[i];
    std::cout << "\n";
  }
  bool plugin = has(reached, schema::meta::kReachProfilerPlugin);
  bool preloaded = !plugin || m(schema::meta::kInterposerPreloaded) == "1";
  std::cout << "  capture paths: "
            << (preloaded ? "NCCL entry points (LD_PRELOAD), CUDA graphs through the runtime "
                            "and the driver API (cuGetProcAddress included)"
                          : "none of the interposer's (liblockstep was not preloaded)")
            << (plugin ? "; NCCL's profiler plugin (" + printable_prefix(m(schema::meta::kProfilerPlugin)) + ")" : std::string())
            << "; CUPTI: not used\n";
  if (plugin)
    std::cout << "  coverage: the plugin saw " << f.counts.plugin_calls << " NCCL calls, " << f.counts.plugin_only
              << " of them not seen by the interposer\n";
  std::cout << "  recorded: " << f.counts.op_rows << " op rows, " << f.counts.captured << " captured into graphs, "
            << f.counts.graph_launches << " graph launches; stacks " << printable_prefix(m(schema::meta::kStackMode)) << "\n";
  std::vector<std::string> missed;
  if (has(reached, "unhooked"))
    missed.push_back("more libnccl copies than lockstep has hook slots (4): calls through the "
                     "extra ones were not recorded");
  if (!plugin)
    missed.push_back("a statically linked NCCL (e.g. conda PyTorch) or one inside another "
                     "library is invisible to the interposer; load liblockstep as NCCL's profiler "
                     "plugin too (NCCL_PROFILER_PLUGIN=$(lockstep --preload-path)) to see it");
  else if (f.counts.plugin_only > 0)
    missed.push_back(std::to_string(f.counts.plugin_only) + " NCCL calls " +
                     (preloaded ? "reached NCCL without the interposer (a static or private NCCL)"
                                : "were seen only by the plugin") +
                     ": recorded from NCCL's profiler plugin, without reduction op or CUDA-graph "
                     "replays (docs/recorder.md)");
  if (f.counts.captured > 0 && f.counts.graph_launches == 0)
    missed.push_back("ops were captured into CUDA graphs but no launch was seen: a launch "
                     "through a statically linked cudart or a per-thread-stream (_ptsz) driver "
                     "entry point is not counted");
  if (!m(schema::meta::kRecorderStopped).empty())
    missed.push_back("the recorder stopped (" + printable_prefix(m(schema::meta::kRecorderStopped)) +
                     "): later ops are missing");
  if (m(schema::meta::kDroppedRecords) != "" && m(schema::meta::kDroppedRecords) != "0")
    missed.push_back(printable_prefix(m(schema::meta::kDroppedRecords)) + " records dropped (queue full)");
  for (const auto& s : missed) std::cout << "  missed: " << s << "\n";
}

int doctor(const std::string& dir) {
  if (!check_dir("doctor", dir)) return kExitUsage;
  // The files every other command reads (the loader's rule), no others.
  const std::vector<std::string> files = trace_files_in(dir);
  if (files.empty()) {
    std::cout << "no trace file in " << printable_prefix(dir) << ": " << kNoTraceFileWhy << ".\n";
    return kExitUsage;
  }
  size_t readable = 0;
  for (const auto& p : files) {
    FileFacts f = read_facts(p);
    readable += f.error.empty();
    report(f);
  }
  if (readable == 0) {
    std::cerr << "lockstep doctor: no readable trace file in " << printable_prefix(dir) << "\n";
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace

void add_doctor_command(Command& app, int* exit_code) {
  auto* sub = app.add_subcommand(
      "doctor", "Say how each traced process reached NCCL, which library it used, and what lockstep could not see");
  sub->footer("Exit code: 0 at least one trace file was read, 2 no such directory or no readable trace file.");
  auto dir = std::make_shared<std::string>();
  sub->add_option("dir", *dir, "Trace directory (lockstep run -o DIR)")->required();
  sub->callback([dir, exit_code] { *exit_code = doctor(*dir); });
}

}  // namespace lockstep::cli
