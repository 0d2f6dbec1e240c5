// The keys of a trace's meta table, declared once: the writers (interposer/writer.cpp, the
// Flight Recorder converter, the test and model writers) write them through these names, the
// readers (analyzer/trace_loader.cpp and every command after it) read them through these names.
// What each one means: the comment above `meta` in trace_schema.h and docs/schema.md.
#pragma once

#include <optional>
#include <string_view>

namespace lockstep::schema::meta {

// Written once at open.
inline constexpr const char* kSchemaVersion = "schema_version";
inline constexpr const char* kLockstepVersion = "lockstep_version";
inline constexpr const char* kHost = "host";
inline constexpr const char* kPid = "pid";
inline constexpr const char* kGlobalRank = "global_rank";
inline constexpr const char* kGlobalRankSource = "global_rank_source";
inline constexpr const char* kCmdline = "cmdline";
inline constexpr const char* kExe = "exe";
inline constexpr const char* kNcclVersion = "nccl_version";
inline constexpr const char* kNcclLibrary = "nccl_library";
inline constexpr const char* kStackMode = "stack_mode";
inline constexpr const char* kUnwinder = "unwinder";
inline constexpr const char* kStartWallNs = "start_wall_ns";
inline constexpr const char* kStartMonoNs = "start_mono_ns";
inline constexpr const char* kJournalMode = "journal_mode";
inline constexpr const char* kDigestVersion = "digest_version";
inline constexpr const char* kCheckpointInterval = "checkpoint_interval";
inline constexpr const char* kMaxMb = "max_mb";
inline constexpr const char* kOpTimeBaseMonoNs = "op_time_base_mono_ns";
inline constexpr const char* kOpWallOffsetNs = "op_wall_offset_ns";
inline constexpr const char* kProfilerPlugin = "profiler_plugin";

// How the process reached NCCL, written by the hooks and the profiler plugin; read by `doctor`.
inline constexpr const char* kNcclReached = "nccl_reached";      // reach names, comma-separated
inline constexpr const char* kNcclLibraries = "nccl_libraries";  // every libnccl the process mapped
inline constexpr const char* kInterposerPreloaded = "interposer_preloaded";  // "1" or "0" (plugin)
inline constexpr const char* kProfilerDropped = "profiler_dropped";  // plugin rows a full queue refused
inline constexpr const char* kReachProfilerPlugin = "profiler_plugin";  // the reach name in kNcclReached

// Updated while recording. finished: "0" or "1"; dropped_records, retired_ops, digest_gaps:
// counts (a non-negative integer; anything else makes the file corrupt evidence).
inline constexpr const char* kFinished = "finished";
inline constexpr const char* kExitReason = "exit_reason";
inline constexpr const char* kDroppedRecords = "dropped_records";
// Records the full queue sent to the spill (written, not lost), and the spill's peak bytes.
inline constexpr const char* kSpilledRecords = "spilled_records";
inline constexpr const char* kPeakSpillBytes = "peak_spill_bytes";
inline constexpr const char* kLastFlushMonoNs = "last_flush_mono_ns";
inline constexpr const char* kRetiredOps = "retired_ops";
inline constexpr const char* kDigestGaps = "digest_gaps";

// Present only when the recorder stopped recording before the process ended: the reason (one of
// kStopReasons, nothing else), a text for humans, the time.
inline constexpr const char* kRecorderStopped = "recorder_stopped";
inline constexpr const char* kRecorderStoppedDetail = "recorder_stopped_detail";
inline constexpr const char* kRecorderStoppedMonoNs = "recorder_stopped_mono_ns";
inline constexpr const char* kStopReasons[] = {"disk_full", "file_size_limit", "io_error",
                                              "read_only", "unwritable",      "internal"};
constexpr bool known_stop_reason(std::string_view v) {
  for (std::string_view r : kStopReasons)
    if (v == r) return true;
  return false;
}

// Written by the Flight Recorder converter (flightrec/to_model.cpp). fr_history_dropped: "1" when
// the dump's ring lost entries (records before fr_first_record_id, or gaps in record_id), "0"
// when it holds every entry since the process group started; nothing else.
inline constexpr const char* kSource = "source";
inline constexpr const char* kSourceFlightRecorder = "pytorch_flight_recorder";  // kSource of a converted dump
inline constexpr const char* kFrDump = "fr_dump";  // Process::exit_reason of a converted dump
inline constexpr const char* kFrDumpFile = "fr_dump_file";  // the dump's own path (Process::shown_path)
inline constexpr const char* kFrFormat = "fr_format";
inline constexpr const char* kFrVersion = "fr_version";
inline constexpr const char* kFrCommLibVersion = "fr_comm_lib_version";
inline constexpr const char* kFrPgStatusPrefix = "fr_pg_status.";  // + <pg> "." <counter>
inline constexpr const char* kGlobalRankFromFileName = "fr_file_name";  // kGlobalRankSource of a dump
// Per process group, + <pg name>: not a member (its global rank), the first seq of its window,
// where its members' histories were aligned from and how many entries that dropped.
inline constexpr const char* kFrNotMemberPrefix = "fr_not_member.";
inline constexpr const char* kFrWindowFirstSeqPrefix = "fr_window_first_seq.";
inline constexpr const char* kFrAlignedFromSeqPrefix = "fr_aligned_from_seq.";
inline constexpr const char* kFrAlignedDroppedPrefix = "fr_aligned_dropped.";
inline constexpr const char* kFrFileName = "fr_file_name";
inline constexpr const char* kFrEntries = "fr_entries";
inline constexpr const char* kFrRingWindow = "fr_ring_window";
inline constexpr const char* kFrFirstRecordId = "fr_first_record_id";
inline constexpr const char* kFrHistoryDropped = "fr_history_dropped";

}  // namespace lockstep::schema::meta
