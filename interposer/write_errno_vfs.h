// "lockstep-errno": SQLite's default VFS plus the errno of the trace's last failed write,
// truncate or sync, per thread. SQLite reports SQLITE_IOERR or SQLITE_FULL but not always the
// errno behind it (a failed COMMIT rolls back and reports errno 0), and the recorder must say
// why it stopped: EFBIG (file-size limit), ENOSPC, EIO, EROFS... (writer.cpp).
#pragma once

#include <cstdint>

namespace lockstep::rec {

// Registers the VFS on first use (never as the default: the application's SQLite is untouched)
// and returns its name for sqlite3_open_v2; nullptr (the default VFS) if it cannot.
const char* write_errno_vfs_name();

// The calling thread's errno of the last failed write/truncate/sync through the VFS (0: none).
int last_write_errno();
void clear_last_write_errno();

// Writes, truncates and syncs through the VFS that have returned, in every thread: how a
// waiter tells a slow file system (it moves) from a dead one (it does not).
uint64_t write_calls_returned();

// Whether a trace file's descriptor stopped naming the trace file (the program closed it and
// opened something else under its number): the file was then left untouched (EBADF).
bool trace_descriptor_lost();

}  // namespace lockstep::rec
