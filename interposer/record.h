// The fixed-size records the hot path hands to the writer thread (one queue slot each). Fields
// map 1:1 to schema/trace_schema.h columns; -1 (or 0 where noted) stands for SQL NULL.
#pragma once

#include <cstdint>

#include "op_desc.h"

namespace lockstep::rec {

using OpState = vocab::State;
inline const char* state_name(OpState s) { return vocab::name(s); }

struct OpRec {
  int64_t call_index;
  int64_t comm_id;
  int64_t seq;          // 0 = NULL
  int64_t count;        // as passed (size_t bits)
  int64_t group_id;     // -1 = NULL
  int64_t issue_mono;
  int64_t issue_wall;
  int64_t return_mono;
  uint64_t stream;
  uint64_t capture_id;  // 0 = not capturing
  uint64_t graph_id;
  int64_t origin_call;  // -1 = NULL
  uint64_t graph_exec;  // 0 = NULL
  uint64_t stack_hash;  // 0 = no stack
  int32_t tid;
  int32_t root, peer, redop;  // -1 = NULL
  int32_t rc;
  int8_t dtype;         // -1 = NULL (unknown or mixed)
  OpKind op;
  OpState state;
  bool has_parts;       // PartRecs follow (a grouped op): the writer waits for them
};

struct PartRec {
  int64_t call_index;
  int64_t count;
  int32_t part;
  int32_t root, peer, redop;
  int8_t dtype;
  OpKind op;
  int32_t nparts;       // how many parts the op has
};

struct CommInitRec {
  int64_t id;
  uint64_t hash;
  uint64_t handle;
  int64_t parent_id;    // -1 = NULL
  int64_t init_call;
  int64_t init_mono;
  int32_t nranks, rank, device;  // device -1 = NULL
  int32_t color, key;
  int32_t rc;
  bool has_split;
  char name[40];        // "" = NULL (truncated ncclConfig_t.commName)
  bool before_tracing;  // first seen in use: created before tracing began
};

using CommEnd = vocab::CommEnd;
inline const char* comm_end_name(CommEnd e) { return vocab::name(e); }

struct CommEndRec {
  int64_t id;
  int64_t call_index;
  int64_t mono;
  CommEnd kind;
};

struct ApiRec {
  int64_t call_index;
  int64_t comm_id;      // -1 = NULL
  int64_t mono;
  const char* name;     // static string
  int32_t rc;
  char detail[64];
};

struct CompletionRec {
  int64_t call_index;
  int64_t mono;
};

struct GraphLaunchRec {
  int64_t call_index;
  uint64_t exec;
  uint64_t graph;       // 0 = NULL
  uint64_t stream;
  int64_t mono;
};

using WaitKind = vocab::Wait;
inline const char* wait_name(WaitKind k) { return vocab::name(k); }

struct WaitRec {
  int64_t call_index;
  uint64_t stream;
  uint64_t event;
  int64_t begin_mono;
  int64_t end_mono;     // -1 = NULL
  int32_t tid;
  WaitKind kind;
};

enum class RecKind : uint8_t { Op, Part, CommInit, CommEnd, Api, Completion, GraphLaunch, Wait };

struct Record {
  RecKind kind;
  union {
    OpRec op;
    PartRec part;
    CommInitRec comm;
    CommEndRec end;
    ApiRec api;
    CompletionRec done;
    GraphLaunchRec launch;
    WaitRec wait;
  };
};

}  // namespace lockstep::rec
