// The VFS readers open trace files with: the platform's (unix) VFS, but a main database file
// opened read-only is read a window of 256 KiB at a time instead of a page at a time. A trace
// file has 1 KiB pages and the loader reads most of them (a communicator read whole scans to the
// file's first row): 263 pread calls a file of 267 pages, each a system call whose entry and exit
// cost more than its copy on a virtual machine. With the window: one fstat and one pread.
//
// The window is valid while the connection holds its shared lock (no writer can change the file
// then) and dropped when the lock is released; a file in WAL mode (its header's read/write
// versions 2: pages may also be in the -wal file, and a checkpoint writes the file while readers
// read) is read a page at a time, as by the unix VFS.
#pragma once

namespace lockstep::trace_file {

// The VFS's name for sqlite3_open_v2 (registered on first use, not as the default VFS); nullptr
// when it could not be registered: the default VFS is then used.
const char* read_ahead_vfs();

}  // namespace lockstep::trace_file
