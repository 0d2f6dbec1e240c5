// What a hook knows about one NCCL call, in one fixed-size description (after NCCL's ncclInfo):
// the hooks fill it, the core records it. Kinds and names are the vocabulary's (schema/vocab.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "vocab.h"

namespace lockstep::rec {

using OpKind = vocab::Op;
inline const char* op_name(OpKind k) { return vocab::name(k); }

// ncclDataType_t value -> schema name; nullptr when unknown/mixed (-1).
inline const char* dtype_name(int dt) {
  const vocab::Dtype d = vocab::dtype_from_nccl(dt);
  return d == vocab::Dtype::Mixed ? nullptr : vocab::name(d);
}

// ncclRedOp_t value -> schema name; values >= ncclNumOps are user ops (PreMulSum).
inline const char* redop_name(int op) {
  const vocab::RedOp r = vocab::redop_from_nccl(op);
  return r == vocab::RedOp::None ? nullptr : vocab::name(r);
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
