// lockstep doctor DIR: for each trace file, how this process reached NCCL and what the recorder
// could therefore not see (docs/recorder.md, "How NCCL is reached"). Reads each file's header
// and record counts through the loader (load_process_counts: read-only, validated); every string
// is printed escaped.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyze_common.h"
#include "meta_keys.h"
#include "commands.h"
#include "exit_codes.h"
#include "identity.h"
#include "parallel_for.h"
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

// The lines of one file's report after its first, each count through `num` (the file's own, or a
// group's range): files whose lines are the same but for the counts share one report.
using CountText = std::function<std::string(int64_t RecordCounts::*)>;
// Where a count goes in a report's grouping key: printable() escapes every control character, so
// no text of a trace holds it.
constexpr char kCount = '\x01';
std::string report_body(const FileFacts& f, const CountText& num) {
  std::ostringstream out;
  auto m = [&](const char* k) {
    auto it = f.meta.find(k);
    return it == f.meta.end() ? std::string() : it->second;
  };
  if (!f.error.empty()) return "unreadable: " + printable_prefix(f.error);
  out << "  libnccl used: " << (m(schema::meta::kNcclLibrary).empty() ? "(unknown)" : printable_prefix(m(schema::meta::kNcclLibrary)))
      << " (version " << printable_prefix(m(schema::meta::kNcclVersion)) << ")\n";
  std::string libs = m(schema::meta::kNcclLibraries);
  if (!libs.empty() && libs != m(schema::meta::kNcclLibrary))
    out << "  every libnccl it called: " << printable_prefix(libs) << "\n";
  std::string reached = m(schema::meta::kNcclReached);
  out << "  reached through: ";
  if (reached.empty()) {
    out << (f.counts.op_rows == 0 ? "(not recorded: the process made no NCCL call before its trace ended)\n"
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
    for (size_t i = 0; i < how.size(); i++) out << (i ? "; " : "") << how[i];
    out << "\n";
  }
  bool plugin = has(reached, schema::meta::kReachProfilerPlugin);
  bool preloaded = !plugin || m(schema::meta::kInterposerPreloaded) == "1";
  out << "  capture paths: "
      << (preloaded ? "NCCL entry points (LD_PRELOAD), CUDA graphs through the runtime "
                      "and the driver API (cuGetProcAddress included)"
                    : "none of the interposer's (liblockstep was not preloaded)")
      << (plugin ? "; NCCL's profiler plugin (" + printable_prefix(m(schema::meta::kProfilerPlugin)) + ")" : std::string())
      << "; CUPTI: not used\n";
  if (plugin)
    out << "  coverage: the plugin saw " << num(&RecordCounts::plugin_calls) << " NCCL calls, " << num(&RecordCounts::plugin_only)
        << " of them not seen by the interposer\n";
  out << "  recorded: " << num(&RecordCounts::op_rows) << " op rows, " << num(&RecordCounts::captured) << " captured into graphs, "
      << num(&RecordCounts::graph_launches) << " graph launches; stacks " << printable_prefix(m(schema::meta::kStackMode)) << "\n";
  std::vector<std::string> missed;
  if (has(reached, "unhooked"))
    missed.push_back("more libnccl copies than lockstep has hook slots (4): calls through the "
                     "extra ones were not recorded");
  if (!plugin)
    missed.push_back("a statically linked NCCL (e.g. conda PyTorch) or one inside another "
                     "library is invisible to the interposer; load liblockstep as NCCL's profiler "
                     "plugin too (NCCL_PROFILER_PLUGIN=$(lockstep --preload-path)) to see it");
  else if (f.counts.plugin_only > 0)
    missed.push_back(num(&RecordCounts::plugin_only) + " NCCL calls " +
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
  for (const auto& s : missed) out << "  missed: " << s << "\n";
  return out.str();
}

int doctor(const std::string& dir, bool per_file) {
  if (!check_dir("doctor", dir)) return kExitUsage;
  // The files every other command reads (the loader's rule), no others.
  const std::vector<std::string> files = trace_files_in(dir);
  if (files.empty()) {
    std::cout << "no trace file in " << printable_prefix(dir) << ": " << kNoTraceFileWhy << ".\n";
    return kExitUsage;
  }
  // Each file read in parallel (its header and a count of its rows), kept as its report's lines:
  // 16,384 files' meta maps are not held at once.
  struct Read {
    std::string head;      // "rank R, pid P on H"
    std::string key;       // the report's lines, each count a kCount mark (the grouping key)
    std::vector<int64_t RecordCounts::*> marks;  // the count each mark stands for, in order
    FileFacts facts;       // meta dropped once the key and head are made
    int rank = -1;
    std::string host;
  };
  std::vector<Read> reads(files.size());
  parallel_for(files.size(), 0, [&](size_t i) {
    Read& r = reads[i];
    r.facts = read_facts(files[i]);
    const auto m = [&](const char* k) {
      auto it = r.facts.meta.find(k);
      return it == r.facts.meta.end() ? std::string() : it->second;
    };
    const auto field = [&](const char* label, const char* key) {
      return std::string(label) + (m(key).empty() ? "(not recorded)" : printable_prefix(m(key)));
    };
    if (r.facts.error.empty())
      r.head = field("rank ", schema::meta::kGlobalRank) + ", " + field("pid ", schema::meta::kPid) + " on " + field("", schema::meta::kHost);
    r.key = report_body(r.facts, [&](int64_t RecordCounts::*field) {
      r.marks.push_back(field);
      return std::string(1, kCount);
    });
    const auto rank = trace_file::parse_int(m(schema::meta::kGlobalRank));
    if (rank.integer() && rank.value >= 0 && rank.value <= INT32_MAX) r.rank = static_cast<int>(rank.value);
    r.host = m(schema::meta::kHost);
    r.facts.meta.clear();
  });
  // Files whose reports are the same but for the counts: one report, the first file's line, the
  // counts as a range (at 16,384 ranks the few distinct ways NCCL was reached, not 16,384 copies).
  std::vector<std::vector<size_t>> groups;
  std::unordered_map<std::string, size_t> by_key;
  for (size_t i = 0; i < reads.size(); ++i) {
    auto [it, fresh] = per_file ? std::pair{by_key.end(), true} : by_key.emplace(reads[i].key, groups.size());
    if (fresh) groups.emplace_back();
    groups[per_file ? groups.size() - 1 : it->second].push_back(i);
  }
  size_t readable = 0;
  for (const auto& g : groups) {
    const Read& first = reads[g.front()];
    // File names are untrusted too (a directory anyone could write to).
    std::cout << printable_prefix(std::filesystem::path(first.facts.path).filename().string()) << ": "
              << (first.facts.error.empty() ? first.head : first.key);
    if (g.size() > 1) {
      std::vector<int> ranks;
      std::set<std::string> hosts;
      for (size_t i : g) {
        if (reads[i].rank >= 0) ranks.push_back(reads[i].rank);
        hosts.insert(reads[i].host);
      }
      std::cout << " (this report for " << g.size() << " files";
      if (!ranks.empty()) std::cout << ": " << ranks_phrase(ranks, "rank", kMaxRangeSegments);
      if (first.facts.error.empty()) std::cout << (ranks.empty() ? ": " : ", ") << "on " << plural(hosts.size(), "host", "hosts");
      else
        for (size_t k = 1; k < g.size() && k <= 3; ++k)
          std::cout << (k == 1 ? ": " : ", ") << printable_prefix(std::filesystem::path(reads[g[k]].facts.path).filename().string())
                    << (k == 3 && g.size() > 4 ? " and " + std::to_string(g.size() - 4) + " more" : "");
      std::cout << ")";
    }
    if (!first.facts.error.empty()) {
      std::cout << "\n";
      continue;
    }
    readable += g.size();
    std::cout << "\n";
    size_t mark = 0;
    for (char c : first.key) {
      if (c != kCount) {
        std::cout << c;
        continue;
      }
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (size_t i : g) {
        const int64_t v = reads[i].facts.counts.*first.marks[mark];
        lo = std::min(lo, v), hi = std::max(hi, v);
      }
      ++mark;
      std::cout << (lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi));
    }
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
  auto per_file = std::make_shared<bool>(false);
  sub->add_option("dir", *dir, "Trace directory (lockstep run -o DIR)")->required();
  sub->add_flag("--per-file", *per_file,
                "One report per file (default: files whose reports are the same but for their counts share one, the counts as a range)");
  sub->callback([dir, per_file, exit_code] { *exit_code = doctor(*dir, *per_file); });
}

}  // namespace lockstep::cli
