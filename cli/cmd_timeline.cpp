// lockstep timeline DIR -o FILE.json | --text: the trace as a Perfetto/Chrome timeline, or a
// terminal view of a window of seqs on one communicator (docs/timeline.md).
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "analysis_render.h"
#include "analyze_common.h"
#include "commands.h"
#include "exit_codes.h"
#include "hang.h"
#include "identity.h"
#include "text_escape.h"
#include "timeline.h"
#include "trace_validation.h"

namespace lockstep::cli {
namespace {

struct TimelineArgs {
  std::string dir;
  std::string output;
  std::vector<int> ranks;
  std::vector<std::string> ranks_text;  // --ranks as given: "0-7", "9"
  std::string comm;
  int64_t from_seq = 0;
  int64_t to_seq = 0;
  bool text = false;
  int64_t around = -1;
  int window = 5;
  int64_t large_mb = 256;
};

// The evidence of what was read, as lines (timeline_evidence: the same items otherData.evidence holds).
std::vector<std::string> evidence_of(const Schedule& headers, const std::vector<SkippedFile>& unread) {
  std::vector<std::string> out;
  for (auto& g : group_evidence(timeline_evidence(headers, unread))) out.push_back(g.detail);
  return out;
}

int timeline(TimelineArgs a) {
  if (std::string why; !parse_rank_ranges(a.ranks_text, a.ranks, why)) {
    std::cerr << "lockstep timeline: --ranks: " << why << "\n";
    return kExitUsage;
  }
  if (a.to_seq > 0 && a.from_seq > a.to_seq) {
    std::cerr << "lockstep timeline: --from-seq " << a.from_seq << " is after --to-seq " << a.to_seq << "\n";
    return kExitUsage;
  }
  if (a.text && a.around > 0 && (a.from_seq > 0 || a.to_seq > 0)) {
    std::cerr << "lockstep timeline: give --around or --from-seq/--to-seq, not both\n";
    return kExitUsage;
  }
  if (a.text) {
    auto s = load_for_analysis("timeline", a.dir);
    if (!s) return kExitUsage;
    Analysis an = analyze(*s);
    TextTimelineOptions o;
    o.comm = a.comm;
    o.around = a.around;
    o.window = a.window;
    o.from_seq = a.from_seq;
    o.to_seq = a.to_seq;
    o.ranks = a.ranks;
    o.unicode = isatty(STDOUT_FILENO);
    TextTimelineInfo shown;
    try {
      std::cout << timeline_text(an, o, &shown);
    } catch (const TimelineError& e) {
      std::cerr << "lockstep timeline: " << printable_lines(e.what()) << "\n";
      return kExitUsage;
    }
    // The analysis's own evidence, as analyze names it (skipped, missing, contradictory, dropped,
    // stopped, histories lost, holes), and the ranks behind or lost that it cannot prove.
    for (auto& g : group_evidence(an.evidence)) std::cerr << "incomplete: " << printable(g.detail) << "\n";
    for (auto& u : an.unproven)
      if (u.noted()) std::cerr << "incomplete: " << printable(render::unproven_line(an, u)) << "\n";
    // A cell shown unknown is evidence missing (as stacks exits 4 for it), whatever the analysis's
    // verdict says of the rest.
    return an.incomplete() || an.behind() || shown.unknown_shown ? kExitIncomplete : kExitOk;
  }
  if (a.output.empty()) {
    std::cerr << "lockstep timeline: give -o FILE.json (or -o - for stdout), or --text\n";
    return kExitUsage;
  }
  // The headers of every file, then one process's rows at a time (memory: one process, not the
  // directory). With --ranks, only those ranks' rows are read.
  std::optional<Schedule> loaded = load_or_explain(
      "timeline", a.dir, [](const std::string& d) { return load_headers(d, {.use_summaries = true}); }, "; nothing written");
  if (!loaded) return kExitUsage;
  const Schedule& headers = *loaded;
  const ProcessRows rows = [&](size_t i) { return load_process_file(headers.procs[i].info.path); };
  // The timeline shows what was read; what was not is named on stderr and in the exit code.
  auto report = [&](const std::vector<SkippedFile>& unread) {
    auto evidence = evidence_of(headers, unread);
    for (auto& line : evidence) std::cerr << "incomplete: " << printable(line) << "\n";
    return evidence.empty() ? kExitOk : kExitIncomplete;
  };
  TimelineOptions o;
  o.ranks = a.ranks;
  o.comm = a.comm;
  o.from_seq = a.from_seq;
  o.to_seq = a.to_seq;
  std::string tmp;
  std::vector<SkippedFile> unread;
  try {
    if (a.output == "-") return report(write_timeline_json(headers, rows, o, std::cout));
    // Validate the selection before creating the file: a bad --ranks leaves nothing behind.
    check_timeline_options(headers, o);
    // Written beside the target and renamed into place: a failure never leaves a partial file.
    // A target that exists and is not a regular file (/dev/null, a FIFO, a symbolic link) is
    // written through instead: renaming over it would replace the device or the link itself.
    struct stat st;
    const bool through = lstat(a.output.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
    if (!through) {
      tmp = a.output + ".partial-XXXXXX";
      int fd = mkstemp(tmp.data());
      if (fd < 0) {
        std::cerr << "lockstep timeline: cannot write " << printable(a.output) << "\n";
        return kExitUsage;
      }
      mode_t mask = umask(0);  // mkstemp creates 0600; the timeline gets the usual 0666 & ~umask
      umask(mask);
      fchmod(fd, 0666 & ~mask);
      close(fd);
    }
    std::ofstream file(through ? a.output : tmp, std::ios::binary | std::ios::trunc);
    if (!file) {
      if (!tmp.empty()) std::remove(tmp.c_str());
      std::cerr << "lockstep timeline: cannot write " << printable(a.output) << "\n";
      return kExitUsage;
    }
    unread = write_timeline_json(headers, rows, o, file);
    file.close();
    if (!file || (!through && std::rename(tmp.c_str(), a.output.c_str()) != 0)) {
      if (!tmp.empty()) std::remove(tmp.c_str());
      std::cerr << "lockstep timeline: writing " << printable(a.output) << " failed\n";
      return kExitUsage;
    }
  } catch (const std::exception& e) {
    if (!tmp.empty()) std::remove(tmp.c_str());
    std::cerr << "lockstep timeline: " << printable_lines(e.what()) << "\n";
    return kExitUsage;
  }
  const int done = report(unread);
  std::cerr << "wrote " << printable(a.output) << " (open it in https://ui.perfetto.dev or chrome://tracing)\n";
  // chrome://tracing gives up on a few hundred MB, and a browser tab holds ~2 GB at most.
  struct stat written;
  if (stat(a.output.c_str(), &written) == 0 && S_ISREG(written.st_mode) && written.st_size > a.large_mb * 1024 * 1024)
    std::cerr << "lockstep timeline: " << printable(a.output) << " is " << written.st_size / (1024 * 1024)
              << " MB, more than a browser tab loads well (chrome://tracing stops at a few hundred MB); "
                 "narrow it with --ranks, --comm or --from-seq/--to-seq, or open it with Perfetto's "
                 "trace_processor --httpd\n";
  return done;
}

}  // namespace

void add_timeline_command(Command& app, int* exit_code) {
  auto args = std::make_shared<TimelineArgs>();
  auto* sub = app.add_subcommand("timeline", "Timeline of every rank's ops: Perfetto/Chrome JSON (-o), or a text view (--text)");
  sub->footer("Exit code: 0 written, 2 input error, 4 written but the evidence is incomplete (each gap named on stderr and in the JSON's otherData.evidence; --text: also when a cell is shown unknown, '?').");
  sub->add_option("dir", args->dir, "Trace directory")->required();
  sub->add_option("-o,--output", args->output, "Write Chrome Trace Event JSON here ('-' = stdout)");
  sub->add_option("--ranks", args->ranks_text, "Only these global ranks (comma-separated ranks and ranges: 0-7,9)")->delimiter(',');
  sub->add_option("--comm", args->comm, "Only this communicator (hash prefix, role or name)");
  sub->add_option("--from-seq", args->from_seq, "Only ops with seq >= N (--text: the first row shown)")->positive();
  sub->add_option("--to-seq", args->to_seq, "Only ops with seq <= M (--text: the last row shown)")->positive();
  sub->add_flag("--text", args->text, "Print a text timeline: rows = seqs, one column per group of identical ranks");
  sub->add_option("--around", args->around, "--text: centre on this seq (default: the divergence, else the last seq)")
      ->positive();
  sub->add_option("--window", args->window, "--text: seqs shown on each side (default 5)")->range(0, 10000);
  sub->add_option("--large-mb", args->large_mb, "Above this size (MB) the JSON is called too large for a browser tab, "
                  "with how to narrow it (default 256)")->range(int64_t(0), int64_t(1) << 30);
  sub->callback([args, exit_code] { *exit_code = timeline(*args); });
}

}  // namespace lockstep::cli
