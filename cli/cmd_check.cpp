// lockstep check DIR: the CI gate. Ranks must agree (no divergence, no order inversion, no hang)
// and, with --baseline, the canonical schedule must equal the blessed one.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

#include "analyze_common.h"
#include "baseline.h"
#include "commands.h"
#include "exit_codes.h"
#include "file_io.h"
#include "identity.h"
#include "summary_read.h"

namespace lockstep::cli {
namespace {

std::string indent(const std::string& text, const std::string& by) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t e = text.find('\n', i);
    if (e == std::string::npos) e = text.size();
    out += by + text.substr(i, e - i) + "\n";
    i = e + 1;
  }
  return out;
}

struct CheckArgs {
  std::string dir;
  std::string baseline;
  std::string write_baseline;
  std::string junit;
  ReadArgs read;
  mutable bool junit_written = false;
};

// A baseline's canonical schedule is run-length encoded: far below this for any job.
constexpr size_t kMaxBaselineBytes = size_t(1) << 30;

int check_dir(const CheckArgs& a) {
  std::string expected;
  if (!a.baseline.empty()) {
    // Untrusted (a pull request can change it, into a link to /dev/zero or a FIFO): a regular
    // file of bounded size, or not read.
    std::string why;
    auto text = schema::read_regular_file(a.baseline, kMaxBaselineBytes, &why);
    if (!text) {
      std::cerr << "lockstep check: cannot read baseline " << printable(a.baseline) << ": " << printable(why) << "\n";
      return kExitUsage;
    }
    expected = std::move(*text);
    if (expected.rfind(kBaselineHeader, 0) != 0) {
      std::cerr << "lockstep check: " << printable(a.baseline) << " is not a lockstep baseline (first line must be '"
                << kBaselineHeader << "')\n";
      return kExitUsage;
    }
  }
  // Every row up to 1 GiB of traces, summary first above (read_summary_first); a baseline's
  // canonical schedule (every collective of every rank) is then read a batch of files at a time,
  // below.
  const bool full_read = !read_summary_first(a.dir, a.read);
  auto s = load_for_analysis("check", a.dir, !full_read, a.read.threads);
  if (!s) return kExitUsage;
  Analysis an = analyze(*s);
  // The canonical schedule only for a baseline: from the rows already read, else every row of
  // 256 MiB of files at a time (16,384 ranks x 10,000 ops at once: 4.1 GiB). Not for a
  // --write-baseline alone that the verdict refuses (below): at 16,384 x 10,000 that read was
  // 25 s for a file never written.
  // After a summary-first read whose unread order and all-to-alls are proven, the files the
  // digests prove alike are read once (canonical_schedule_proven).
  CanonicalText actual;
  if (!a.baseline.empty() || (!a.write_baseline.empty() && check_exit_code(an) == kExitOk)) {
    try {
      const UnreadSummary unread = full_read ? UnreadSummary{} : unread_summary(*s, an);
      std::optional<CanonicalText> proven;
      if (!full_read && unread.ops_not_read > 0 && unread.order_proven && unread.all_to_all_proven)
        proven = canonical_schedule_proven(*s, an.index);
      actual = full_read ? canonical_schedule(an) : proven ? std::move(*proven) : canonical_schedule_of_files(*s, an.index);
    } catch (const LoadError& e) {
      std::cerr << "lockstep check: " << printable(e.what()) << "\n";
      return kExitUsage;
    }
  }
  // Ranks that disagree have no one schedule: the canonical one is one rank's, so a match
  // against the baseline says nothing about the others (a difference is still a difference).
  const bool disagree = !an.divergences.empty() || !an.inversions.empty();
  BaselineDiff diff;
  if (!a.baseline.empty()) diff = compare_baseline(expected, actual.text);
  // A summary-first read leaves each rank's order across communicators before the cuts unread
  // (kOrderNotRead). The canonical schedule holds every rank's order of every collective, by
  // family: equal to a baseline, that order is proven only where it cannot hide an inversion.
  // That is one order section for every rank (each issued the same sequence of families) and no
  // rank with two communicators of one family (a family sequence is then a communicator
  // sequence, the same on every rank: no pair can be issued both ways). A clean baseline can
  // hold several orders (grouped calls, ranks that share no pair of communicators) or name two
  // communicators alike (one commName), and then a swapped pair would match it.
  auto one_order_of_distinct_communicators = [&] {
    // Ranks whose order the size cap retired: not in any section.
    if (actual.order_groups != 1 || actual.order_windowed) return false;
    for (const SchedProcess& p : s->procs) {
      std::vector<std::string> families = comm_families(p.info);
      std::sort(families.begin(), families.end());
      if (std::adjacent_find(families.begin(), families.end()) != families.end()) return false;
    }
    return true;
  };
  bool order_by_baseline = false;
  if (!a.baseline.empty() && !disagree && diff.equal && !diff.partial && one_order_of_distinct_communicators())
    order_by_baseline =
        std::erase_if(an.evidence, [](const EvidenceIssue& e) { return e.kind == EvidenceKind::kOrderNotRead; }) > 0;
  std::vector<JUnitCase> cases = junit_cases(an, true);
  int rc = check_exit_code(an);
  // A baseline sharing no collective with this run on some communicator (capped runs) verifies
  // nothing there: 4, decided before anything is printed, so no line calls the run clean.
  const bool baseline_unverified = !a.baseline.empty() && !disagree && diff.equal && diff.partial;
  if (baseline_unverified && rc == kExitOk) rc = kExitIncomplete;
  const std::string base = printable(a.baseline);
  if (baseline_unverified && !an.problems() && !an.incomplete() && !an.behind()) {
    std::cout << "lockstep check: incomplete: baseline " << base << " not verified (below); the ranks themselves: "
              << summary_line(an, true) << "\n";
  } else if (rc != kExitOk) {
    auto details = details_from_files(*s);
    ReportOptions ro;
    ro.color = stdout_color();
    ro.require_finished = true;
    std::cout << render_text(an, *details, ro);
  } else if (!a.baseline.empty() && !disagree && !diff.equal) {
    // The ranks agree, the run is not the blessed one: exit 3, never worded "clean".
    std::cout << "lockstep check: schedule differs from baseline " << base << " (below); the ranks themselves: "
              << summary_line(an, true) << "\n";
  } else {
    std::cout << "lockstep check: " << summary_line(an) << "\n";
  }
  if (const std::string unread = unread_text(unread_summary(*s, an)); !unread.empty()) std::cout << unread << "\n";
  if (order_by_baseline)
    std::cout << "lockstep check: the order across communicators before the cuts was read with the canonical schedule "
                 "and is the baseline's\n";
  // The baseline file is untrusted (a pull request can change it): its bytes reach the
  // terminal escaped (printable), as every trace's do.
  if (!a.baseline.empty() && disagree && diff.equal) {
    cases.push_back({"matches_baseline", "not compared with " + a.baseline + ": the ranks disagree", ""});
    std::cout << "lockstep check: baseline " << base
              << " not compared: the ranks disagree (above), so this run has no one schedule\n";
  } else if (!a.baseline.empty()) {
    const char* kUnverified = " not verified: some communicator has no collective in common with it";
    cases.push_back({"matches_baseline",
                     !diff.equal      ? "schedule differs from " + a.baseline + "\n" + diff.text
                     : diff.partial ? "baseline " + a.baseline + kUnverified + "\n" + diff.compared
                                    : "",
                     ""});
    // Capped runs: what each side holds of each communicator, and what was compared.
    if (!diff.compared.empty())
      std::cout << "lockstep check: retained windows (by collective ordinal) against " << base << ":\n"
                << printable_lines(indent(diff.compared, "  "));
    if (diff.equal && diff.partial) {
      std::cout << "lockstep check: baseline " << base << kUnverified << " (see above)\n";
    } else if (diff.equal) {
      // The files read match; on incomplete evidence (a rank missing, two jobs in DIR) that is
      // not the run matching (exit 4 above).
      std::cout << "lockstep check: schedule matches baseline " << base
                << (diff.compared.empty() ? "" : " on the collectives both hold")
                << (an.incomplete() ? ", for the files read only: the evidence is incomplete (above)" : "") << "\n";
    } else {
      std::cout << "lockstep check: schedule differs from baseline " << base << " (- baseline, + this run):\n"
                << printable_lines(diff.text);
      if (rc == kExitOk) rc = kExitBaseline;
    }
  }
  if (!a.write_baseline.empty()) {
    if (rc != kExitOk && rc != kExitBaseline) {  // a new schedule may replace the old baseline
      std::vector<std::string> why;
      if (disagree) why.push_back("the ranks disagree");
      if (an.hang.hung) why.push_back("the job hung");
      if (an.incomplete()) why.push_back("the evidence is incomplete");
      if (!an.live.empty() || an.behind()) why.push_back("the job is still running");
      if (why.empty()) why.push_back("the check failed");
      std::string list;
      for (size_t i = 0; i < why.size(); ++i) list += (i ? (i + 1 == why.size() ? " and " : ", ") : "") + why[i];
      std::cerr << "lockstep check: " << list << "; not writing a baseline from this run\n";
    } else {
      if (!write_file("check", a.write_baseline, actual.text)) return kExitUsage;
      std::cout << "lockstep check: wrote baseline " << printable(a.write_baseline) << " (review and commit it)\n";
    }
  }
  if (!a.junit.empty()) {
    a.junit_written = true;
    if (!write_file("check", a.junit, render_junit("lockstep check " + a.dir, cases))) return kExitUsage;
  }
  return rc;
}

}  // namespace

