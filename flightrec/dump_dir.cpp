// Directories of Flight Recorder dumps: detection by content, conversion, the loader's hook.
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "flightrec.h"
#include "file_io.h"
#include "file_name.h"
#include "meta_keys.h"
#include "trace_schema.h"

namespace fs = std::filesystem;

namespace lockstep::flightrec {
namespace {

// `lockstep import` writes the dumps it could not convert here, beside the trace files, so the
// imported directory says what its source directory says: those dumps are evidence not read.
constexpr const char* kImportSkippedFile = "lockstep-fr-import-skipped.json";

// The skipped dumps an import recorded in `dir` (none when it has no such file). A record that
// cannot be read is itself named: never silent.
void read_import_skipped(const std::string& dir, std::vector<SkippedFile>& out) {
  const fs::path path = fs::path(dir) / kImportSkippedFile;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec)) && !fs::exists(path, ec)) return;
  try {
    std::string why;
    // Not a regular file (a FIFO would block), or larger than any import writes: unreadable.
    const auto text = schema::read_regular_file(path.string(), 64u << 20, &why);
    if (!text) throw std::runtime_error(why);
    const auto j = nlohmann::json::parse(*text);
    for (const auto& e : j.at("skipped"))
      out.push_back({e.at("path").get<std::string>(), "(lockstep import) " + e.at("reason").get<std::string>()});
  } catch (const std::exception& e) {
    out.push_back({path.string(), std::string("lockstep import's list of skipped Flight Recorder dumps is unreadable: ") + e.what()});
  }
}

