// The recorder's only output channel: one "lockstep: ..." line on stderr, written with write(2)
// so it is safe from any thread and never interleaves with itself.
#pragma once

namespace lockstep::rec {

void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace lockstep::rec
