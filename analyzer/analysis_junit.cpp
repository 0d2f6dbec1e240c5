// The analysis as JUnit XML test cases (`lockstep check --junit`).
#include <sstream>

#include "analysis_render.h"
#include "text_escape.h"

namespace lockstep {

using namespace render;

namespace {
std::string xml_escape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    // U+FFFE and U+FFFF are UTF-8 that XML 1.0 does not allow in a document (EF BF BE/BF).
    if (ch == '\xef' && i + 2 < s.size() && s[i + 1] == '\xbf' && (s[i + 2] == '\xbe' || s[i + 2] == '\xbf')) {
      o += s[i + 2] == '\xbe' ? "\\ufffe" : "\\uffff";
      i += 2;
      continue;
    }
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}
}  // namespace

std::string render_junit(const std::string& suite, const std::vector<JUnitCase>& cases) {
  size_t failures = 0;
  for (auto& c : cases) failures += !c.failure.empty();
  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"" << xml_escape(printable(suite))
     << "\" tests=\"" << cases.size() << "\" failures=\"" << failures << "\">\n";
  for (auto& c : cases) {
    os << "    <testcase classname=\"lockstep\" name=\"" << xml_escape(c.name) << "\"";
    std::string out = c.output.empty() ? "" : "      <system-out>" + xml_escape(printable_lines(c.output)) + "</system-out>\n";
    if (c.failure.empty()) {
      os << (out.empty() ? "/>\n" : ">\n" + out + "    </testcase>\n");
      continue;
    }
    std::string failure = printable_lines(c.failure);
    std::string first = failure.substr(0, failure.find('\n'));
    os << ">\n      <failure message=\"" << xml_escape(first) << "\">" << xml_escape(failure) << "</failure>\n" << out
       << "    </testcase>\n";
  }
  os << "  </testsuite>\n</testsuites>\n";
  return os.str();
}

std::vector<JUnitCase> junit_cases(const Analysis& a, bool require_finished) {
  std::vector<JUnitCase> out;
  std::string div;
  for (auto& d : a.divergences)
    div += std::string(kind_name(d.kind)) + " on " + comm_label(a.index.comms[d.gcomm].hash, a.index.comms[d.gcomm].role) +
           ": " + d.detail + "\n";
  out.push_back({"ranks_agree", div, window_note(a)});
  std::string inv;
  for (auto& d : a.inversions) inv += d.detail + "\n";
  out.push_back({"communicator_order", inv, ""});
  std::string hang;
  if (a.hang.hung)
    for (auto& g : a.hang.groups) {
      std::vector<int> r;
      for (int p : g.procs) r.push_back(display_rank(*a.schedule, p));
      hang += ranks_phrase(r) + ": " + g.summary + "\n";
    }
  out.push_back({"no_hang", hang, ""});
  std::string ev;
  for (auto& g : group_evidence(a.evidence)) ev += std::string(evidence_kind_name(g.kind)) + ": " + g.detail + "\n";
  // Behind (a live rank that has not issued its peers' ops yet) and lost histories: exit 4 as
  // the evidence above is (Analysis::exit_code), so a failure here too.
  for (auto& u : a.unproven)
    if (u.noted()) ev += unproven_line(a, u) + "\n";
  out.push_back({"evidence_complete", ev, ""});
  // The CI gate needs a finished job: one still running is exit 4 even when nothing else fails.
  if (require_finished) {
    std::string running;
    if (!a.live.empty()) {
      std::vector<int> r;
      for (int p : a.live) r.push_back(display_rank(*a.schedule, p));
      running = ranks_phrase(r) + " still running: the job has not finished\n";
    }
    out.push_back({"job_finished", running, ""});
  }
  // Coverage does not change the verdict (the plugin's rows are the history the interposer
  // missed): reported in the case's output, never a failure the exit code does not have.
  if (!a.coverage.procs.empty())
    out.push_back({"interposer_coverage", "", coverage_junit_text(*a.schedule, a.coverage)});
  return out;
}


}  // namespace lockstep
