// lockstep analyze DIR: first divergence, order inversions, hang explanation.
#include <algorithm>
#include <fstream>
#include <iostream>

#include "analyze_common.h"
#include "commands.h"
#include "exit_codes.h"
#include "step_timer.h"
#include "steps.h"
#include "summary_read.h"

namespace lockstep::cli {

bool write_file(const std::string& cmd, const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();  // the write's error shows at the flush (a full disk: ENOSPC at close)
  if (!out) {
    std::cerr << "lockstep " << cmd << ": cannot write " << printable(path) << "\n";
    return false;
  }
  return true;
}

namespace {

struct AnalyzeArgs {
  std::string dir;
  bool json = false;
  std::string junit;
  double stale_s = 10;
  bool timing = false;
  ReadArgs read;
};

int analyze_dir(const AnalyzeArgs& a) {
  StepTimer timer("analyze", a.timing);
  auto s = load_for_analysis("analyze", a.dir, read_summary_first(a.dir, a.read), a.read.threads);
  if (!s) return kExitUsage;
  timer.step("load");
  AnalyzeOptions opt;
  opt.hang.stale_ns = static_cast<int64_t>(a.stale_s * 1e9);
  Analysis an = analyze(*s, opt);
  timer.step("analyse");
  auto details = details_from_files(*s);
  ReportOptions ro;
  ro.color = !a.json && stdout_color();
  const UnreadSummary unread = unread_summary(*s, an);
  const StepPlace place = locate_in_steps(an);
  auto line = [](const std::string& l) { return l.empty() ? l : l + "\n"; };
  if (a.json)  // written as it is made: at 131,072 ranks the report is 200 MB
    write_json(an, *details, ro, [&](std::string r) { return add_steps_json(add_unread_json(std::move(r), unread), an, place); },
               [](std::string_view t) { std::cout.write(t.data(), static_cast<std::streamsize>(t.size())); });
  else
    std::cout << render_text(an, *details, ro) + line(steps_text(an, place)) + line(unread_text(unread));
  std::cout.flush();
  timer.step("report");
  if (!a.junit.empty() && !write_file("analyze", a.junit, render_junit("lockstep analyze " + a.dir, junit_cases(an, false))))
    return kExitUsage;
  return analyze_exit_code(an);
}

}  // namespace

void add_analyze_command(Command& app, int* exit_code) {
  auto args = std::make_shared<AnalyzeArgs>();
  auto* sub = app.add_subcommand("analyze", "Find the first divergence, order inversions and hangs in a trace directory");
  sub->add_option("dir", args->dir, "Trace directory (lockstep run -o DIR)")->required();
  sub->add_flag("--json", args->json, "Machine-readable report (schema: docs/analyzer.md)");
  sub->add_option("--junit", args->junit, "Also write JUnit XML to FILE");
  sub->add_option("--stale-seconds", args->stale_s,
                  "A process whose trace stopped this long before its host neighbours' is dead (default 10)");
  add_read_options(sub, args->read);
  sub->add_flag("--timing", args->timing, "Print how long loading, analysis and the report took: wall, CPU, peak RSS (stderr)");
  sub->footer("Exit code: 0 clean, 1 problem found, 2 input error, 4 incomplete evidence (also: a live job whose "
              "ranks are only behind, not proven clean yet; a summary-first read's unread order). Works while the job "
              "still runs or hangs.");
  sub->callback([args, exit_code] { *exit_code = analyze_dir(*args); });
}

}  // namespace lockstep::cli
