// Trace strings (host names, commName, frames, paths) are untrusted: before they reach a
// terminal, a log or a JSON document they are made printable. Invalid UTF-8 bytes and control
// characters (C0, DEL, C1) become visible escapes (\x1b, \n, \u0085), and so do the format
// characters that reorder or hide text (bidi overrides and isolates, U+202E ...: \u202e), so a
// crafted trace can neither move the cursor, retitle the terminal, spoof report lines, make a
// line read in another order than its bytes, nor break a JSON encoder.
#pragma once

#include <string>
#include <string_view>

namespace lockstep {

// true when `s` needs no escaping (the common case: printable ASCII and well-formed UTF-8
// without control characters).
bool is_printable(std::string_view s);
// The printable form: valid UTF-8, no control characters. Identity for printable input.
std::string printable(std::string_view s);
// The same line by line: newlines kept, every other control character escaped (multi-line
// reports; XML 1.0 forbids control characters even as references).
std::string printable_lines(std::string_view s);

}  // namespace lockstep
