// One analysis of a trace directory: the findings of every analysis file, combined, and the
// renderers (human text, versioned JSON, JUnit XML). Analyses are pure functions of the Schedule.
#pragma once

#include <string>
#include <vector>

#include "comm_index.h"
#include "findings.h"
#include "hang.h"
#include "job_identity.h"
#include "schedule.h"
#include "trace_details.h"

namespace lockstep {

inline constexpr int kJsonReportVersion = 1;  // docs/analyzer.md "JSON report"

struct AnalyzeOptions {
  HangOptions hang;
};

struct Analysis {
  const Schedule* schedule = nullptr;
  CommIndex index;
  std::vector<Divergence> divergences;  // first per communicator, first per point-to-point pair
  std::vector<Divergence> inversions;   // first per pair of communicators
  HangReport hang;
  std::vector<HostGroup> hosts;         // job_identity.h
  const Divergence* first = nullptr;    // the first finding in causal order, or null
  int64_t total_ops = 0;

  bool problems() const { return !divergences.empty() || !inversions.empty() || hang.hung; }
};

Analysis analyze(const Schedule& s, const AnalyzeOptions& options = {});

struct ReportOptions {
  int ops_before = 5;       // ops listed before the divergence, per side
  size_t max_frames = 8;    // per stack, after trimming
  size_t max_findings = 10; // further findings listed (the rest counted)
  bool color = false;       // bold headings (only when writing to a terminal)
};

std::string render_text(const Analysis& a, TraceDetails& details, const ReportOptions& options = {});
std::string render_json(const Analysis& a, TraceDetails& details, const ReportOptions& options = {});

struct JUnitCase {
  std::string name;
  std::string failure;  // empty: passed
};
std::string render_junit(const std::string& suite, const std::vector<JUnitCase>& cases);
// The analysis as CI test cases: ranks_agree, communicator_order, no_hang.
std::vector<JUnitCase> junit_cases(const Analysis& a);
// One line per problem, for JUnit failure messages and `check`.
std::string summary_line(const Analysis& a);

}  // namespace lockstep
