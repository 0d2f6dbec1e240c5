// The recorder's only output channel: one "lockstep: ..." line on stderr, written with one
// write(2) so it is safe from any thread and never interleaves with itself. The text is made
// printable; the line is written only while descriptor 2 is the one the process started with,
// and never raises SIGPIPE (docs/review-2026-12-02.md L8, L9).
#pragma once

namespace lockstep::rec {

void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace lockstep::rec
