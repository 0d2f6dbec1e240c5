// lockstep attach: diagnose a live hung job nobody prepared, from outside (docs/attach.md).
//   lockstep attach PID... | --tree PID | --slurm JOBID -o DIR   [-o DIR] [--json]
// Per process, read-only and bounded: native stacks of every thread (ptrace stop, stated),
// Python frames (process_vm_readv), NCCL RAS; then the analysis (attach/attach_analysis.h).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>
#include <fstream>
#include <iostream>
#include <sstream>

#include "attach_analysis.h"
#include "collect.h"
#include "commands.h"
#include "exit_codes.h"
#include "file_io.h"
#include "procfs.h"
#include "ptrace_stacks.h"
#include "report.h"
#include "snapshot_json.h"
#include "text_escape.h"

namespace lockstep::cli {
namespace {

namespace at = lockstep::attach;
// Process names and paths are any bytes: a JSON document with them never throws (invalid UTF-8 replaced).
constexpr auto kReplace = nlohmann::json::error_handler_t::replace;

struct AttachArgs {
  std::vector<int> pids;
  int tree = 0;
  std::string slurm_job;
  std::string local_job;
  std::string out_dir;
  std::string from_dir;
  std::string html;  // --html FILE: the report as a page too
  std::vector<std::string> trace_dirs;  // --trace: the job's lockstep trace directories
  std::vector<std::string> fr_dirs;     // --fr: directories of its Flight Recorder dumps
  std::string session;  // --session: a --slurm collector's, its coordinator's attach
  bool json = false;
  bool no_native = false;
  int ras_timeout_s = 5;
  int confirm_ms = 1000;
};

// An id of this attach, written in each of its snapshots (NodeSnapshot::session).
std::string new_session() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::to_string(static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec) + "-" + host + "-" +
         std::to_string(::getpid());
}

// Output of a command run without a shell (bounded), "" on failure.
std::string run_capture(const std::vector<std::string>& argv, int* status) {
  int fds[2];
  if (::pipe(fds) != 0) return "";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execvp(a[0], a.data());
    _exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0 && out.size() < (16u << 20)) out.append(buf, size_t(n));
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (status) *status = st;
  return out;
}

// The processes worth reading among candidates: those that mapped an NCCL (the ranks), else the
// leaves of the tree (launchers and shells are not ranks).
std::vector<int> rank_processes(const std::vector<int>& candidates) {
  std::vector<int> with_nccl;
  for (int p : candidates)
    for (const at::Mapping& m : at::mappings_of(p))
      if (m.path.find("/libnccl") != std::string::npos) {
        with_nccl.push_back(p);
        break;
      }
  std::vector<int> picked = with_nccl.empty() ? at::leaf_processes(candidates) : with_nccl;
  // A forked child inherits its parent's RANK and libnccl mapping (PyTorch DataLoader workers):
  // of the processes claiming one rank, those whose ancestor claims it too are not the rank. Others
  // claiming one rank are all kept: the analysis names them, and never counts the rank twice.
  std::map<int, std::vector<int>> by_rank;
  for (int p : picked)
    if (int r = at::rank_from_env(at::environment_of(p)); r >= 0) by_rank[r].push_back(p);
  std::set<int> drop;
  for (const auto& [rank, procs] : by_rank) {
    if (procs.size() < 2) continue;
    for (int p : procs)
      for (int up = at::parent_of(p), hops = 0; up > 1 && hops < 64; up = at::parent_of(up), ++hops)
        if (std::find(procs.begin(), procs.end(), up) != procs.end()) {
          std::cerr << "lockstep attach: pid " << p << " claims rank " << rank << " as its ancestor pid " << up
                    << " does (a forked child, such as a DataLoader worker): not read as the rank\n";
          drop.insert(p);
          break;
        }
  }
  std::erase_if(picked, [&](int p) { return drop.count(p) > 0; });
  return picked;
}

// `scontrol listpids JOBID` on this node: PID JOBID STEPID LOCALID GLOBALID; the tasks of
// numbered steps, minus our own step (we run as an --overlap step of the same job).
std::vector<int> slurm_local_pids(const std::string& job, std::string& error) {
  int st = 0;
  std::string out = run_capture({"scontrol", "listpids", job}, &st);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    error = "scontrol listpids " + job + " failed";
    return {};
  }
  std::set<int> ours;
  for (int p = ::getpid(), hops = 0; p > 1 && hops < 64; p = at::parent_of(p), ++hops) ours.insert(p);
  const char* own_step = std::getenv("SLURM_STEP_ID");
  std::vector<int> pids;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string pid, jobid, step;
    if (!(l >> pid >> jobid >> step) || pid == "PID") continue;
    if (step.empty() || !std::isdigit(static_cast<unsigned char>(step[0]))) continue;  // batch, extern
    if (own_step && step == own_step) continue;
    int p = std::atoi(pid.c_str());
    if (p > 0 && !ours.count(p)) pids.push_back(p);
  }
  return pids;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f);
}

