// lockstep ops DIR --rank R [--around N]: one rank's ops in call order.
#include <algorithm>
#include <climits>
#include <iostream>

#include "analyze_common.h"
#include "commands.h"
#include "comm_index.h"
#include "exit_codes.h"

namespace lockstep::cli {
namespace {

struct OpsArgs {
  std::string dir;
  int rank = 0;
  int64_t around = -1;
  std::string comm;
  int window = 10;
};

int ops(const OpsArgs& a) {
  std::string path;
  std::vector<SkippedFile> skipped;
  try {
    // Headers to find the rank's file; then that one process's rows.
    const Schedule headers = load_headers(a.dir, {.use_summaries = true});
    for (size_t i = 0; i < headers.procs.size(); ++i)
      if (display_rank(headers, static_cast<int>(i)) == a.rank) path = headers.procs[i].info.path;
    skipped = headers.skipped;
  } catch (const LoadError& e) {
    std::cerr << "lockstep ops: " << printable(e.what()) << "\n";
    explain_no_trace_file(a.dir);
    return kExitUsage;
  }
  if (path.empty()) {
    // The rank's file may be one of those the loader could not use: say which, and why.
    print_skipped(skipped);
    std::cerr << "lockstep ops: no usable trace of rank " << a.rank << " in " << printable(a.dir)
              << (skipped.empty() ? "" : " (its file may be one of the skipped files above)") << "\n";
    return kExitUsage;
  }
  Process p;
  try {
    p = load_process_file(path);
  } catch (const LoadError& e) {
    std::cerr << "lockstep ops: " << printable(e.what()) << "\n";
    return kExitUsage;
  }
  auto roles = comm_roles(p);
  auto families = comm_families(p);
  // The communicators --comm names (identity.h: role, commName or hash prefix); all without it.
  std::vector<bool> comm_on(p.comms.size(), a.comm.empty());
  const std::vector<int> selected = select_comms(
      a.comm, static_cast<int>(p.comms.size()), [&](int i) -> const std::string& { return roles[i]; },
      [&](int i) -> const std::string& { return families[i]; }, [&](int i) -> const Comm& { return p.comms[i]; });
  for (int c : selected) comm_on[c] = true;
  if (!a.comm.empty() && selected.empty()) {
    std::cerr << "lockstep ops: no communicator of rank " << a.rank << " matches '" << printable(a.comm) << "'; its communicators:\n";
    for (size_t c = 0; c < p.comms.size(); ++c)
      std::cerr << "  " << printable(comm_label(p.comms[c].hash, roles[c])) << "\n";
    return kExitUsage;
  }
  size_t center = p.ops.size();
  if (a.around >= 0) {
    for (size_t i = 0; i < p.ops.size() && center == p.ops.size(); ++i) {
      const Op& o = p.ops[i];
      if (o.seq != a.around || o.comm < 0) continue;
      if (comm_on[o.comm]) center = i;
    }
    if (center == p.ops.size()) {
      // A seq the size cap retired was issued: said per communicator, with what the file keeps (G7).
      std::vector<std::string> retired;
      for (size_t c = 0; c < p.comms.size(); ++c) {
        if (!comm_on[c]) continue;
        int64_t kept = 0, kept_first = INT64_MAX, kept_last = 0;
        for (const Op& o : p.ops)
          if (o.comm == static_cast<int>(c) && o.seq > 0) {
            ++kept;
            kept_first = std::min<int64_t>(kept_first, o.seq);
            kept_last = std::max<int64_t>(kept_last, o.seq);
          }
        const std::string note = retired_seq_text(p, p.comms[c], a.around, kept, kept_first, kept_last);
        if (!note.empty()) retired.push_back(printable(comm_label(p.comms[c].hash, roles[c])) + ": " + note);
      }
      std::cerr << "lockstep ops: rank " << a.rank << (retired.empty() ? " has no op" : "'s file holds no op")
                << " with seq " << a.around << (a.comm.empty() ? "" : " on comm " + printable(a.comm)) << "\n";
      for (const auto& r : retired) std::cerr << "  " << r << "\n";
      return kExitUsage;
    }
  }
  size_t lo = center > static_cast<size_t>(a.window) ? center - a.window : 0;
  size_t hi = std::min(p.ops.size(), center + a.window + 1);
  std::cout << "rank " << a.rank << " (" << printable(process_label(p)) << "): " << p.ops.size() << " ops";
  if (a.around < 0) std::cout << ", the last " << hi - lo;
  std::cout << "\n";
  // The communicators the listing shows, by their labels (identity.h); the column has the hash.
  std::vector<bool> listed(p.comms.size(), false);
  for (size_t i = lo; i < hi; ++i)
    if (p.ops[i].comm >= 0 && static_cast<size_t>(p.ops[i].comm) < p.comms.size()) listed[p.ops[i].comm] = true;
  for (size_t c = 0; c < p.comms.size(); ++c)
    if (listed[c]) std::cout << "  " << printable(comm_label(p.comms[c].hash, roles[c])) << "\n";
  const bool completion_known = std::any_of(p.ops.begin(), p.ops.end(), [](const Op& o) { return o.completed; });
  std::cout << "  call      comm          seq  op [state]\n";
  for (size_t i = lo; i < hi; ++i) {
    const Op& o = p.ops[i];
    Signature sig{o.op, o.dtype, o.count, o.root, o.peer, o.redop, o.parts, classify_op(o.op)};
    std::string comm = o.comm >= 0 ? short_hash(p.comms[o.comm].hash) : "?";
    char line[64];
    std::snprintf(line, sizeof line, "%s %-9lld %-8s %8s  ", i == center ? ">" : " ", static_cast<long long>(o.call_index),
                  comm.c_str(), o.seq > 0 ? std::to_string(o.seq).c_str() : "-");
    // The progress word (identity.h), after the state when it is not plain enqueued work.
    std::string state = progress_word(o.state, o.completed, completion_known);
    if (vocab::enqueued_work(o.state) && o.state != vocab::State::Enqueued) state = vocab::name(o.state) + (", " + state);
    if (o.rc != 0) state += ", rc=" + std::to_string(o.rc);
    std::cout << line << describe_signature(sig) << "  [" << state << "]"
              << (o.thread_name.empty() ? "" : "  " + printable(o.thread_name)) << "\n";
  }
  return kExitOk;
}

}  // namespace

void add_ops_command(Command& app, int* exit_code) {
  auto args = std::make_shared<OpsArgs>();
  auto* sub = app.add_subcommand("ops", "List one rank's ops in call order (default: the last ones)");
  sub->footer("Exit code: 0 listed, 2 input error (no usable trace of that rank, no such seq or communicator, a seq the size cap retired; skipped files are named).");
  sub->add_option("dir", args->dir, "Trace directory")->required();
  sub->add_option("--rank", args->rank, "Global rank")->required();
  sub->add_option("--around", args->around, "Centre the listing on the op with this seq");
  sub->add_option("--comm", args->comm, "With --around: the communicator (hash prefix, role or commName)");
  sub->add_option("--window", args->window, "Ops shown on each side (default 10)");
  sub->callback([args, exit_code] { *exit_code = ops(*args); });
}

}  // namespace lockstep::cli
