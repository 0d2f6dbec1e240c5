// Fuzz target for everything the CLI does with a trace, in process: the input bytes become the
// trace files of a fresh directory (split at each SQLite header, sql_mutator.h; a part that
// starts like a PyTorch Flight Recorder dump, pickle or JSON, is written as one, so the FR
// importer is fuzzed too), then analyze, analyze --json, check, stacks, ops, timeline -o,
// timeline --text, replay --model and report -o run on it through the CLI's own command code. A crash, an abort (an exception the CLI lets escape),
// a sanitizer report, a hang (libFuzzer -timeout), invalid JSON output or output that is not
// printable text (a control character or malformed UTF-8: terminal injection) is a finding.
//
// Built two ways (tests/fuzz/CMakeLists.txt): with clang -fsanitize=fuzzer as a libFuzzer
// target (scripts/fuzz.sh), and with the default compiler as a replayer of files (the committed
// corpus and the regression inputs run in every ctest).
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "dump.h"
#include "sql_mutator.h"
#include "trace_loader.h"

namespace fs = std::filesystem;

namespace {

// A command's stdout and stderr, captured (and kept off the fuzzer's console).
struct Capture {
  std::stringstream out, err;
  std::streambuf* old_out;
  std::streambuf* old_err;
  Capture() : old_out(std::cout.rdbuf(out.rdbuf())), old_err(std::cerr.rdbuf(err.rdbuf())) {}
  ~Capture() {
    std::cout.rdbuf(old_out);
    std::cerr.rdbuf(old_err);
  }
};

bool verbose() {
  static bool v = std::getenv("LOCKSTEP_FUZZ_VERBOSE") != nullptr;
  return v;
}

[[noreturn]] void finding(const std::vector<std::string>& args, const std::string& what, const std::string& output) {
  std::fprintf(stderr, "lockstep fuzz finding: lockstep");
  for (size_t i = 1; i < args.size(); ++i) std::fprintf(stderr, " %s", args[i].c_str());
  std::fprintf(stderr, "\n  %s\n  output (first 400 bytes): %.400s\n", what.c_str(), output.c_str());
  std::abort();
}

// Runs one CLI command line exactly as main.cpp dispatches it; returns its exit code.
int run_cli(const std::vector<std::string>& args, std::string* out, std::string* err) {
  lockstep::Command app{"lockstep", "lockstep"};
  int exit_code = 0;
  lockstep::cli::add_analyze_command(app, &exit_code);
  lockstep::cli::add_check_command(app, &exit_code);
  lockstep::cli::add_stacks_command(app, &exit_code);
  lockstep::cli::add_ops_command(app, &exit_code);
  lockstep::cli::add_replay_command(app, &exit_code);
  lockstep::cli::add_timeline_command(app, &exit_code);
  lockstep::cli::add_report_command(app, &exit_code);
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  Capture cap;
  // A usage error is exit code 2, as main.cpp answers it. Exceptions of the commands are not
  // caught: the CLI would abort on them (exit 134).
  if (auto code = app.parse(static_cast<int>(argv.size()), argv.data(), 2)) exit_code = *code;
  *out = cap.out.str();
  *err = cap.err.str();
  if (verbose()) {
    std::string line;
    for (auto& a : args) line += a + " ";
    std::fprintf(stderr, "%s-> %d\n%s%s", line.c_str(), exit_code, out->c_str(), err->c_str());
  }
  return exit_code;
}

void expect_exit(const std::vector<std::string>& args, int rc, const std::string& out) {
  if (rc < 0 || rc > 5) finding(args, "exit code " + std::to_string(rc) + " outside 0..5", out);
}

// What a terminal shows: every string a trace brings is made printable (text_escape.h): the
// output is well-formed UTF-8 without C0 controls (but newline and tab), DEL or C1 controls, so
// no escape sequence from a file reaches the terminal (written raw, 0x9b is CSI on an 8-bit one).
void expect_printable(const std::vector<std::string>& args, const std::string& text, const char* stream) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; ok && k < n; ++k) {
      const unsigned char b = static_cast<unsigned char>(text[i + k]);
      ok = (b & 0xc0) == 0x80;
      cp = (cp << 6) | (b & 0x3f);
    }
    if (ok && ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)))
      ok = false;  // overlong, surrogate, past U+10FFFF
    if (ok && ((cp < 0x20 && cp != '\n' && cp != '\t') || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f))) ok = false;
    if (!ok) {
      char at[96];
      std::snprintf(at, sizeof at, "%s: byte 0x%02x at offset %zu is not printable text", stream, c, i);
      finding(args, at, text.substr(i > 100 ? i - 100 : 0, 400));
    }
    i += n;
  }
}

void expect_json(const std::vector<std::string>& args, const std::string& text) {
  if (!nlohmann::json::accept(text)) finding(args, "output is not valid JSON", text);
}

// What the input's trace headers offer to point stacks/ops at (a comm prefix, a seq, a rank).
struct Target {
  std::string comm = "0";
  int64_t seq = 1;
  int rank = 0;
};

