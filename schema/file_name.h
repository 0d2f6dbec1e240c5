// One component of a file name built from data lockstep does not control (a host name, a job id,
// a Flight Recorder dump's name, a rank read from a file): the one definition every writer of
// trace files uses (interposer/writer.cpp, the Flight Recorder import, the model writer behind
// shrink). Whatever the bytes, the result names one entry inside the directory it is joined to:
// no '/', no "." or "..", no control or non-ASCII byte, never empty, never over kMaxBytes.
#pragma once

#include <string>
#include <string_view>

namespace lockstep::schema {

inline constexpr size_t kMaxFileComponentBytes = 128;

// Bytes outside [A-Za-z0-9._-] become '_', and so does a leading '.' (which also rules out "."
// and ".." and hidden files); empty input becomes "_"; longer input is cut at
// kMaxFileComponentBytes.
inline std::string safe_file_component(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() < kMaxFileComponentBytes ? raw.size() : kMaxFileComponentBytes);
  for (char c : raw.substr(0, kMaxFileComponentBytes)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == '_';
    out.push_back(ok ? c : '_');
  }
  if (out.empty()) return "_";
  if (out[0] == '.') out[0] = '_';
  return out;
}

}  // namespace lockstep::schema
