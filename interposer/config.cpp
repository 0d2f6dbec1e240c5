#include "config.h"

#include "text_escape.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "bench_knobs.h"
#include "log.h"

namespace lockstep::rec {

namespace vars = schema::env;  // the names, defaults and ranges

bool parse_seconds(const char* s, double min, double max, double* out) {
  if (!s || !*s) return false;
  // strtod accepts "inf", "nan", hex floats and leading spaces: only plain decimal numbers here.
  for (const char* p = s; *p; p++)
    if (!strchr("0123456789.eE+-", *p)) return false;
  errno = 0;
  char* end = nullptr;
  double v = strtod(s, &end);
  if (end == s || *end || errno == ERANGE || !std::isfinite(v) || v < min || v > max) return false;
  *out = v;
  return true;
}

bool parse_int(const char* s, int64_t min, int64_t max, int64_t* out) {
  if (!s || !*s) return false;
  for (const char* p = s; *p; p++)
    if (*p < '0' || *p > '9') return false;
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(s, &end, 10);
  if (*end || errno == ERANGE || v < min || v > max) return false;
  *out = v;
  return true;
}

Config parse_config(const EnvLookup& env, std::vector<std::string>* warnings) {
  Config c;
  auto warn_default = [&](const char* name, const char* value, const char* expected,
                          const std::string& dflt) {
    // The value is the user's: at most 200 bytes of it, made printable (no control sequence
    // reaches the terminal; a cut UTF-8 sequence is escaped).
    const std::string shown = printable(std::string_view(value).substr(0, 200));
    warnings->push_back(std::string(name) + "=" + shown + " is not " + expected + "; using " + dflt);
  };

  if (const char* v = env(vars::kDir); v && *v) c.dir = v;

  if (const char* v = env(vars::kStacks); v && *v) {
    if (!strcmp(v, "none")) c.stacks = StacksSetting::None;
    else if (!strcmp(v, "native")) c.stacks = StacksSetting::Native;
    else if (!strcmp(v, "python")) c.stacks = StacksSetting::Python;
    else warn_default(vars::kStacks, v, "one of none|native|python", "the default");
  }

  if (const char* v = env(vars::kHangTimeout); v && *v) {
    char expected[96];
    snprintf(expected, sizeof expected, "a number of seconds in [0, %.0f] (0 = off)",
             kMaxHangTimeoutS);
    if (!parse_seconds(v, 0, kMaxHangTimeoutS, &c.hang_timeout_s)) {
      c.hang_timeout_s = kDefaultHangTimeoutS;
      warn_default(vars::kHangTimeout, v, expected, std::to_string(int(kDefaultHangTimeoutS)));
    }
  }

  if (const char* v = env(vars::kAnalyzer); v && *v) c.analyzer = v;

  if (const char* v = env(vars::kBenchOff); v && *v)
    if (!parse_bench_off(v, &c.bench_off))
      warn_default(vars::kBenchOff, v,
                   "a list of recorder,stack,capture,clock,event,queue,watchdog,waits,memop", "none");
  if (const char* v = env(vars::kCompletion); v && *v) {
    if (!strcmp(v, "memop")) c.completion_memop = true;
    else if (!strcmp(v, "covering")) c.completion_covering = true;
    else if (strcmp(v, "event"))
      warn_default(vars::kCompletion, v, "one of event|memop|covering", vars::kDefaultCompletion);
  }
  if (const char* v = env(vars::kCompletionWindow); v && *v) {
    if (!parse_int(v, 1, kMaxCompletionWindow, &c.completion_window)) {
      char expected[64];
      snprintf(expected, sizeof expected, "a number of ops in [1, %lld]",
               static_cast<long long>(kMaxCompletionWindow));
      warn_default(vars::kCompletionWindow, v, expected,
                   std::to_string(kDefaultCompletionWindow));
    }
  }
  if (const char* v = env(vars::kMaxMb); v && *v) {
    int64_t mb = 0;
    if (parse_int(v, 0, kMaxMaxMb, &mb) && (mb == 0 || mb >= kMinMaxMb)) {
      c.max_mb = mb;
    } else {
      char expected[96];
      snprintf(expected, sizeof expected, "a size in MiB in [%lld, %lld] (0 = no cap)",
               static_cast<long long>(kMinMaxMb), static_cast<long long>(kMaxMaxMb));
      warn_default(vars::kMaxMb, v, expected, std::to_string(kDefaultMaxMb));
    }
  }
  if (const char* v = env(vars::kQueueRecords); v && *v) {
    int64_t n = 0;
    if (parse_int(v, vars::kMinQueueRecords, vars::kMaxQueueRecords, &n) && (n & (n - 1)) == 0) {
      c.queue_records = n;
    } else {
      char expected[96];
      snprintf(expected, sizeof expected, "a power of two in [%lld, %lld]",
               static_cast<long long>(vars::kMinQueueRecords), static_cast<long long>(vars::kMaxQueueRecords));
      warn_default(vars::kQueueRecords, v, expected, std::to_string(kDefaultQueueRecords));
    }
  }
  if (const char* v = env(vars::kSpillMb); v && *v) {
    int64_t n = 0;
    if (parse_int(v, 0, vars::kMaxSpillMb, &n)) {
      c.spill_mb = n;
    } else {
      char expected[96];
      snprintf(expected, sizeof expected, "a size in MiB in [0, %lld] (0 = no spill)",
               static_cast<long long>(vars::kMaxSpillMb));
      warn_default(vars::kSpillMb, v, expected, std::to_string(vars::kDefaultSpillMb));
    }
  }
  if (const char* v = env(vars::kExitWait); v && *v) {
    if (!parse_seconds(v, vars::kMinExitWaitS, vars::kMaxExitWaitS, &c.exit_wait_s)) {
      c.exit_wait_s = vars::kDefaultExitWaitS;
      char expected[96];
      snprintf(expected, sizeof expected, "a number of seconds in [%g, %g]", vars::kMinExitWaitS,
               vars::kMaxExitWaitS);
      warn_default(vars::kExitWait, v, expected, std::to_string(int(vars::kDefaultExitWaitS)));
    }
  }
  if (const char* v = env(vars::kSigusr1); v && *v) {
    if (!strcmp(v, vars::kSigusr1Flush)) c.sigusr1_flush_only = true;
    else if (strcmp(v, vars::kSigusr1Default))
      warn_default(vars::kSigusr1, v, "one of default|flush", vars::kSigusr1Default);
  }
  return c;
}

const Config& config() {
  static Config* c = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> warnings;
    c = new Config(parse_config([](const char* n) { return getenv(n); }, &warnings));
    for (const std::string& w : warnings) warn("%s", w.c_str());
  });
  return *c;
}

}  // namespace lockstep::rec