void add_check_command(Command& app, int* exit_code) {
  auto args = std::make_shared<CheckArgs>();
  auto* sub = app.add_subcommand("check", "CI gate: fail when ranks' collective order disagrees or differs from a baseline");
  sub->add_option("dir", args->dir, "Trace directory")->required();
  // An empty path ("--baseline \"$UNSET\"" in a CI script) would turn the comparison off.
  auto named = [](const std::string& v) { return v.empty() ? std::string("needs a file name, not an empty one") : ""; };
  sub->add_option("--baseline", args->baseline, "Compare the canonical schedule with this baseline file")->check(named);
  sub->add_option("--write-baseline", args->write_baseline, "Write this run's canonical schedule (bless it)")->check(named);
  sub->add_option("--junit", args->junit, "Also write JUnit XML to FILE")->check(named);
  add_read_options(sub, args->read);
  sub->footer("Exit code: 0 pass, 1 ranks disagree or hang, 2 input error, 3 differs from the baseline, "
              "4 incomplete evidence (a rank's history missing, torn, skipped, dropped, or the job still running).");
  sub->callback([args, exit_code] {
    *exit_code = check_dir(*args);
    // A check that could not run (exit 2) leaves a JUnit file that says so: a CI system that
    // reads only the XML must not find the last run's passing one.
    if (*exit_code == kExitUsage && !args->junit.empty() && !args->junit_written)
      write_file("check", args->junit,
                 render_junit("lockstep check " + args->dir,
                              {{"check_ran", "lockstep check could not run (exit 2: input error, said on stderr)", ""}}));
  });
}

}  // namespace lockstep::cli