Target pick_target(const std::string& dir, const uint8_t* data, size_t size) {
  Target t;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; i += 97) h = (h ^ data[i]) * 1099511628211ull;
  t.seq = static_cast<int64_t>(h % 8) + 1;
  try {
    std::ostringstream sink;
    // Restored even when loading throws: a std::cerr left on the dead `sink` crashed libFuzzer's
    // exit (ios_base::Init's flush) after a clean 60 s run.
    struct Restore {
      std::streambuf* old;
      ~Restore() { std::cerr.rdbuf(old); }
    } restore{std::cerr.rdbuf(sink.rdbuf())};
    const lockstep::Schedule tr = lockstep::load_headers(dir);
    for (auto& sp : tr.procs) {
      const lockstep::Process& p = sp.info;
      if (p.global_rank >= 0) t.rank = p.global_rank;
      if (!p.comms.empty()) {
        const auto& c = p.comms[(h >> 8) % p.comms.size()];
        t.comm = c.hash.substr(0, 8);
        break;
      }
    }
  } catch (const std::exception&) {
  }
  return t;
}

void run_everything(const std::string& dir, const uint8_t* data, size_t size) {
  Target t = pick_target(dir, data, size);
  std::string timeline = dir + ".timeline.json";
  std::string out, err;
  auto cmd = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "lockstep");
    int rc = run_cli(args, &out, &err);
    expect_exit(args, rc, out);
    expect_printable(args, out, "stdout");
    expect_printable(args, err, "stderr");
    return std::make_pair(args, rc);
  };
  cmd({"analyze", dir});
  auto [json_args, json_rc] = cmd({"analyze", dir, "--json"});
  if (json_rc != 2) expect_json(json_args, out);
  cmd({"check", dir});
  cmd({"stacks", dir, "--comm", t.comm, "--seq", std::to_string(t.seq)});
  cmd({"ops", dir, "--rank", std::to_string(t.rank)});
  cmd({"ops", dir, "--rank", std::to_string(t.rank), "--around", std::to_string(t.seq), "--comm", t.comm});
  fs::remove(timeline);
  auto [tl_args, tl_rc] = cmd({"timeline", dir, "-o", timeline});
  if (tl_rc == 0) {
    std::ifstream in(timeline, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    expect_json(tl_args, ss.str());
  }
  fs::remove(timeline);
  cmd({"timeline", dir, "--text"});
  auto [model_args, model_rc] = cmd({"replay", dir, "--model", "--json"});
  if (model_rc != 2) expect_json(model_args, out);
  cmd({"replay", dir, "--model"});
  std::string page = dir + ".report.html";
  fs::remove(page);
  cmd({"report", dir, "-o", page});
  fs::remove(page);
}

std::string scratch_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = std::string(tmp && *tmp ? tmp : "/tmp") + "/lockstep-fuzz-" + std::to_string(getpid());
  return base;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = scratch_dir();
  // The FR importer converts a directory once per process and caches it by path (dump_dir.cpp):
  // each input gets a directory of its own, and the conversions land under `root` (TMPDIR),
  // removed with it.
  static const bool tmp_set = setenv("TMPDIR", (root + "/tmp").c_str(), 1) == 0;
  static uint64_t inputs = 0;
  std::string dir = root + "/traces" + std::to_string(inputs++);
  std::error_code ec;
  fs::remove_all(root, ec);
  fs::create_directories(dir);
  if (tmp_set) fs::create_directories(root + "/tmp");
  auto files = lockstep::fuzz::split_files(data, size);
  if (files.size() > 8) files.resize(8);
  for (size_t i = 0; i < files.size(); ++i) {
    // Named as torch names FR dumps (the rank is the name's number), else as a trace file.
    std::string_view bytes = lockstep::fuzz::file_bytes(files[i]);
    bool fr = lockstep::flightrec::sniff(bytes.substr(0, 64)) != lockstep::flightrec::Format::kNone;
    std::ofstream f(dir + (fr ? "/nccl_trace_rank_" + std::to_string(i) : "/rank" + std::to_string(i) + ".lockstep.sqlite"),
                    std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  run_everything(dir, data, size);
  fs::remove_all(root, ec);
  return 0;
}

#ifdef LOCKSTEP_LIBFUZZER
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Half of the time a byte-level mutation (libFuzzer's own), half of the time 1-3 SQL mutations of
// one of the input's files; both when the SQL route cannot open the file.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::mt19937_64 rng(seed);
  if (rng() % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  auto files = lockstep::fuzz::split_files(data, size);
  if (files.empty()) return LLVMFuzzerMutate(data, size, max_size);
  size_t which = rng() % files.size();
  if (!lockstep::fuzz::mutate_sqlite(files[which], rng, 1 + static_cast<int>(rng() % 3)))
    return LLVMFuzzerMutate(data, size, max_size);
  std::string joined = lockstep::fuzz::join_files(files);
  if (joined.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, joined.data(), joined.size());
  return joined.size();
}
#else
// Replayer: runs every file given (or every file in every directory given) once.
int main(int argc, char** argv) {
  int n = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<fs::path> inputs;
    if (fs::is_directory(argv[i])) {
      for (auto& e : fs::directory_iterator(argv[i]))
        if (e.is_regular_file() && e.path().extension() != ".md") inputs.push_back(e.path());
      std::sort(inputs.begin(), inputs.end());
    } else {
      inputs.push_back(argv[i]);
    }
    for (auto& p : inputs) {
      std::ifstream in(p, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::fprintf(stderr, "running %s (%zu bytes)\n", p.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++n;
    }
  }
  std::fprintf(stderr, "%d inputs ran without a finding\n", n);
  return n > 0 ? 0 : 1;
}
#endif
