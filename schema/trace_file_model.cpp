#include "trace_file_model.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>
#include <map>
#include <tuple>

#include "meta_keys.h"
#include "file_name.h"
#include "op_digest.h"
#include "trace_file.h"

namespace lockstep::trace_file {
namespace {

CallFields call_fields(const Op& o) { return {o.op, o.dtype, o.count, o.root, o.peer, o.redop}; }
CallFields call_fields(const OpPart& p) { return {p.op, p.dtype, p.count, p.root, p.peer, p.redop}; }

}  // namespace

void write_process(const Process& p, const std::string& path, const ModelWriteOptions& opt) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  Db db;
  CreateOptions co;
  co.journal_mode = opt.fast ? "OFF" : "truncate";
  co.synchronous = opt.fast ? "OFF" : "NORMAL";
  const char* what = "";
  db.check(create(db, path, co, &what), what + std::string(" ") + path);
  // A process without a drops table (drops_known false) is written as a file from before the
  // table: only meta dropped_records says records were dropped.
  if (!p.drops_known) db.check(db.exec("DROP TABLE drops"), "drop table drops");
  db.check(db.exec("BEGIN"), "begin");
  Tables t;
  db.check(t.prepare(db.get(), 0, 0), "prepare");
  auto ok = [&](int rc, const char* w) { db.check(rc, std::string("writing ") + w + " of " + path); };

  ok(t.meta(schema::meta::kHost, p.host), "meta");
  ok(t.meta(schema::meta::kPid, std::to_string(p.pid)), "meta");
  if (p.global_rank >= 0) ok(t.meta(schema::meta::kGlobalRank, std::to_string(p.global_rank)), "meta");
  ok(t.meta(schema::meta::kFinished, p.finished ? "1" : "0"), "meta");
  if (!p.exit_reason.empty()) ok(t.meta(schema::meta::kExitReason, p.exit_reason), "meta");
  if (p.last_flush_mono_ns) ok(t.meta(schema::meta::kLastFlushMonoNs, std::to_string(p.last_flush_mono_ns)), "meta");
  if (p.dropped_records) ok(t.meta(schema::meta::kDroppedRecords, std::to_string(p.dropped_records)), "meta");
  if (p.checkpoint_interval) {
    ok(t.meta(schema::meta::kCheckpointInterval, std::to_string(p.checkpoint_interval)), "meta");
    ok(t.meta(schema::meta::kDigestVersion, std::to_string(digest::kDigestVersion)), "meta");
  }
  if (p.retired_ops) ok(t.meta(schema::meta::kRetiredOps, std::to_string(p.retired_ops)), "meta");
  for (const auto& [k, v] : p.meta)
    if (k != "schema_version" && k != "op_time_base_mono_ns" && k != "op_wall_offset_ns") ok(t.meta(k, v), "meta");
  for (const auto& [k, v] : p.env) ok(t.env(k, v), "env");

  {
    Stmt retired(db.get(), "UPDATE comms SET retired_collectives=?, retired_digest=?, retired_through_seq=? WHERE id=?");
    for (const Comm& c : p.comms) {
      const CommRow r{.id = c.local_id, .hash = c.hash, .handle = c.handle ? c.handle : uint64_t(c.local_id) * 4096,
                      .nranks = c.nranks, .rank = c.rank, .cuda_device = c.cuda_device,
                      .parent_id = c.parent >= 0 ? p.comms[size_t(c.parent)].local_id : -1, .has_split = c.parent >= 0,
                      .split_color = c.split_color, .split_key = c.split_key, .name = c.name, .init_call = c.init_call,
                      .init_mono_ns = c.init_call, .init_rc = c.init_rc, .end = c.end_kind,
                      .created_before_tracing = c.created_before_tracing};
      ok(t.comm(r), "comm");
      if (c.retired_collectives || c.retired_through_seq || c.retired_digest)
        ok(retired.i64(1, c.retired_collectives).i64(2, int64_t(c.retired_digest)).i64(3, c.retired_through_seq)
               .i64(4, c.local_id).run(),
           "comm");
      for (const Comm::Checkpoint& k : c.checkpoints) ok(t.checkpoint({c.local_id, k.ordinal, k.seq, k.digest, k.order_count, k.order_digest}), "checkpoint");
    }
  }

  for (const auto& [id, frames] : p.stacks) {
    ok(t.stack(id, hex16(uint64_t(id))), "stack");
    for (size_t d = 0; d < frames.size(); ++d) {
      const Frame& f = frames[d];
      FrameRow r;
      r.stack_id = id;
      r.depth = int32_t(d);
      r.kind = f.kind;
      r.function = f.function;
      r.module = f.module;
      r.offset = r.kind == vocab::FrameKind::Native ? int64_t(f.offset) : -1;
      r.file = f.file;
      r.line = f.line > 0 ? f.line : -1;
      ok(t.frame(r), "frame");
    }
  }

