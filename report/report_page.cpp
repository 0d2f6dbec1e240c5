// The page: the embedded template (report/template.html, see CMakeLists.txt) with the data blob
// in place of its marker.
#include <stdexcept>

#include "report.h"
#include "attach_template.h"  // generated: kAttachTemplate
#include "report_template.h"  // generated: kReportTemplate

namespace lockstep::report {

namespace {
constexpr const char* kDataMarker = "/*LOCKSTEP_REPORT_DATA*/";
}

const std::string& page_template() {
  static const std::string t = kReportTemplate;
  return t;
}

namespace {
std::string fill(const std::string& t, const std::string& data_json) {
  size_t at = t.find(kDataMarker);
  if (at == std::string::npos) throw std::logic_error("report template has no data marker");
  std::string safe = script_safe_json(data_json);
  std::string page;
  page.reserve(t.size() + safe.size());
  page.append(t, 0, at).append(safe).append(t, at + std::string(kDataMarker).size(), std::string::npos);
  return page;
}
}  // namespace

std::string render_page(const std::string& data_json) { return fill(page_template(), data_json); }

const std::string& attach_page_template() {
  static const std::string t = kAttachTemplate;
  return t;
}

std::string render_attach_page(const std::string& data_json) { return fill(attach_page_template(), data_json); }

std::string render_report_html(const Analysis& a, TraceDetails& details, const ReportOptions& options) {
  return render_page(report_data_json(a, details, options));
}

}  // namespace lockstep::report
