#include "trace_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace lockstep::test {

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/lockstep-rec-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path = buf.data();
}

TempDir::~TempDir() {
  std::string cmd = "rm -rf '" + path + "'";
  if (system(cmd.c_str()) != 0) {
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Child::Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  char tmpl[] = "/tmp/lockstep-child-XXXXXX";
  int fd = mkstemp(tmpl);
  close(fd);
  out_path_ = tmpl;
  err_path_ = out_path_ + ".err";
  std::vector<std::string> envs;
  for (char** e = environ; *e; e++) {
    std::string s = *e;
    std::string k = s.substr(0, s.find('='));
    if (!env.count(k)) envs.push_back(s);
  }
  for (auto& [k, v] : env) envs.push_back(k + "=" + v);
  pid_ = fork();
  if (pid_ == 0) {
    int o = open(out_path_.c_str(), O_WRONLY | O_TRUNC | O_CREAT, 0644);
    int e = open(err_path_.c_str(), O_WRONLY | O_TRUNC | O_CREAT, 0644);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<char*> a, en;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (auto& s : envs) en.push_back(const_cast<char*>(s.c_str()));
    en.push_back(nullptr);
    execve(a[0], a.data(), en.data());
    _exit(127);
  }
}

Child::~Child() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  unlink(out_path_.c_str());
  unlink(err_path_.c_str());
}

bool Child::wait_for_output(const std::string& text, double timeout_s) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (read_file(out_path_).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void Child::signal(int sig) { kill(pid_, sig); }

ProcResult Child::wait(double timeout_s) {
  ProcResult r;
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    pid_t p = waitpid(pid_, &status, WNOHANG);
    if (p == pid_) break;
    if (std::chrono::steady_clock::now() > end) {
      r.timed_out = true;
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  reaped_ = true;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  r.out = read_file(out_path_);
  r.err = read_file(err_path_);
  return r;
}

ProcResult run(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env, double timeout_s) {
  Child c(argv, env);
  return c.wait(timeout_s);
}

std::vector<std::string> trace_files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 16 && n.substr(n.size() - 16) == ".lockstep.sqlite") out.push_back(dir + "/" + n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

Trace::Trace(const std::string& path) {
  // Read-write: a process killed mid-transaction leaves a hot journal that only a writable
  // connection can roll back (read-only: "attempt to write a readonly database").
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK)
    throw std::runtime_error("cannot open " + path);
  sqlite3_busy_timeout(db_, 2000);
}
Trace::~Trace() { sqlite3_close(db_); }

std::vector<std::vector<std::string>> Trace::rows(const std::string& sql) const {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
    throw std::runtime_error("bad query " + sql + ": " + sqlite3_errmsg(db_));
  std::vector<std::vector<std::string>> out;
  while (sqlite3_step(st) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int i = 0; i < sqlite3_column_count(st); i++) {
      const unsigned char* t = sqlite3_column_text(st, i);
      row.push_back(t ? reinterpret_cast<const char*>(t) : "NULL");
    }
    out.push_back(row);
  }
  sqlite3_finalize(st);
  return out;
}

std::string Trace::scalar(const std::string& sql) const {
  auto r = rows(sql);
  return r.empty() || r[0].empty() ? "<no row>" : r[0][0];
}

std::vector<std::string> Trace::column(const std::string& sql) const {
  std::vector<std::string> out;
  for (auto& r : rows(sql)) out.push_back(r.empty() ? "" : r[0]);
  return out;
}

std::string Trace::meta(const std::string& key) const {
  return scalar("SELECT value FROM meta WHERE key='" + key + "'");
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); i++) s += (i ? sep : "") + v[i];
  return s;
}

}  // namespace lockstep::test
