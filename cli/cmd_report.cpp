// lockstep report DIR -o job.html: the analysis as one self-contained HTML page (docs/report.md).
#include <chrono>
#include <filesystem>
#include <iostream>

#include "analyze_common.h"
#include "commands.h"
#include "exit_codes.h"
#include "report.h"

namespace lockstep::cli {
namespace {

struct ReportArgs {
  std::string dir;
  std::string output;
  double stale_s = 10;
  bool timing = false;
};

int report_dir(const ReportArgs& a) {
  auto t0 = std::chrono::steady_clock::now();
  auto s = load_for_analysis("report", a.dir);
  if (!s) return kExitUsage;
  auto t1 = std::chrono::steady_clock::now();
  AnalyzeOptions opt;
  opt.hang.stale_ns = static_cast<int64_t>(a.stale_s * 1e9);
  Analysis an = analyze(*s, opt);
  auto t_analysed = std::chrono::steady_clock::now();
  auto details = details_from_files(*s);
  report::ReportOptions ro;
  if (a.output != "-") ro.timeline_json_hint = std::filesystem::path(a.output).stem().string() + ".timeline.json";
  std::string page = report::render_report_html(an, *details, ro);
  auto t2 = std::chrono::steady_clock::now();
  if (a.output == "-") {
    std::cout << page;
    std::cout.flush();
  } else if (!write_file("report", a.output, page)) {
    return kExitUsage;
  }
  if (a.timing) {
    auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
    std::cerr << "lockstep report: load " << ms(t1 - t0) << " ms, analysis " << ms(t_analysed - t1) << " ms, page "
              << ms(t2 - t_analysed) << " ms, " << page.size() << " bytes\n";
  }
  if (a.output != "-") std::cerr << "lockstep report: wrote " << a.output << " (" << summary_line(an) << ")\n";
  return kExitOk;
}

}  // namespace

void add_report_command(Command& app, int* exit_code) {
  auto args = std::make_shared<ReportArgs>();
  auto* sub = app.add_subcommand("report", "Write the analysis as one self-contained HTML page (opens offline)");
  sub->add_option("dir", args->dir, "Trace directory (lockstep run -o DIR)")->required();
  sub->add_option("-o,--output", args->output, "HTML file to write, or - for stdout")->required();
  sub->add_option("--stale-seconds", args->stale_s,
                  "A process whose trace stopped this long before its host neighbours' is dead (default 10)");
  sub->add_flag("--timing", args->timing, "Print how long loading and building the page took, and its size (stderr)");
  sub->footer("Exit code: 0 the page was written (whatever it found; use analyze/check to gate), 2 input error.");
  sub->callback([args, exit_code] { *exit_code = report_dir(*args); });
}

}  // namespace lockstep::cli
