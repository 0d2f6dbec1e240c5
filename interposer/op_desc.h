// What a hook knows about one NCCL call, in one fixed-size description (after NCCL's ncclInfo):
// the hooks fill it, the core records it. Names here are the schema's ops.op / dtype / redop.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lockstep::rec {

enum class OpKind : uint8_t {
  AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Gather, Scatter, Send, Recv,
  SendRecv,   // grouped point-to-point that is not a full all-to-all
  Coalesced,  // several collectives (or collectives + p2p) in one group
};

inline const char* op_name(OpKind k) {
  static const char* const names[] = {"all_reduce", "broadcast", "reduce",  "all_gather",
                                      "reduce_scatter", "all_to_all", "gather", "scatter",
                                      "send", "recv", "send_recv", "coalesced"};
  return names[static_cast<int>(k)];
}

inline bool is_p2p(OpKind k) { return k == OpKind::Send || k == OpKind::Recv; }

// ncclDataType_t value -> schema name; nullptr when unknown/mixed (-1).
inline const char* dtype_name(int dt) {
  static const char* const names[] = {"int8",    "uint8",   "int32",    "uint32",
                                      "int64",   "uint64",  "float16",  "float32",
                                      "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return dt >= 0 && dt < 12 ? names[dt] : nullptr;
}

// ncclRedOp_t value -> schema name; values >= ncclNumOps are user ops (PreMulSum).
inline const char* redop_name(int op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  if (op < 0) return nullptr;
  return op < 5 ? names[op] : "premulsum";
}

struct OpDesc {
  OpKind kind;
  int dtype;        // ncclDataType_t
  size_t count;     // as passed to NCCL
  int root;         // -1 = none
  int peer;         // -1 = none
  int redop;        // -1 = none
  void* comm;       // ncclComm_t
  void* stream;     // cudaStream_t
};

}  // namespace lockstep::rec
