// Helpers for tests that run a program under the recorder and read the trace it wrote.
#pragma once

#include <sqlite3.h>
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace lockstep::test {

// A fresh empty directory under $TMPDIR (or /tmp), removed by the destructor.
struct TempDir {
  TempDir();
  ~TempDir();
  std::string path;
};

struct ProcResult {
  int exit_code = -1;   // when exited
  int term_signal = 0;  // when killed
  bool timed_out = false;
  std::string out, err;
};

// A child process with stdout/stderr captured to files.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  ~Child();  // kills the child if still running
  // Waits until stdout contains `text` (false after timeout_s).
  bool wait_for_output(const std::string& text, double timeout_s);
  void signal(int sig);
  ProcResult wait(double timeout_s);  // SIGKILLs it at the timeout
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
  bool reaped_ = false;
};

ProcResult run(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env, double timeout_s = 20);

// Environment for the probe under the recorder, writing into dir.
std::map<std::string, std::string> recorder_env(const std::string& trace_dir);

std::vector<std::string> trace_files(const std::string& dir);

// Read-only view of one trace file; NULL reads as "NULL".
class Trace {
 public:
  explicit Trace(const std::string& path);
  ~Trace();
  std::vector<std::vector<std::string>> rows(const std::string& sql) const;
  std::string scalar(const std::string& sql) const;
  std::vector<std::string> column(const std::string& sql) const;
  std::string meta(const std::string& key) const;

 private:
  sqlite3* db_ = nullptr;
};

std::string join(const std::vector<std::string>& v, const char* sep = ",");
std::string read_file(const std::string& path);

}  // namespace lockstep::test
