// lockstep summarize DIR: one node's summary of its trace files, beside them (node_summary.h).
// Run on each node of the job (srun --overlap --ntasks-per-node=1, or the batch script's
// epilog): the analyzing machine then opens one file per node (docs/scaling.md).
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>

#include "analyze_common.h"
#include "commands.h"
#include "exit_codes.h"
#include "file_name.h"
#include "node_summary.h"
#include "text_escape.h"
#include "trace_schema.h"

namespace lockstep::cli {
namespace {

struct SummarizeArgs {
  std::string dir;
  std::string host;
  bool every_host = false;
  int threads = 0;
};

// The writer's names for host's files: <host>-<pid>.lockstep.sqlite or <host>-<pid>.<n>.lockstep.sqlite.
bool written_by(const std::string& name, const std::string& host) {
  const std::string stem = schema::safe_file_component(host) + "-";
  const std::string suffix = schema::kFileSuffix;
  if (name.size() <= stem.size() + suffix.size() || name.compare(0, stem.size(), stem) != 0) return false;
  const std::string mid = name.substr(stem.size(), name.size() - stem.size() - suffix.size());
  const size_t dot = mid.find('.');
  auto digits = [](const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; };
  return digits(mid.substr(0, dot)) && (dot == std::string::npos || digits(mid.substr(dot + 1)));
}

int summarize(const SummarizeArgs& a) {
  if (!check_dir("summarize", a.dir)) return kExitUsage;
  std::string host = a.host;
  if (host.empty() && !a.every_host) {
    char buf[256] = {};
    gethostname(buf, sizeof buf - 1);
    host = buf;
  }
  std::vector<std::string> files;
  for (const std::string& f : trace_files_in(a.dir))
    if (a.every_host || written_by(std::filesystem::path(f).filename().string(), host)) files.push_back(f);
  if (files.empty()) {
    std::cerr << "lockstep summarize: no trace file of host " << printable(host) << " (" << printable(schema::safe_file_component(host))
              << "-<pid>" << schema::kFileSuffix << ") in " << printable(a.dir) << "\n";
    return kExitUsage;
  }
  LoadOptions lo;
  lo.threads = static_cast<unsigned>(a.threads);
  Summarized s = summarize_files(files, lo);
  // One summary per host: this node's, or with --every-host each host its files' headers name.
  std::map<std::string, std::vector<SummaryEntry>> by_host;
  for (SummaryEntry& e : s.entries) by_host[a.every_host ? e.file.proc.info.host : host].push_back(std::move(e));
  try {
    for (auto& [h, entries] : by_host) {
      const std::string out = (std::filesystem::path(a.dir) / summary_file_name(h)).string();
      write_node_summary(out, h, entries);
      std::cout << "lockstep summarize: " << printable(out) << ": " << entries.size() << " trace files\n";
    }
  } catch (const LoadError& e) {
    std::cerr << "lockstep summarize: " << printable_lines(e.what()) << "\n";
    return kExitUsage;
  }
  for (const SkippedFile& f : s.not_covered)
    std::cout << "lockstep summarize: not covered (the analyzer reads it itself): " << printable(f.path) << ": "
              << printable(f.reason) << "\n";
  return kExitOk;
}

}  // namespace

void add_summarize_command(Command& app, int* exit_code) {
  auto args = std::make_shared<SummarizeArgs>();
  auto* sub = app.add_subcommand("summarize", "Write this node's summary of its trace files, for analyze/check/report on many ranks");
  sub->add_option("dir", args->dir, "Trace directory (lockstep run -o DIR)")->required();
  sub->add_option("--host", args->host,
                  "The host whose files (HOST-<pid>.lockstep.sqlite) to summarize (default: this machine's host name)");
  sub->add_flag("--every-host", args->every_host,
                "Summarize every trace file of DIR, one summary per host its header names (on one machine)");
  sub->add_option("--threads", args->threads, "Files read at once (default 0: one per hardware thread)")->non_negative();
  sub->footer("Writes DIR/HOST.lockstep-summary. analyze, check and report use it in place of the files it covers "
              "while they are unchanged (docs/scaling.md). Exit code: 0 written, 2 input error.");
  sub->callback([args, exit_code] { *exit_code = summarize(*args); });
}

}  // namespace lockstep::cli