// A file of ours under a fixed name in -o DIR, a directory every node writes: renamed into place,
// so that a link planted under the name is replaced, never written through.
bool write_in_dir(const std::string& path, const std::string& text) {
  try {
    schema::write_file_replacing(path, text);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

int report(const std::vector<at::NodeSnapshot>& nodes, const AttachArgs& a) {
  std::vector<at::TraceSource> given;
  for (const std::string& d : a.trace_dirs) given.push_back({at::TraceKind::kRecorder, d, {}, "--trace", {}});
  for (const std::string& d : a.fr_dirs) given.push_back({at::TraceKind::kFlightRecorder, d, {}, "--fr", {}});
  at::AttachReport r = at::analyze_snapshots(nodes, given);
  const nlohmann::json j = at::render_json(r);
  if (a.json)
    std::cout << j.dump(2, ' ', false, kReplace) << "\n";
  else
    std::cout << at::render_text(r);
  if (!a.out_dir.empty()) {
    write_in_dir(a.out_dir + "/attach-report.txt", at::render_text(r));
    write_in_dir(a.out_dir + "/attach-report.json", j.dump(2, ' ', false, kReplace) + "\n");
  }
  if (!a.html.empty() && !write_file(a.html, report::render_attach_page(j.dump(-1, ' ', false, kReplace)))) {
    std::cerr << "lockstep attach: cannot write " << printable(a.html) << "\n";
    return kExitUsage;
  }
  return r.exit_code;
}

// The snapshots of one attach in dir: `session`'s, or when empty the newest attach's (the one
// whose snapshot files were written last). Snapshots of other attaches in the same directory
// (an -o DIR given twice) are named and left out: two attaches are never one job.
std::vector<at::NodeSnapshot> read_snapshots(const std::string& dir, std::string& error, const std::string& session = "") {
  struct Read {
    std::string name;
    int64_t mtime_ns = 0;
    at::NodeSnapshot node;
  };
  std::vector<Read> all;
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 12 && n.compare(n.size() - 12, 12, ".attach.json") == 0) names.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    std::string why;
    // A FIFO or device planted under the name would block or never end: regular files only.
    auto text = schema::read_regular_file(dir + "/" + name, 256u << 20, &why);
    std::optional<at::NodeSnapshot> n;
    if (text) n = at::node_from_json(nlohmann::json::parse(*text, nullptr, false), why);
    if (!n) {
      std::cerr << "lockstep attach: skipped " << printable(name) << ": " << printable(why) << "\n";
      continue;
    }
    struct stat st {};
    const int64_t mtime = ::stat((dir + "/" + name).c_str(), &st) == 0
                              ? static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec
                              : 0;
    all.push_back({name, mtime, std::move(*n)});
  }
  std::string keep = session;
  if (keep.empty()) {
    int64_t newest = INT64_MIN;
    for (const Read& r : all)
      if (r.mtime_ns > newest) newest = r.mtime_ns, keep = r.node.session;
  }
  std::vector<at::NodeSnapshot> nodes;
  std::vector<std::string> other;
  for (Read& r : all) {
    if (r.node.session == keep) nodes.push_back(std::move(r.node));
    else other.push_back(r.name);
  }
  if (!other.empty()) {
    std::string list;
    for (size_t i = 0; i < other.size() && i < 4; ++i) list += (i ? ", " : "") + printable(other[i]);
    if (other.size() > 4) list += " and " + std::to_string(other.size() - 4) + " more";
    std::cerr << "lockstep attach: " << printable(dir) << " holds snapshots of another attach, left out: " << list
              << " (read: " << nodes.size() << (nodes.size() == 1 ? " snapshot of " : " snapshots of ")
              << (session.empty() ? "the newest attach" : "this attach") << "; give each attach its own -o DIR)\n";
  }
  if (nodes.empty()) error = all.empty() ? "no *.attach.json snapshot in " + dir : "no snapshot of this attach in " + dir;
  return nodes;
}

