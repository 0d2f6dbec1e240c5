// lockstep report DIR -o job.html: the analysis as one self-contained HTML page (docs/report.md).
#include <filesystem>
#include <iostream>

#include "analyze_common.h"
#include "commands.h"
#include "exit_codes.h"
#include "step_timer.h"
#include "report.h"
#include "steps.h"
#include "summary_read.h"

namespace lockstep::cli {
namespace {

struct ReportArgs {
  std::string dir;
  std::string output;
  double stale_s = 10;
  bool timing = false;
  ReadArgs read;
};

int report_dir(const ReportArgs& a) {
  if (trace_files_in(a.dir).empty() && is_snapshot_dir(a.dir)) return report_snapshot_dir(a.dir, a.output);
  StepTimer timer("report", a.timing);
  auto s = load_for_analysis("report", a.dir, read_summary_first(a.dir, a.read), a.read.threads);
  if (!s) return kExitUsage;
  timer.step("load");
  AnalyzeOptions opt;
  opt.hang.stale_ns = static_cast<int64_t>(a.stale_s * 1e9);
  Analysis an = analyze(*s, opt);
  timer.step("analysis");
  auto details = details_from_files(*s);
  report::ReportOptions ro;
  if (a.output != "-") ro.timeline_json_hint = std::filesystem::path(a.output).stem().string() + ".timeline.json";
  // What was not read (summary first) and where the first divergence sits in the step, as in
  // analyze --json.
  const std::string data = add_steps_json(add_unread_json(report::report_data_json(an, *details, ro), unread_summary(*s, an), -1),
                                          an, locate_in_steps(an), -1);
  std::string page = report::render_page(data);
  if (a.output == "-") {
    std::cout << page;
    std::cout.flush();
  } else if (!write_file("report", a.output, page)) {
    return kExitUsage;
  }
  timer.step("page", std::to_string(page.size()) + " bytes");
  if (a.output != "-") std::cerr << "lockstep report: wrote " << a.output << " (" << summary_line(an) << ")\n";
  return kExitOk;
}

}  // namespace

void add_report_command(Command& app, int* exit_code) {
  auto args = std::make_shared<ReportArgs>();
  auto* sub = app.add_subcommand("report", "Write the analysis as one self-contained HTML page (opens offline)");
  sub->add_option("dir", args->dir, "Trace directory (lockstep run -o DIR), or snapshots (lockstep attach -o DIR)")->required();
  sub->add_option("-o,--output", args->output, "HTML file to write, or - for stdout")->required();
  sub->add_option("--stale-seconds", args->stale_s,
                  "A process whose trace stopped this long before its host neighbours' is dead (default 10)");
  add_read_options(sub, args->read);
  sub->add_flag("--timing", args->timing, "Print how long loading, analysis and building the page took (wall, CPU, peak RSS) and its size (stderr)");
  sub->footer("Exit code: 0 the page was written (whatever it found; use analyze/check to gate), 2 input error.");
  sub->callback([args, exit_code] { *exit_code = report_dir(*args); });
}

}  // namespace lockstep::cli
