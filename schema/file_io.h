// Reading and writing the small side files of lockstep's directories (an import's list of skipped
// dumps, attach snapshots and reports, shrink's reproducer) when the directory is not trusted: a
// FIFO, a device or a huge file planted under an expected name must not block or exhaust a reader,
// and a link planted there must not redirect a writer.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace lockstep::schema {

// The bytes of `path` when it is a regular file (a link to one is followed) of at most
// `max_bytes`; otherwise nullopt, with why in `*why` ("not a regular file", "larger than N
// bytes", the open error). Opened non-blocking: a FIFO never blocks the reader.
std::optional<std::string> read_regular_file(const std::string& path, size_t max_bytes, std::string* why = nullptr);

// Writes `bytes` to a new file beside `path` and renames it over `path`: whatever was at `path`
// (a file, a link to anywhere) is replaced, never written through, and a failure leaves no
// partial file. The new file gets mode 0666 & ~umask; `sync`: fsync'd before the rename. Throws
// std::runtime_error on failure.
void write_file_replacing(const std::string& path, std::string_view bytes, bool sync = false);

}  // namespace lockstep::schema
