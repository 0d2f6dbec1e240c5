// The HTML report (`lockstep report DIR -o job.html`): one self-contained page, readable offline,
// built from the analyzer's typed results. The page is report/template.html (embedded at build
// time) plus one JSON blob that its inline script renders; docs/report.md describes both.
#pragma once

#include <cstddef>
#include <string>

#include "analysis.h"
#include "trace_details.h"

namespace lockstep::report {

inline constexpr int kReportDataVersion = 1;  // data["version"]; docs/report.md "Data"

// Everything the page holds is bounded by these, whatever the number of ranks or ops.
struct ReportOptions {
  size_t max_findings = 6;      // divergence ladders (the first finding, then the next ones)
  size_t max_lanes = 8;         // ranks side by side per ladder (odd ranks first)
  int ops_before = 6;           // ops above the divergent op in each lane
  int ops_after = 3;            // ops below it
  size_t max_frames = 16;       // per stack, after trimming
  size_t max_list = 200;        // skipped files, warnings, dropped/stopped ranks, groups
  size_t max_range_segments = 40;  // "0-7,9,12-15,..." before it says "+N more"
  size_t max_graph_edges = 80;  // aggregated wait-for edges (cycle edges always kept)
  size_t timeline_ranks = 12;   // lanes of the inline timeline
  int timeline_ops = 16;        // newest ops per lane
  std::string timeline_json_hint;  // file name suggested in the `lockstep timeline -o` pointer
};

// The report's data as JSON text (UTF-8; invalid bytes of trace strings replaced by U+FFFD).
std::string report_data_json(const Analysis& a, TraceDetails& details, const ReportOptions& options = {});

// JSON text made safe inside <script type="application/json">: '<', '>' and '&' become \u003c
// \u003e \u0026 (so no "</script" or "<!--" can appear), U+2028/U+2029 become \u2028/\u2029.
// The result parses to the same value.
std::string script_safe_json(const std::string& json);

// The page: template.html with the (escaped) data blob in place.
std::string render_page(const std::string& data_json);
std::string render_report_html(const Analysis& a, TraceDetails& details, const ReportOptions& options = {});

// The embedded template (for tests: which elements the page promises).
const std::string& page_template();

// The page of `lockstep attach` snapshots (report/attach_template.html, docs/attach.md): the same
// safety (CSP with script hashes, the blob script-safe, data set as text only); data_json is
// attach's JSON report (attach/attach_analysis.h render_json), its strings already printable.
std::string render_attach_page(const std::string& data_json);
const std::string& attach_page_template();

}  // namespace lockstep::report
