#include "emit.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "comm_index.h"
#include "env_vars.h"
#include "file_io.h"
#include "identity.h"
#include "rank_env.h"
#include "trace_writer.h"

namespace lockstep::shrink {

namespace {

// The minimal trace as global communicators and per-rank steps (ops and waits in call order).
struct Step {
  const Op* op = nullptr;
  const Wait* wait = nullptr;
  int comm = -1;    // global communicator index
  int stream = 0;   // per-rank stream index
  int event = -1;   // global event index
};
struct GComm {
  std::string label;
  int nranks = 0;
  std::vector<int> rank_of;  // comm rank of each global rank, -1 not a member
  std::vector<int> members;  // global rank of each comm rank
};
struct Layout {
  int nranks = 0;
  std::vector<GComm> comms;
  std::vector<std::vector<Step>> steps;  // per rank
  int streams = 1;                       // max streams of a rank
  int events = 0;
  int64_t max_bytes = 256;
  int ops = 0;
};

using vocab::Dtype;
using OpKind = vocab::Op;
using vocab::RedOp;
using WaitKind = vocab::Wait;

// By vocab::Dtype (= ncclDataType_t numbering).
constexpr const char* kNcclDtypes[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",
                                       "ncclInt64",   "ncclUint64",  "ncclFloat16",  "ncclFloat32",
                                       "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
std::string nccl_dtype(Dtype d) {
  return d == Dtype::Mixed ? "ncclInt8" : kNcclDtypes[static_cast<int>(d)];  // NULL (mixed) dtype: bytes
}
int element_bytes(Dtype d) { return d == Dtype::Mixed ? 1 : vocab::dtype_size(d); }
std::string nccl_redop(RedOp r) {
  switch (r) {
    case RedOp::Prod: return "ncclProd";
    case RedOp::Max: return "ncclMax";
    case RedOp::Min: return "ncclMin";
    case RedOp::Avg: return "ncclAvg";
    default: return "ncclSum";  // sum, premulsum (scalar not recorded)
  }
}

Layout layout_of(const Trace& t) {
  Layout L;
  L.nranks = static_cast<int>(t.processes.size());
  std::map<uint64_t, int> events;
  std::vector<const Process*> procs;
  for (const Process& p : t.processes) procs.push_back(&p);
  const CommJoin join = join_comms(procs);
  for (const GlobalComm& gc : join.comms) {
    GComm g;
    g.label = comm_short_name(gc.hash, gc.name);
    g.nranks = gc.nranks;
    g.rank_of.assign(L.nranks, -1);
    g.members.assign(gc.nranks, -1);
    for (const CommMember& m : gc.members) {
      const int global = t.processes[m.proc].global_rank;
      g.rank_of[global] = m.rank;
      if (m.rank >= 0 && m.rank < gc.nranks) g.members[m.rank] = global;
    }
    L.comms.push_back(std::move(g));
  }
  L.steps.resize(L.nranks);
  for (size_t pi = 0; pi < t.processes.size(); ++pi) {
    const Process& p = t.processes[pi];
    std::map<uint64_t, int> streams;
    auto stream_of = [&](uint64_t v) { return streams.try_emplace(v, static_cast<int>(streams.size())).first->second; };
    std::vector<Step> v;
    size_t oi = 0, wi = 0;
    while (oi < p.ops.size() || wi < p.waits.size()) {
      Step s;
      if (wi >= p.waits.size() || (oi < p.ops.size() && p.ops[oi].call_index < p.waits[wi].call_index)) {
        s.op = &p.ops[oi++];
        s.comm = join.gcomm[pi].at(s.op->comm);
        if (s.comm < 0) throw std::runtime_error("emit: " + p.path + " holds a communicator twice");
        s.stream = stream_of(s.op->stream);
        const int n = L.comms[s.comm].nranks;
        auto bytes = [&](Dtype d, int64_t c) {  // counts from the trace: no overflow
          return static_cast<int64_t>(element_bytes(d)) * std::clamp<int64_t>(c, 0, int64_t{1} << 40) * std::clamp(n, 1, 1 << 20);
        };
        L.max_bytes = std::max(L.max_bytes, bytes(s.op->dtype, s.op->count));
        for (const OpPart& part : s.op->parts) L.max_bytes = std::max(L.max_bytes, bytes(part.dtype == Dtype::Mixed ? s.op->dtype : part.dtype, part.count));
        ++L.ops;
      } else {
        s.wait = &p.waits[wi++];
        s.stream = stream_of(s.wait->stream);
        if (s.wait->kind == WaitKind::EventSync || s.wait->kind == WaitKind::StreamWaitEvent || s.wait->kind == WaitKind::EventRecord)
          s.event = events.try_emplace(s.wait->event, static_cast<int>(events.size())).first->second;
      }
      v.push_back(s);
    }
    L.streams = std::max(L.streams, static_cast<int>(streams.size()));
    L.steps[p.global_rank] = std::move(v);
  }
  L.events = static_cast<int>(events.size());
  return L;
}

// ---------------------------------------------------------------------------------------------
// C

std::string c_call(OpKind op, Dtype dtype, int64_t count, int root, int peer, RedOp redop, const std::string& comm,
                   const std::string& stream) {
  const std::string n = std::to_string(count), dt = nccl_dtype(dtype), ro = nccl_redop(redop);
  const std::string r = std::to_string(std::max(root, 0)), tail = ", " + comm + ", " + stream + "));";
  if (op == OpKind::AllReduce) return "NC(ncclAllReduce(in, out, " + n + ", " + dt + ", " + ro + tail;
  if (op == OpKind::Broadcast) return "NC(ncclBroadcast(in, out, " + n + ", " + dt + ", " + r + tail;
  if (op == OpKind::Reduce) return "NC(ncclReduce(in, out, " + n + ", " + dt + ", " + ro + ", " + r + tail;
  if (op == OpKind::AllGather) return "NC(ncclAllGather(in, out, " + n + ", " + dt + tail;
  if (op == OpKind::ReduceScatter) return "NC(ncclReduceScatter(in, out, " + n + ", " + dt + ", " + ro + tail;
  if (op == OpKind::AllToAll) return "NC(ncclAlltoAll(in, out, " + n + ", " + dt + tail;
  if (op == OpKind::Gather) return "NC(ncclGather(in, out, " + n + ", " + dt + ", " + r + tail;
  if (op == OpKind::Scatter) return "NC(ncclScatter(in, out, " + n + ", " + dt + ", " + r + tail;
  if (op == OpKind::Send) return "NC(ncclSend(in, " + n + ", " + dt + ", " + std::to_string(peer) + tail;
  if (op == OpKind::Recv) return "NC(ncclRecv(out, " + n + ", " + dt + ", " + std::to_string(peer) + tail;
  throw std::runtime_error(std::string("the C reproducer cannot express op '") + vocab::name(op) + "'");
}

std::string comment_safe(std::string s) {
  for (size_t p; (p = s.find("*/")) != std::string::npos;) s.replace(p, 2, "* /");
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return s;
}

}  // namespace

// "\"RANK\", \"SLURM_PROCID\", " for a C array initializer.
template <typename Table>
std::string c_names(const Table& table) {
  std::string out;
  for (const RankVariable& v : table) out += "\"" + std::string(v.name) + "\", ";
  return out;
}

std::string emit_c(const Trace& t, const std::string& title) {
  const Layout L = layout_of(t);
  const int C = static_cast<int>(L.comms.size());
  std::ostringstream o;
  o << "/* lockstep shrink reproducer: " << comment_safe(title) << "\n"
    << " * " << L.nranks << " ranks, " << C << " communicator" << (C == 1 ? "" : "s") << ", " << L.ops
    << " ops. One process per rank: its rank and the world size from the environment (lockstep-launch,\n"
    << " * torchrun, srun, mpirun, or set RANK and WORLD_SIZE), ncclUniqueIds through files in\n"
    << " * $LOCKSTEP_RENDEZVOUS_DIR.\n"
    << " * Build and run: see README.md. Expected: every rank prints \"waiting\" and never returns. */\n"
    << "#include <cuda.h>\n#include <nccl.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n\n"
    << "static int rank;\n"
    << "#define CU(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { fprintf(stderr, \"rank %d: %s: error %d\\n\", rank, #x, (int)r_); exit(1); } } while (0)\n"
    << "#define NC(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { fprintf(stderr, \"rank %d: %s: %s\\n\", rank, #x, ncclGetErrorString(r_)); exit(1); } } while (0)\n\n"
    << "/* Comm rank 0 publishes the id as $LOCKSTEP_RENDEZVOUS_DIR/repro-comm<c>.id; the others poll for it. */\n"
    << "static void comm_init(ncclComm_t* comm, int c, int nranks, int crank) {\n"
    << "  const char* dir = getenv(\"" << schema::env::kRendezvousDir << "\");\n"
    << "  const char* launch = getenv(\"" << schema::env::kLaunchId << "\");\n"
    << "  char path[4096], tmp[4200];\n"
    << "  ncclUniqueId id;\n"
    << "  if (!dir || !*dir) { fprintf(stderr, \"set LOCKSTEP_RENDEZVOUS_DIR to a fresh directory every rank sees\\n\"); exit(2); }\n"
    << "  snprintf(path, sizeof path, \"%s/repro-comm%d%s%s.id\", dir, c, launch ? \".\" : \"\", launch ? launch : \"\");\n"
    << "  if (crank == 0) {\n"
    << "    NC(ncclGetUniqueId(&id));\n"
    << "    snprintf(tmp, sizeof tmp, \"%s.tmp.%d\", path, (int)getpid());\n"
    << "    FILE* f = fopen(tmp, \"wb\");\n"
    << "    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) { perror(tmp); exit(1); }\n"
    << "  } else {\n"
    << "    for (;;) {\n"
    << "      FILE* f = fopen(path, \"rb\");\n"
    << "      if (f) { size_t got = fread(&id, sizeof id, 1, f); fclose(f); if (got == 1) break; }\n"
    << "      usleep(2000);\n"
    << "    }\n"
    << "  }\n"
    << "  NC(ncclCommInitRank(comm, nranks, id, crank));\n"
    << "}\n\n"
    << "/* The launchers' variables, the first one set wins (lockstep's schema/rank_env.h). */\n"
    << "static const char* first_env(const char* const* names) {\n"
    << "  for (; *names; ++names) { const char* v = getenv(*names); if (v && *v) return v; }\n"
    << "  return NULL;\n}\n"
    << "static const char* const rank_vars[] = {" << c_names(kGlobalRankVariables) << "NULL};\n"
    << "static const char* const size_vars[] = {" << c_names(kWorldSizeVariables) << "NULL};\n"
    << "static const char* const local_vars[] = {" << c_names(kLocalRankVariables) << "NULL};\n\n"
    << "int main(void) {\n"
    << "  const char* r = first_env(rank_vars);\n  const char* w = first_env(size_vars);\n  const char* lr = first_env(local_vars);\n"
    << "  if (!r || !w || atoi(w) != " << L.nranks << ") { fprintf(stderr, \"run with " << L.nranks
    << " processes: lockstep-launch -n " << L.nranks << ", srun -n " << L.nranks << ", or RANK and WORLD_SIZE=" << L.nranks
    << "\\n\"); return 2; }\n"
    << "  rank = atoi(r);\n"
    << "  CUdevice dev; CUcontext ctx; int ndev;\n"
    << "  CU(cuInit(0)); CU(cuDeviceGetCount(&ndev)); CU(cuDeviceGet(&dev, (lr ? atoi(lr) : rank) % ndev));\n"
    << "  CU(cuDevicePrimaryCtxRetain(&ctx, dev)); CU(cuCtxSetCurrent(ctx));\n"
    << "  CUstream s[" << L.streams << "];\n"
    << "  for (int i = 0; i < " << L.streams << "; ++i) CU(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));\n";
  if (L.events > 0)
    o << "  CUevent ev[" << L.events << "];\n  for (int i = 0; i < " << L.events
      << "; ++i) CU(cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING));\n";
  o << "  CUdeviceptr sb, rb;\n"
    << "  CU(cuMemAlloc(&sb, " << L.max_bytes << ")); CU(cuMemAlloc(&rb, " << L.max_bytes << "));\n"
    << "  CU(cuMemsetD8(sb, 0, " << L.max_bytes << ")); CU(cuMemsetD8(rb, 0, " << L.max_bytes << "));\n"
    << "  const void* in = (const void*)sb; void* out = (void*)rb;\n"
    << "  /* Communicators, created in the same order on every rank: comm_rank[c][rank], -1 = not a member. */\n"
    << "  ncclComm_t comm[" << C << "] = {0};\n"
    << "  static const int nranks[" << C << "] = {";
  for (int c = 0; c < C; ++c) o << (c ? ", " : "") << L.comms[c].nranks;
  o << "};\n  static const int comm_rank[" << C << "][" << L.nranks << "] = {";
  for (int c = 0; c < C; ++c) {
    o << (c ? ", " : "") << "{";
    for (int r2 = 0; r2 < L.nranks; ++r2) o << (r2 ? ", " : "") << L.comms[c].rank_of[r2];
    o << "}";
  }
  o << "};\n"
    << "  for (int c = 0; c < " << C << "; ++c)\n"
    << "    if (comm_rank[c][rank] >= 0) comm_init(&comm[c], c, nranks[c], comm_rank[c][rank]);\n"
    << "  printf(\"rank %d: issuing its ops\\n\", rank);\n  fflush(stdout);\n"
    << "  switch (rank) {\n";
  for (int rk = 0; rk < L.nranks; ++rk) {
    o << "    case " << rk << ":\n";
    int64_t open_group = -1;
    for (const Step& s : L.steps[rk]) {
      const std::string st = "s[" + std::to_string(s.stream) + "]";
      if (open_group >= 0 && (!s.op || s.op->group_id != open_group)) {
        o << "      NC(ncclGroupEnd());\n";
        open_group = -1;
      }
      if (s.wait) {
        const std::string ev = "ev[" + std::to_string(std::max(s.event, 0)) + "]";
        switch (s.wait->kind) {
          case WaitKind::StreamSync: o << "      CU(cuStreamSynchronize(" << st << "));\n"; break;
          case WaitKind::DeviceSync: o << "      CU(cuCtxSynchronize());\n"; break;
          case WaitKind::EventRecord: o << "      CU(cuEventRecord(" << ev << ", " << st << "));\n"; break;
          case WaitKind::EventSync: o << "      CU(cuEventSynchronize(" << ev << "));\n"; break;
          case WaitKind::StreamWaitEvent: o << "      CU(cuStreamWaitEvent(" << st << ", " << ev << ", 0));\n"; break;
        }
        continue;
      }
      const Op& op = *s.op;
      if (op.group_id >= 0 && open_group < 0) {
        o << "      NC(ncclGroupStart());\n";
        open_group = op.group_id;
      }
      const std::string cm = "comm[" + std::to_string(s.comm) + "]";
      const std::string note = "  /* " + comment_safe(L.comms[s.comm].label) + " */";
      if (op.parts.empty()) {
        o << "      " << c_call(op.op, op.dtype, op.count, op.root, op.peer, op.redop, cm, st) << note << "\n";
      } else {
        o << "      NC(ncclGroupStart());  /* " << comment_safe(vocab::name(op.op)) << " on " << comment_safe(L.comms[s.comm].label) << " */\n";
        for (const OpPart& p : op.parts)
          o << "      " << c_call(p.op, p.dtype == Dtype::Mixed ? op.dtype : p.dtype, p.count, p.root, p.peer, p.redop, cm, st) << "\n";
        o << "      NC(ncclGroupEnd());\n";
      }
    }
    if (open_group >= 0) o << "      NC(ncclGroupEnd());\n";
    o << "      break;\n";
  }
  o << "  }\n"
    << "  printf(\"rank %d: all ops issued, waiting for them (the bug: this never returns)\\n\", rank);\n  fflush(stdout);\n"
    << "  for (int i = 0; i < " << L.streams << "; ++i) CU(cuStreamSynchronize(s[i]));\n"
    << "  printf(\"rank %d: completed: the deadlock did not reproduce\\n\", rank);\n"
    << "  for (int c = 0; c < " << C << "; ++c)\n    if (comm[c]) NC(ncclCommDestroy(comm[c]));\n"
    << "  return 0;\n}\n";
  return o.str();
}

// ---------------------------------------------------------------------------------------------
// Python

namespace {

// By vocab::Dtype.
constexpr const char* kTorchDtypes[] = {"torch.int8",    "torch.uint8",   "torch.int32",   "torch.uint32",
                                        "torch.int64",   "torch.uint64",  "torch.float16", "torch.float32",
                                        "torch.float64", "torch.bfloat16", "torch.float8_e4m3fn", "torch.float8_e5m2"};
std::string torch_dtype(Dtype d) { return d == Dtype::Mixed ? "torch.uint8" : kTorchDtypes[static_cast<int>(d)]; }
std::string torch_redop(RedOp r) {
  switch (r) {
    case RedOp::Prod: return "dist.ReduceOp.PRODUCT";
    case RedOp::Max: return "dist.ReduceOp.MAX";
    case RedOp::Min: return "dist.ReduceOp.MIN";
    case RedOp::Avg: return "dist.ReduceOp.AVG";
    default: return "dist.ReduceOp.SUM";
  }
}
// One torch.distributed call (p2p: `p2p` true gives a dist.P2POp for batch_isend_irecv).
std::string py_call(OpKind op, Dtype dtype, int64_t count, int root_global, int peer_global, RedOp redop,
                    const std::string& g, int n, bool p2p) {
  const std::string dt = torch_dtype(dtype), c = std::to_string(count), cn = std::to_string(count * n);
  auto t = [&](const std::string& numel) { return "torch.zeros(" + numel + ", dtype=" + dt + ", device=dev)"; };
  if (op == OpKind::AllReduce) return "dist.all_reduce(" + t(c) + ", op=" + torch_redop(redop) + ", group=" + g + ")";
  if (op == OpKind::Broadcast) return "dist.broadcast(" + t(c) + ", src=" + std::to_string(root_global) + ", group=" + g + ")";
  if (op == OpKind::Reduce)
    return "dist.reduce(" + t(c) + ", dst=" + std::to_string(root_global) + ", op=" + torch_redop(redop) + ", group=" + g + ")";
  if (op == OpKind::AllGather) return "dist.all_gather_into_tensor(" + t(cn) + ", " + t(c) + ", group=" + g + ")";
  if (op == OpKind::ReduceScatter)
    return "dist.reduce_scatter_tensor(" + t(c) + ", " + t(cn) + ", op=" + torch_redop(redop) + ", group=" + g + ")";
  if (op == OpKind::AllToAll) return "dist.all_to_all_single(" + t(cn) + ", " + t(cn) + ", group=" + g + ")";
  if (op == OpKind::Gather) return "dist.gather(" + t(c) + ", [" + t(c) + " for _ in range(" + std::to_string(n) + ")] if rank == " +
                             std::to_string(root_global) + " else None, dst=" + std::to_string(root_global) + ", group=" + g + ")";
  if (op == OpKind::Scatter) return "dist.scatter(" + t(c) + ", [" + t(c) + " for _ in range(" + std::to_string(n) + ")] if rank == " +
                              std::to_string(root_global) + " else None, src=" + std::to_string(root_global) + ", group=" + g + ")";
  if (op == OpKind::Send || op == OpKind::Recv) {
    const std::string peer = std::to_string(peer_global);
    if (p2p) return "dist.P2POp(dist." + std::string(op == OpKind::Send ? "isend" : "irecv") + ", " + t(c) + ", " + peer + ", group=" + g + ")";
    return std::string(op == OpKind::Send ? "dist.send(" : "dist.recv(") + t(c) + ", " + peer + ", group=" + g + ")";
  }
  throw std::runtime_error(std::string("the PyTorch reproducer cannot express op '") + vocab::name(op) + "'");
}

}  // namespace

std::string emit_python(const Trace& t, const std::string& title) {
  const Layout L = layout_of(t);
  const int C = static_cast<int>(L.comms.size());
  std::ostringstream o;
  o << "# lockstep shrink reproducer: " << comment_safe(title) << "\n"
    << "# " << L.nranks << " ranks, " << C << " process group" << (C == 1 ? "" : "s") << ", " << L.ops
    << " ops: the recorded NCCL calls as torch.distributed calls, in the same order.\n"
    << "#   torchrun --nproc-per-node " << L.nranks << " repro.py    (expected: hangs; the NCCL watchdog may abort it after its timeout)\n"
    << "import os\n\nimport torch\nimport torch.distributed as dist\n\n"
    << "local_rank = int(os.environ.get(\"LOCAL_RANK\", os.environ.get(\"RANK\", \"0\")))\n"
    << "dev = torch.device(\"cuda\", local_rank % torch.cuda.device_count())\n"
    << "torch.cuda.set_device(dev)\n"
    << "# device_id: communicators are created eagerly (new_group too), not at their first collective,\n"
    << "# so the hang is in the ops below and not in a lazy communicator creation.\n"
    << "dist.init_process_group(\"nccl\", device_id=dev)\n"
    << "rank = dist.get_rank()\n"
    << "assert dist.get_world_size() == " << L.nranks << ", \"run with " << L.nranks << " processes\"\n"
    << "# One process group per recorded communicator (members in communicator-rank order); every rank calls\n"
    << "# new_group for every group, in the same order, as torch.distributed requires.\n"
    << "groups = []\n";
  for (int c = 0; c < C; ++c) {
    o << "groups.append(dist.new_group([";
    for (int k = 0; k < L.comms[c].nranks; ++k) o << (k ? ", " : "") << L.comms[c].members[k];
    o << "]))  # " << comment_safe(L.comms[c].label) << "\n";
  }
  o << "streams = [torch.cuda.Stream() for _ in range(" << L.streams << ")]\n";
  if (L.events > 0) o << "events = [torch.cuda.Event() for _ in range(" << L.events << ")]\n";
  o << "print(f\"rank {rank}: issuing its ops\", flush=True)\n";
  for (int rk = 0; rk < L.nranks; ++rk) {
    o << (rk == 0 ? "if" : "elif") << " rank == " << rk << ":\n";
    bool any = false;
    for (size_t i = 0; i < L.steps[rk].size(); ++i) {
      const Step& s = L.steps[rk][i];
      const std::string st = "streams[" + std::to_string(s.stream) + "]";
      any = true;
      if (s.wait) {
        const std::string ev = "events[" + std::to_string(std::max(s.event, 0)) + "]";
        switch (s.wait->kind) {
          case WaitKind::StreamSync: o << "    " << st << ".synchronize()\n"; break;
          case WaitKind::DeviceSync: o << "    torch.cuda.synchronize()\n"; break;
          case WaitKind::EventRecord: o << "    " << ev << ".record(" << st << ")\n"; break;
          case WaitKind::EventSync: o << "    " << ev << ".synchronize()\n"; break;
          case WaitKind::StreamWaitEvent: o << "    " << st << ".wait_event(" << ev << ")\n"; break;
        }
        continue;
      }
      const Op& op = *s.op;
      const GComm& gc = L.comms[s.comm];
      const std::string g = "groups[" + std::to_string(s.comm) + "]";
      auto global = [&](int crank) { return crank >= 0 && crank < gc.nranks ? gc.members[crank] : -1; };
      o << "    with torch.cuda.stream(" << st << "):\n";
      std::vector<std::pair<std::string, bool>> calls;  // (call, is p2p)
      if (op.parts.empty()) {
        calls.push_back({py_call(op.op, op.dtype, op.count, global(op.root), global(op.peer), op.redop, g, gc.nranks,
                                 op.group_id >= 0 && (op.op == OpKind::Send || op.op == OpKind::Recv)),
                         op.op == OpKind::Send || op.op == OpKind::Recv});
      } else {
        for (const OpPart& p : op.parts)
          calls.push_back({py_call(p.op, p.dtype == Dtype::Mixed ? op.dtype : p.dtype, p.count, global(p.root), global(p.peer), p.redop, g,
                                   gc.nranks, true),
                           p.op == OpKind::Send || p.op == OpKind::Recv});
      }
      bool all_p2p = calls.size() > 1 || op.group_id >= 0;
      for (const auto& c : calls) all_p2p &= c.second;
      if (all_p2p) {
        o << "        for w in dist.batch_isend_irecv([";
        for (size_t k = 0; k < calls.size(); ++k) o << (k ? ", " : "") << calls[k].first;
        o << "]):\n            pass  # enqueued; completion is waited for below\n";
      } else {
        if (calls.size() > 1) o << "        # recorded as one grouped " << comment_safe(vocab::name(op.op)) << "\n";
        for (const auto& c : calls) o << "        " << c.first << "\n";
      }
    }
    if (!any) o << "    pass\n";
  }
  o << "print(f\"rank {rank}: all ops issued, waiting for them (the bug: this never returns)\", flush=True)\n"
    << "for s in streams:\n    s.synchronize()\n"
    << "print(f\"rank {rank}: completed: the deadlock did not reproduce\", flush=True)\n"
    << "dist.destroy_process_group()\n";
  return o.str();
}

void write_reproducer(const Result& r, const std::string& source_dir, const std::string& dir,
                      const std::string& replay_line) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::string title = r.signature.text();
  const std::string c = emit_c(r.minimal, title);
  const std::string py = emit_python(r.minimal, title);
  // The recorded trace is never the reproducer's: `shrink job/trace -o job` would replace it.
  std::error_code ec;
  const fs::path trace_out = fs::path(dir) / "trace";
  if (fs::equivalent(trace_out, source_dir, ec))
    throw std::runtime_error(trace_out.string() + " is the trace being shrunk: choose another -o");
  write_trace(r.minimal, trace_out.string());
  // Renamed into place: a link planted under one of these names is replaced, not written through.
  auto put = [&](const std::string& name, const std::string& text) {
    schema::write_file_replacing((fs::path(dir) / name).string(), text);
  };
  put("repro.c", c);
  put("repro.py", py);
  const int n = r.after.ranks;
  std::ostringstream o;
  o << "# Deadlock reproducer (lockstep shrink)\n\n"
    << "Shrunk from `" << source_dir << "`: " << plural(r.before.ranks, "rank", "ranks") << ", "
    << plural(r.before.comms, "communicator", "communicators") << ", " << plural(r.before.ops, "op", "ops") << " -> "
    << plural(r.after.ranks, "rank", "ranks") << ", " << plural(r.after.comms, "communicator", "communicators") << ", "
    << plural(r.after.ops, "op", "ops") << " (" << r.checks << " model checks, "
    << std::to_string(static_cast<int>(r.seconds * 1000)) << " ms).\n\n"
    << "The bug (its signature, kept by every step of the shrink; docs/shrink.md):\n\n    " << title << "\n\n"
    << "The model checker on the original:\n\n    " << r.original_check.summary << "\n\n"
    << "and on this reproducer (`lockstep replay --model trace/`):\n\n    " << r.minimal_check.summary << "\n\n"
    << "What was removed:\n\n";
  for (const auto& line : r.removed) o << "- " << line << "\n";
  if (!replay_line.empty()) o << "\nReplay of trace/ at shrink time (`lockstep replay`, the NCCL the workers loaded): " << replay_line << "\n";
  o << "\n## C (NCCL + CUDA driver API)\n\n```sh\n"
    << "cc repro.c -o repro -I$CUDA_HOME/include -L$NCCL_HOME/lib -lnccl -lcuda\n"
    << "lockstep-launch -n " << n << " --timeout 60 -- ./repro\n"
    << "# or, in an allocation: srun -n " << n << " env LOCKSTEP_RENDEZVOUS_DIR=$SCRATCH/rdv-$SLURM_JOB_ID ./repro\n"
    << "# on the CPU NCCL of lockstep's tests (build/fixture-lib):\n"
    << "cc repro.c -o repro -I/usr/local/cuda/include -Lbuild/fixture-lib -l:libnccl.so.2 -l:libcuda.so.1 -Wl,-rpath,$PWD/build/fixture-lib\n"
    << "```\n\n"
    << "Expected: every rank prints `all ops issued, waiting for them` and never returns; lockstep-launch stops them "
       "at the timeout (exit 124). Under the recorder (`lockstep run -o t -- lockstep-launch ...`) `lockstep analyze t` "
       "reports the same bug.\n\n"
    << "## PyTorch\n\n```sh\ntorchrun --nproc-per-node " << n << " repro.py\n```\n\n"
    << "Expected: hangs after `all ops issued` (the NCCL watchdog aborts the job after its timeout, 10 min by default).\n\n"
    << "## Trace\n\n```sh\nlockstep analyze trace/\nlockstep replay --model trace/\nlockstep replay trace/ --timeout 10\n```\n";
  if (r.forced_one_stream)
    o << "\nThe original completed: its inversion deadlocks only when the GPU runs one NCCL kernel at a time "
         "(\"may deadlock\"). This reproducer puts each rank's ops on one stream, which is that interleaving, so it "
         "hangs on every GPU and on the CPU NCCL.\n";
  std::string readme = o.str();  // names from the trace: no control characters
  for (char& ch : readme)
    if ((static_cast<unsigned char>(ch) < 0x20 && ch != '\n') || ch == 0x7f) ch = '?';
  put("README.md", readme);
}

}  // namespace lockstep::shrink