int attach(AttachArgs a) {
  if (!a.from_dir.empty() && (!a.pids.empty() || a.tree > 0 || !a.slurm_job.empty())) {
    std::cerr << "lockstep attach: --from DIR reads snapshots already taken; give it without PIDs, --tree or --slurm\n";
    return kExitUsage;
  }
  if (a.session.empty()) a.session = new_session();
  if (!a.from_dir.empty()) {
    std::string error;
    auto nodes = read_snapshots(a.from_dir, error);
    if (nodes.empty()) {
      std::cerr << "lockstep attach: " << printable(error) << "\n";
      return kExitUsage;
    }
    return report(nodes, a);
  }
  if (!a.out_dir.empty()) {
    // Found unwritable only after the processes were stopped, the stop would be for nothing.
    ::mkdir(a.out_dir.c_str(), 0755);
    const std::string probe = a.out_dir + "/.lockstep-attach-probe-" + std::to_string(::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      std::cerr << "lockstep attach: cannot write in " << printable(a.out_dir) << " (-o): " << std::strerror(errno)
                << "; nothing was stopped\n";
      return kExitUsage;
    }
    ::close(fd);
    ::unlink(probe.c_str());
  }
  if (!a.slurm_job.empty()) {
    if (a.out_dir.empty()) {
      std::cerr << "lockstep attach --slurm: give -o DIR (a directory every node can write)\n";
      return kExitUsage;
    }
    // One collector per node of the allocation, as an overlapping step of the job itself.
    std::vector<std::string> argv = {"srun", "--overlap", "--jobid", a.slurm_job, "--ntasks-per-node=1"};
    int st = 0;
    std::string nodes = run_capture({"squeue", "-h", "-j", a.slurm_job, "-o", "%D"}, &st);
    if (int n = std::atoi(nodes.c_str()); n > 0) argv.push_back("--nodes=" + std::to_string(n));
    argv.insert(argv.end(), {self_exe(), "attach", "--local-job", a.slurm_job, "-o", a.out_dir, "--ras-timeout",
                             std::to_string(a.ras_timeout_s), "--confirm-ms", std::to_string(a.confirm_ms),
                             "--session", a.session});
    if (a.no_native) argv.push_back("--no-native");
    std::string out = run_capture(argv, &st);
    std::cerr << out;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      std::cerr << "lockstep attach: srun of the collectors exited " << (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st))
                << "; analysing what they wrote\n";
    std::string error;
    auto snaps = read_snapshots(a.out_dir, error, a.session);
    if (snaps.empty()) {
      std::cerr << "lockstep attach: " << printable(error) << "\n";
      return kExitUsage;
    }
    return report(snaps, a);
  }
  std::vector<int> pids = a.pids;
  // lockstep itself (it cannot trace itself; a PID of ours is a mistake, not a refusal to fix).
  if (std::find(pids.begin(), pids.end(), static_cast<int>(::getpid())) != pids.end()) {
    std::cerr << "lockstep attach: " << ::getpid() << " is this lockstep process\n";
    return kExitUsage;
  }
  if (!a.local_job.empty()) {
    std::string error;
    pids = rank_processes(slurm_local_pids(a.local_job, error));
    if (!error.empty()) {
      std::cerr << "lockstep attach: " << printable(error) << "\n";
      return kExitUsage;
    }
  }
  if (a.tree > 0) {
    std::vector<int> tree = at::process_tree(a.tree);
    tree.erase(std::remove(tree.begin(), tree.end(), static_cast<int>(::getpid())), tree.end());
    for (int p : rank_processes(tree)) pids.push_back(p);
  }
  // A process named twice (a PID and the tree it is in, or a PID repeated) is read once: read
  // twice it would stop twice and count as two ranks.
  {
    std::vector<int> once;
    for (int p : pids)
      if (std::find(once.begin(), once.end(), p) == once.end()) once.push_back(p);
    pids = std::move(once);
  }
  if (pids.empty()) {
    std::cerr << "lockstep attach: no process to read (give PIDs, --tree PID or --slurm JOBID)\n";
    return kExitUsage;
  }
  at::CollectOptions o;
  o.native = !a.no_native;
  o.ras_timeout_s = a.ras_timeout_s;
  o.confirm_ms = a.confirm_ms;
  at::NodeSnapshot node = at::collect_node(pids, o);
  node.session = a.session;
  for (const at::ProcessSnapshot& p : node.procs) {
    if (!p.error.empty())
      std::cerr << "lockstep attach: pid " << p.pid << ": " << printable(p.error) << "\n"
                << (p.fix.empty() ? "" : "  fix: " + printable(p.fix) + "\n");
    else
      std::fprintf(stderr,
                   "lockstep attach: pid %d stopped %.2f ms (%d threads; interrupt %.2f, unwind %.2f, python %.2f, "
                   "detach %.2f ms; %.2f ms of CPU)\n",
                   p.pid, p.stopped_ms, p.threads_stopped, p.stop.interrupt_ms, p.stop.unwind_ms, p.stop.python_ms,
                   p.stop.detach_ms, p.stop.cpu_ms);
  }
  if (!a.out_dir.empty()) {
    const std::string path = a.out_dir + "/" + node.host + "-" + std::to_string(::getpid()) + ".attach.json";
    if (!write_in_dir(path, at::to_json(node).dump(1, ' ', false, kReplace) + "\n")) {
      std::cerr << "lockstep attach: cannot write " << printable(path) << "\n";
      return kExitUsage;
    }
  }
  if (!a.local_job.empty()) return kExitOk;  // a collector of --slurm: the caller analyses DIR
  // A thread that had not stopped when its process was let go stops when its system call
  // returns: the analysis runs beside this thread (the tracer), which lets such threads go as
  // soon as they stop, instead of after the analysis.
  int rc = 0;
  std::atomic<bool> done{false};
  std::thread analysis([&] {
    rc = report({node}, a);
    done = true;
  });
  while (!done) {
    at::release_late_threads(std::chrono::milliseconds(0));
    ::usleep(2000);
  }
  analysis.join();
  at::release_late_threads(std::chrono::milliseconds(0));
  return rc;
}

}  // namespace