  // Signatures: interned by every invariant field.
  using Key = std::tuple<int, vocab::Op, vocab::Dtype, int64_t, int, int, vocab::RedOp, uint64_t, int64_t, std::string,
                         int64_t, std::vector<std::tuple<vocab::Op, vocab::Dtype, int64_t, int, int, vocab::RedOp>>>;
  std::map<Key, int64_t> sigs;
  for (const Op& o : p.ops) {
    const Comm& c = p.comms.at(size_t(o.comm));
    Key k{c.local_id, o.op, o.dtype, o.count, o.root, o.peer, o.redop, o.stream, o.tid, o.thread_name, o.stack_id, {}};
    for (const OpPart& x : o.parts) std::get<11>(k).emplace_back(x.op, x.dtype, x.count, x.root, x.peer, x.redop);
    auto it = sigs.find(k);
    if (it == sigs.end()) {
      it = sigs.emplace(std::move(k), int64_t(sigs.size()) + 1).first;
      std::vector<CallFields> parts;
      for (const OpPart& x : o.parts) parts.push_back(call_fields(x));
      SignatureRow s;
      static_cast<CallFields&>(s) = call_fields(o);
      s.id = it->second;
      s.comm_id = c.local_id;
      s.stream = o.stream;
      s.tid = o.tid;
      s.thread_name = o.thread_name;
      s.stack_id = o.stack_id;
      s.nparts = int32_t(parts.size());
      s.hash = signature_hash(s, parts.data(), parts.size());
      ok(t.signature(s), "signature");
      for (size_t i = 0; i < parts.size(); ++i) ok(t.part(PartRow(s.id, int32_t(i), parts[i])), "signature part");
    }
    const bool synth = opt.synthesize_times && o.issue_mono_ns == 0;
    const int64_t issue = synth ? o.call_index * 1000 : o.issue_mono_ns;
    const OpRow r{.call_index = o.call_index, .sig = it->second, .seq = sequenced(o) ? o.seq : 0, .issue_mono_ns = issue,
                  .issue_wall_ns = synth ? o.call_index * 1000 : o.issue_wall_ns, .return_mono_ns = issue > INT64_MAX - 10 ? INT64_MAX : issue + 10,  // issue comes from a file
                  .completed = o.completed, .complete_mono_ns = o.complete_mono_ns, .state = o.state, .rc = o.rc,
                  .group_id = o.group_id, .graph_exec = o.graph_exec, .origin_call = o.origin_call};
    ok(t.op(r), "op");
  }
  for (const Wait& w : p.waits) {
    WaitRow r;
    r.call_index = w.call_index;
    r.kind = w.kind;
    r.stream = w.stream;
    r.event = w.event;
    r.tid = w.tid;
    bool synth = opt.synthesize_times && w.begin_mono_ns == 0;
    r.begin_mono_ns = synth ? w.call_index * 1000 : w.begin_mono_ns;
    r.end_mono_ns = synth ? w.call_index * 1000 + 1 : w.end_mono_ns;
    ok(t.wait(r), "wait");
  }
  for (const HangMarker& h : p.hangs) ok(t.hang(h.mono_ns, h.wall_ns, h.in_flight, h.message), "hang");
  if (p.drops_known)
    for (const DropRange& d : p.drops)
      ok(t.drop(d.comm >= 0 && size_t(d.comm) < p.comms.size() ? p.comms[size_t(d.comm)].local_id : -1, d.first_seq,
                d.last_seq, d.records, d.reason),
         "drop");
  db.check(db.exec("COMMIT"), "commit " + path);
}

void write_trace_dir(const Trace& t, const std::string& dir, const ModelWriteOptions& opt) {
  namespace fs = std::filesystem;
  // Only files this writer names (rank-N) are replaced: a directory that holds other trace
  // files (a recorded job's: `shrink job/trace -o job`) is refused, never emptied, and a
  // symbolic link is not followed to write or delete elsewhere.
  if (fs::is_symlink(fs::symlink_status(dir)))
    throw std::runtime_error(dir + " is a symbolic link: not written through");
  fs::create_directories(dir);
  std::vector<fs::path> ours;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with(schema::kFileSuffix)) continue;
    const std::string stem = name.substr(0, name.size() - std::strlen(schema::kFileSuffix));
    const bool written_here = stem.size() > 5 && stem.starts_with("rank-") &&
                              stem.find_first_not_of("0123456789", stem[5] == '-' ? 6 : 5) == std::string::npos;
    if (!written_here)
      throw std::runtime_error(dir + " holds trace files not written by lockstep here (" + name +
                               "): not replaced; choose another directory");
    ours.push_back(e.path());
  }
  for (const fs::path& f : ours) fs::remove(f);
  for (const Process& p : t.processes)
    write_process(p, dir + "/" + schema::safe_file_component("rank-" + std::to_string(p.global_rank)) + schema::kFileSuffix,
                  opt);
}

}  // namespace lockstep::trace_file