void write_import_skipped(const std::string& dir, const std::vector<SkippedFile>& skipped) {
  const fs::path path = fs::path(dir) / kImportSkippedFile;
  std::error_code ec;
  if (skipped.empty()) {
    fs::remove(path, ec);
    return;
  }
  nlohmann::json j;
  j["skipped"] = nlohmann::json::array();
  for (const SkippedFile& sk : skipped) j["skipped"].push_back({{"path", sk.path}, {"reason", sk.reason}});
  // Renamed into place: a link planted under the name is replaced, not written through.
  schema::write_file_replacing(path.string(), j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

// Candidate files: regular files directly in `dir` whose first bytes are a pickle PROTO or '{'.
std::vector<std::string> candidates(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::string suffix = schema::kFileSuffix;
  // lockstep's own node summaries (analyzer/node_summary.h kSummarySuffix, a magic of their own)
  // are no dump: not opened (one a node, 2,048 at 16,384 ranks).
  const std::string summary = ".lockstep-summary";
  auto ends_with = [](const std::string& n, const std::string& end) {
    return n.size() > end.size() && n.compare(n.size() - end.size(), end.size(), end) == 0;
  };
  for (auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || name.find(suffix) != std::string::npos || ends_with(name, summary) ||
        name == kImportSkippedFile)
      continue;
    if (!e.is_regular_file(ec)) continue;
    std::ifstream in(e.path(), std::ios::binary);
    char head[64] = {};
    in.read(head, sizeof head);
    if (sniff(std::string_view(head, static_cast<size_t>(in.gcount()))) != Format::kNone) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A candidate too large to read: a pickle, or JSON whose first 64 KiB name a dump's keys.
bool looks_like_dump(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(1 << 16, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return sniff(std::string_view(head).substr(0, 64)) == Format::kPickle || head.find("\"pg_config\"") != std::string::npos ||
         head.find("\"entries\"") != std::string::npos;
}

std::string slurp(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DumpError("cannot open");
  std::string s;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    s.append(buf, static_cast<size_t>(in.gcount()));
    if (s.size() > limit) throw DumpError("larger than " + std::to_string(limit) + " bytes");
  }
  return s;
}

}  // namespace

DirDumps load_dir(const std::string& dir) {
  DirDumps out;
  Limits lim;
  std::vector<FrDump> dumps;
  for (const std::string& path : candidates(dir)) {
    // Over the limit: named as skipped without being read (reading it would cost its size in
    // memory first). A pickle is a dump; a JSON file only if its head says so.
    std::error_code ec;
    if (const auto size = fs::file_size(path, ec); !ec && size > lim.max_input_bytes) {
      if (looks_like_dump(path)) {
        out.dump_files.push_back(path);
        out.skipped.push_back({path, "Flight Recorder dump skipped: " + std::to_string(size) + " bytes, over the reader's limit of " +
                                         std::to_string(lim.max_input_bytes)});
      }
      continue;
    }
    std::string bytes;
    try {
      bytes = slurp(path, lim.max_input_bytes);
      dumps.push_back(read_dump(bytes, path, lim));
    } catch (const DumpError& e) {
      // A JSON file that is not a dump at all (a report, a timeline) is not evidence: ignore it.
      std::string why = e.what();
      // Grown past the limit since it was measured: named like one that was too large then.
      if (bytes.empty() && why.rfind("larger than", 0) == 0 && looks_like_dump(path)) {
        out.dump_files.push_back(path);
        out.skipped.push_back({path, "Flight Recorder dump skipped: " + why + ", over the reader's limit"});
        continue;
      }
      bool pickle = sniff(std::string_view(bytes).substr(0, 64)) == Format::kPickle;
      if (!pickle && bytes.find("\"pg_config\"") == std::string::npos && bytes.find("\"entries\"") == std::string::npos) continue;
      out.dump_files.push_back(path);
      out.skipped.push_back({path, "Flight Recorder dump unreadable: " + why});
      continue;
    }
    out.dump_files.push_back(path);
  }
  std::map<int, std::string> seen;
  for (auto& d : dumps) {
    int rank = rank_from_file_name(d.path);
    if (rank >= 0 && seen.count(rank)) {
      out.skipped.push_back({d.path, "Flight Recorder dump: a second dump of rank " + std::to_string(rank) + " (first: " + seen[rank] + ")"});
      continue;
    }
    try {
      out.processes.push_back(to_process(d, rank));
      if (rank >= 0) seen[rank] = d.path;
    } catch (const DumpError& e) {
      out.skipped.push_back({d.path, std::string("Flight Recorder dump: ") + e.what()});
    }
  }
  read_import_skipped(dir, out.skipped);
  align_windows(out.processes);
  std::sort(out.processes.begin(), out.processes.end(), [](const Process& a, const Process& b) {
    return std::make_pair(a.global_rank, a.path) < std::make_pair(b.global_rank, b.path);
  });
  return out;
}

namespace {

std::string trace_name(const std::string& dump_path) {
  return schema::safe_file_component(fs::path(dump_path).filename().string()) + schema::kFileSuffix;
}

}  // namespace

std::vector<std::string> import_dir(const std::string& src, const std::string& dst, std::vector<SkippedFile>& skipped) {
  DirDumps d = load_dir(src);
  skipped = d.skipped;
  std::vector<std::string> files;
  if (d.processes.empty()) return files;  // nothing to write: no empty directory left behind
  fs::create_directories(dst);
  write_import_skipped(dst, skipped);
  for (auto& p : d.processes) {
    std::string out = (fs::path(dst) / trace_name(p.path)).string();
    write_trace_file(p, out);
    files.push_back(out);
  }
  return files;
}

namespace {

// Converted directories of this run, removed at exit.
struct TempDirs {
  std::mutex mu;
  std::map<std::string, std::pair<std::string, Converted>> by_dir;
  ~TempDirs() {
    for (auto& [dir, v] : by_dir) {
      std::error_code ec;
      fs::remove_all(v.first, ec);
    }
  }
};
TempDirs& temp_dirs() {
  static TempDirs t;
  return t;
}

}  // namespace

Converted converted_trace_files(const std::string& dir) {
  std::error_code ec;
  std::string key = fs::weakly_canonical(dir, ec).string();
  auto& t = temp_dirs();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.by_dir.find(key);
  if (it != t.by_dir.end()) return it->second.second;
  Converted c;
  DirDumps d = load_dir(dir);
  c.skipped = d.skipped;
  if (d.dump_files.empty()) return c;
  std::string tmpl = (fs::temp_directory_path(ec) / "lockstep-fr-XXXXXX").string();
  if (ec || !mkdtemp(tmpl.data())) {
    for (auto& p : d.processes) c.skipped.push_back({p.meta[schema::meta::kFrDumpFile], "no temporary directory to convert the Flight Recorder dump in"});
    return c;
  }
  for (auto& p : d.processes) {
    std::string out = (fs::path(tmpl) / trace_name(p.path)).string();
    try {
      write_trace_file(p, out);
      c.trace_files.push_back(out);
    } catch (const std::exception& e) {
      c.skipped.push_back({p.meta[schema::meta::kFrDumpFile], std::string("Flight Recorder dump: ") + e.what()});
    }
  }
  // What FR cannot tell, once per run, on stderr (reports are on stdout).
  std::cerr << "lockstep: read " << d.processes.size() << " PyTorch Flight Recorder dump(s) from " << dir
            << " (docs/flight-recorder.md): a ring window of each rank's recent ops; no reduction op, no root, "
               "no all_to_all split sizes; point-to-point ops sequenced apart from collectives (seq "
            << kP2PSeqBase << "+n)\n";
  t.by_dir[key] = {tmpl, c};
  return c;
}

}  // namespace lockstep::flightrec