bool is_snapshot_dir(const std::string& dir) {
  bool found = false;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 12 && n.compare(n.size() - 12, 12, ".attach.json") == 0) found = true;
    }
    ::closedir(d);
  }
  return found;
}

int report_snapshot_dir(const std::string& dir, const std::string& output) {
  std::string error;
  auto nodes = read_snapshots(dir, error);
  if (nodes.empty()) {
    std::cerr << "lockstep report: " << printable(error) << "\n";
    return kExitUsage;
  }
  at::AttachReport r = at::analyze_snapshots(nodes);
  const std::string page = report::render_attach_page(at::render_json(r).dump(-1, ' ', false, kReplace));
  if (output == "-") {
    std::cout << page;
    return kExitOk;
  }
  if (!write_file(output, page)) {
    std::cerr << "lockstep report: cannot write " << printable(output) << "\n";
    return kExitUsage;
  }
  std::cerr << "lockstep report: wrote " << printable(output) << " (attach snapshots: " << printable(r.verdict) << ")\n";
  return kExitOk;
}

void add_attach_command(Command& app, int* exit_code) {
  auto a = std::make_shared<AttachArgs>();
  Command* cmd = app.add_subcommand(
      "attach", "Diagnose a live (hung) job from outside: stacks, Python frames, NCCL RAS; read-only (docs/attach.md)");
  cmd->add_option("pids", a->pids, "Processes to read (the ranks)")->range(1, INT32_MAX);
  cmd->add_option("--tree", a->tree, "A launcher's PID (torchrun, srun, lockstep-launch): read its rank processes");
  cmd->add_option("--slurm", a->slurm_job, "A Slurm job: one collector per node (srun --overlap), then the analysis");
  cmd->add_option("--local-job", a->local_job, "Collector of --slurm: this node's processes of the job")->hidden();
  cmd->add_option("--session", a->session, "Collector of --slurm: the attach its snapshot is of")->hidden();
  cmd->add_option("-o,--out", a->out_dir, "Write the snapshots (<host>-<pid>.attach.json) and the report here");
  cmd->add_option("--from", a->from_dir, "Analyse the snapshots already in this directory");
  cmd->add_option("--trace", a->trace_dirs, "The job's lockstep trace directory (besides the LOCKSTEP_DIR its ranks name)")
      ->one_value_per_occurrence();
  cmd->add_option("--fr", a->fr_dirs, "A directory of the job's Flight Recorder dumps (besides TORCH_FR_DUMP_TEMP_FILE's)")
      ->one_value_per_occurrence();
  cmd->add_flag("--json", a->json, "The report as JSON");
  cmd->add_option("--html", a->html, "Also write the report as one self-contained HTML page (as `lockstep report DIR`)");
  cmd->add_flag("--no-native", a->no_native, "Do not stop the processes (no native stacks; Python frames and RAS only)");
  cmd->add_option("--ras-timeout", a->ras_timeout_s,
                  "Seconds NCCL RAS may take to collect its answer (1-600, default 5; the whole exchange may take 2 s "
                  "more: connecting and reading)")
      ->range(1, 600);
  cmd->add_option("--confirm-ms", a->confirm_ms,
                  "Milliseconds between the first look and the second (NCCL RAS again; the stacks again when the job "
                  "may be hung), 0-60000, default 1000; 0: one look, nothing proven hung")
      ->range(0, 60000);
  cmd->footer(
      "Exit codes: 0 no hang found; 1 a divergence or hang found; 2 usage error; 4 incomplete evidence (a rank not read)");
  cmd->callback([a, exit_code] { *exit_code = attach(*a); });
}

}  // namespace lockstep::cli
