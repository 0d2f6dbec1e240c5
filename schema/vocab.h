// The trace's vocabulary, defined once: every enumerated value a trace file stores (op kinds,
// op states, data types, reduction ops, wait kinds, frame kinds, communicator ends) with its
// on-disk name. The recorder writes names from these tables, readers parse them back with the
// same tables, and everything in between compares enums, never strings.
//
// Enum values are stable (they may be stored as integers): append, never reorder.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace lockstep::vocab {

namespace detail {
template <typename E, size_t N>
constexpr std::optional<E> parse(const char* const (&names)[N], std::string_view s) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<E>(i);
  return std::nullopt;
}
template <typename E, size_t N>
constexpr const char* name(const char* const (&names)[N], E e, const char* unknown) {
  auto i = static_cast<size_t>(e);
  return i < N ? names[i] : unknown;
}
}  // namespace detail

// ops.op / op_parts.op
enum class Op : uint8_t {
  AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Gather, Scatter, Send, Recv,
  SendRecv,   // grouped point-to-point that is not a full all-to-all
  Coalesced,  // several collectives (or collectives + p2p) in one group
};
inline constexpr const char* kOpNames[] = {
    "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
    "gather",     "scatter",   "send",   "recv",       "send_recv",      "coalesced"};
inline constexpr int kNumOps = 12;
constexpr const char* name(Op k) { return detail::name(kOpNames, k, "unknown"); }
constexpr std::optional<Op> parse_op(std::string_view s) { return detail::parse<Op>(kOpNames, s); }
constexpr bool is_p2p(Op k) { return k == Op::Send || k == Op::Recv || k == Op::SendRecv; }
constexpr bool is_rooted(Op k) {
  return k == Op::Broadcast || k == Op::Reduce || k == Op::Gather || k == Op::Scatter;
}

// ops.state
enum class State : uint8_t { Enqueued, Failed, Simulated, Captured, GraphLaunched };
inline constexpr const char* kStateNames[] = {"enqueued", "failed", "simulated", "captured",
                                              "graph_launched"};
constexpr const char* name(State s) { return detail::name(kStateNames, s, "unknown"); }
constexpr std::optional<State> parse_state(std::string_view s) { return detail::parse<State>(kStateNames, s); }
// Rows that enqueued work on the GPU (and so hold a sequence number).
constexpr bool enqueued_work(State s) { return s == State::Enqueued || s == State::GraphLaunched; }

// ops.dtype: the index is NCCL's ncclDataType_t value.
enum class Dtype : uint8_t {
  Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16, Float8e4m3,
  Float8e5m2,
  Mixed = 0xff,  // grouped op whose parts differ, or not known: stored as SQL NULL
};
inline constexpr const char* kDtypeNames[] = {
    "int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
    "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
constexpr const char* name(Dtype d) { return d == Dtype::Mixed ? "mixed" : detail::name(kDtypeNames, d, "unknown"); }
constexpr std::optional<Dtype> parse_dtype(std::string_view s) { return detail::parse<Dtype>(kDtypeNames, s); }
// The stored text: "" for Mixed (SQL NULL), as the trace and the outputs that copy it show it.
constexpr const char* stored_name(Dtype d) { return d == Dtype::Mixed ? "" : name(d); }
// ncclDataType_t -> Dtype (Mixed for values NCCL does not define).
constexpr Dtype dtype_from_nccl(int v) { return v >= 0 && v < 12 ? static_cast<Dtype>(v) : Dtype::Mixed; }
constexpr int dtype_size(Dtype d) {
  constexpr int sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return d == Dtype::Mixed ? 0 : sizes[static_cast<int>(d)];
}

// ops.redop: the index is ncclRedOp_t for the built-in ops; every user op (ncclRedOpCreate*) is
// PreMulSum.
enum class RedOp : uint8_t { Sum, Prod, Max, Min, Avg, PreMulSum, None = 0xff };
inline constexpr const char* kRedOpNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
constexpr const char* name(RedOp r) { return r == RedOp::None ? "" : detail::name(kRedOpNames, r, "unknown"); }
constexpr std::optional<RedOp> parse_redop(std::string_view s) { return detail::parse<RedOp>(kRedOpNames, s); }
constexpr RedOp redop_from_nccl(int v) { return v < 0 ? RedOp::None : v < 5 ? static_cast<RedOp>(v) : RedOp::PreMulSum; }

// waits.kind
enum class Wait : uint8_t { StreamSync, EventSync, DeviceSync, StreamWaitEvent, EventRecord };
inline constexpr const char* kWaitNames[] = {"stream_sync", "event_sync", "device_sync",
                                             "stream_wait_event", "event_record"};
constexpr const char* name(Wait w) { return detail::name(kWaitNames, w, "unknown"); }
constexpr std::optional<Wait> parse_wait(std::string_view s) { return detail::parse<Wait>(kWaitNames, s); }

// frames.kind
enum class FrameKind : uint8_t { Native, Python };
inline constexpr const char* kFrameKindNames[] = {"native", "python"};
constexpr const char* name(FrameKind f) { return detail::name(kFrameKindNames, f, "unknown"); }
constexpr std::optional<FrameKind> parse_frame_kind(std::string_view s) {
  return detail::parse<FrameKind>(kFrameKindNames, s);
}

// comms.end_kind
enum class CommEnd : uint8_t { Destroy, Abort, Finalize, Revoke, Alive = 0xff };
inline constexpr const char* kCommEndNames[] = {"destroy", "abort", "finalize", "revoke"};
constexpr const char* name(CommEnd e) { return e == CommEnd::Alive ? "" : detail::name(kCommEndNames, e, "unknown"); }
constexpr std::optional<CommEnd> parse_comm_end(std::string_view s) {
  return detail::parse<CommEnd>(kCommEndNames, s);
}

// JSON (nlohmann, found by argument-dependent lookup): a value is written as its name, never as
// its number. Dtype::Mixed and RedOp::None as "" (the stored text).
template <class Json> void to_json(Json& j, Op v) { j = name(v); }
template <class Json> void to_json(Json& j, State v) { j = name(v); }
template <class Json> void to_json(Json& j, Dtype v) { j = stored_name(v); }
template <class Json> void to_json(Json& j, RedOp v) { j = name(v); }
template <class Json> void to_json(Json& j, Wait v) { j = name(v); }
template <class Json> void to_json(Json& j, FrameKind v) { j = name(v); }
template <class Json> void to_json(Json& j, CommEnd v) { j = name(v); }

}  // namespace lockstep::vocab
