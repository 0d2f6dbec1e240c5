// lockstep summarize DIR: one node's summary of its trace files, beside them (node_summary.h).
// Run on each node of the job (srun --overlap --ntasks-per-node=1, or the batch script's
// epilog): the analyzing machine then opens one file per node (docs/scaling.md).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <thread>

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

// The host a trace file's name gives (<host>-<pid>[.<n>].lockstep.sqlite, the host made a safe
// file-name component); empty when the name is not the writer's.
std::string name_host(const std::string& name) {
  const std::string suffix = schema::kFileSuffix;
  if (name.size() <= suffix.size()) return "";
  const size_t dash = name.rfind('-', name.size() - suffix.size());
  if (dash == std::string::npos || dash == 0) return "";
  const std::string stem = name.substr(0, dash);
  return written_by(name, stem) && schema::safe_file_component(stem) == stem ? stem : "";
}

// --every-host: one summary per host the files' headers name, each written as soon as its files are
// read (a batch of hosts at a time: memory holds one batch's entries, not the directory's). Files
// are batched by the host their names give; a file whose header names another host than its
// name (renamed, copied) is held to the end and added to that host's summary then (read back if
// it was written already).
template <class Write>
void summarize_every_host(const std::string& dir, const std::vector<std::string>& files, const LoadOptions& lo, Write&& write,
                          std::vector<SkippedFile>& not_covered) {
  std::map<std::string, std::vector<std::string>> by_name;  // name's host -> files ("": not the writer's name)
  for (const std::string& f : files) by_name[name_host(std::filesystem::path(f).filename().string())].push_back(f);
  std::map<std::string, std::vector<SummaryEntry>> held;  // header's host -> entries named otherwise
  std::set<std::string> written;  // hosts whose summary is written
  const unsigned threads = lo.threads ? lo.threads : std::max(1u, std::thread::hardware_concurrency());
  const size_t batch_files = size_t(32) * threads;
  std::vector<std::string> batch;
  std::set<std::string> batch_hosts;  // the name hosts in `batch`
  auto flush = [&] {
    if (batch.empty()) return;
    Summarized s = summarize_files(batch, lo);
    not_covered.insert(not_covered.end(), s.not_covered.begin(), s.not_covered.end());
    std::map<std::string, std::vector<SummaryEntry>> by_host;
    for (SummaryEntry& e : s.entries) {
      const std::string& h = e.file.proc.info.host;
      (batch_hosts.count(schema::safe_file_component(h)) ? by_host : held)[h].push_back(std::move(e));
    }
    for (auto& [h, entries] : by_host) {
      write(h, entries);
      written.insert(h);
    }
    batch.clear();
    batch_hosts.clear();
  };
  for (auto& [h, fs] : by_name) {
    if (h.empty()) continue;  // files not named by the writer: read last, held
    batch.insert(batch.end(), fs.begin(), fs.end());
    batch_hosts.insert(h);
    if (batch.size() >= batch_files) flush();
  }
  flush();
  if (auto odd = by_name.find(""); odd != by_name.end()) {
    Summarized s = summarize_files(odd->second, lo);
    not_covered.insert(not_covered.end(), s.not_covered.begin(), s.not_covered.end());
    for (SummaryEntry& e : s.entries) held[e.file.proc.info.host].push_back(std::move(e));
  }
  // Held entries join their host's summary: the one written is read back (a host's files in one summary).
  for (auto& [h, entries] : held) {
    if (written.count(h)) {
      const std::string path = (std::filesystem::path(dir) / summary_file_name(h)).string();
      std::string bytes;
      {
        std::ifstream in(path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
      std::string host;
      std::vector<SummaryEntry> all;
      try {
        all = decode_node_summary(bytes, &host);
      } catch (const std::exception& x) {
        throw LoadError("cannot read back " + path + ": " + x.what());
      }
      if (host == h) {
        for (SummaryEntry& e : entries) all.push_back(std::move(e));
        entries = std::move(all);
      }
    }
    write(h, entries);
  }
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
  std::vector<SkippedFile> not_covered;
  auto write = [&](const std::string& h, const std::vector<SummaryEntry>& entries) {
    const std::string out = (std::filesystem::path(a.dir) / summary_file_name(h)).string();
    write_node_summary(out, h, entries);
    std::cout << "lockstep summarize: " << printable(out) << ": " << entries.size() << " trace files\n";
  };
  try {
    if (!a.every_host) {
      Summarized s = summarize_files(files, lo);
      if (!s.entries.empty()) write(host, s.entries);
      not_covered = std::move(s.not_covered);
    } else {
      summarize_every_host(a.dir, files, lo, write, not_covered);
    }
  } catch (const LoadError& e) {
    std::cerr << "lockstep summarize: " << printable_lines(e.what()) << "\n";
    return kExitUsage;
  }
  for (const SkippedFile& f : not_covered)
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
