// The model checker's side data of a compact schedule (schedule.h SchedProcess::threads,
// op_threads, waits), read from a trace file after the loader has read its ops.
// The loader calls it only with LoadOptions::host_waits: `lockstep analyze` never pays for it.
#pragma once

#include <sqlite3.h>

#include <optional>
#include <string>

#include "schedule.h"

namespace lockstep {

// Why the side data could not be read: an SQLite result code (busy, corrupt, ...) or 0 when
// the content itself is unusable (an unknown wait kind). The loader turns it into its skip.
struct SideReadError {
  int sqlite_rc = 0;
  std::string what;
};

// Fills sp's side data; sp.ops must be the file's sequenced ops, by call_index. op_threads_read:
// the loader filled sp.threads and sp.op_threads while it read the ops (schema 2 and later keep
// tid on the signature: one pass over the op rows, not two); only the waits are read here.
std::optional<SideReadError> read_host_waits(sqlite3* db, SchedProcess& sp, bool op_threads_read = false);

}  // namespace lockstep
