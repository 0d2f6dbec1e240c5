// One Flight Recorder dump, typed: what torch's FlightRecorder::dump()/dump_json() write
// (torch/csrc/distributed/c10d/FlightRecorderDetail.hpp), checked field by field.
#pragma once

#include "text_escape.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "value.h"

namespace lockstep::flightrec {

// Ranges of the numbers a dump may hold (dump.cpp rejects a dump with a value outside them):
// record ids become call indexes (analyzer kMaxCallIndex = 2^39 - 1 is record_id + 1), sequence
// ids become 32-bit seqs, times (ns since the epoch) leave room to subtract and add them.
inline constexpr int64_t kMaxRecordId = (int64_t(1) << 39) - 2;
inline constexpr int64_t kMaxSeqId = UINT32_MAX;
inline constexpr int64_t kMaxTimeNs = int64_t(1) << 62;

struct FrFrame {
  std::string name;
  std::string filename;
  int64_t line = 0;
};

struct FrEntry {
  int64_t record_id = 0;
  int64_t pg_id = 0;
  std::string pg_name;          // process_group[0]
  std::string pg_desc;          // process_group[1]
  int64_t collective_seq_id = 0;
  int64_t p2p_seq_id = 0;
  int64_t op_id = 0;
  std::string profiling_name;   // "nccl:all_reduce", "nccl:send 0->1", ...
  std::vector<std::vector<int64_t>> input_sizes, output_sizes;
  std::vector<std::string> input_dtypes, output_dtypes;
  std::string state;            // scheduled | started | completed
  int64_t time_created_ns = 0;
  int64_t time_started_ns = 0;    // 0: not discovered
  int64_t time_completed_ns = 0;  // 0: not discovered
  bool retired = false;
  bool is_p2p = false;
  int64_t timeout_ms = 0;
  std::string thread_name;
  int64_t thread_id = 0;
  int stack = -1;               // index into FrDump::stacks; -1 = none (JSON, or stacks off)
};

struct FrGroup {
  std::string name;             // pg_config key / process_group[0]
  std::string desc;
  std::vector<int> ranks;       // global ranks, as listed
};

struct FrDump {
  std::string path;
  std::string format;           // pickle | json
  std::string version;          // "2.10"
  std::string comm_lib_version;
  std::vector<FrGroup> groups;
  std::map<std::string, std::map<std::string, int64_t>> pg_status;  // by pg_id
  std::vector<FrEntry> entries;                                     // oldest first
  std::vector<std::vector<FrFrame>> stacks;                         // distinct frame lists
};

enum class Format { kNone, kPickle, kJson };
// By content: a pickle starts with PROTO (0x80, protocol 2-5); JSON with '{' (after blanks).
Format sniff(std::string_view head);

// Throws DumpError. `path` is only used in messages and FrDump::path.
FrDump read_dump(std::string_view bytes, const std::string& path, const Limits& limits = {});
// A Document that is not a dump at all (no "version" and no "entries"/"pg_config"): callers
// ignore such files instead of listing them as unreadable.
bool looks_like_dump(const Document& doc);

// Every string a dump brings is made printable with lockstep::printable (schema/text_escape.h,
// the one escaper): control characters and invalid UTF-8 become visible escapes.
using lockstep::printable;

}  // namespace lockstep::flightrec
