// Structure-aware mutations of lockstep trace files: the bytes are opened as an SQLite database
// and rows and values are changed through SQL (extreme numbers, NULLs, invalid UTF-8, control
// characters, huge strings, deleted and duplicated rows, dropped tables). Blind byte flips almost
// never get past SQLite's page checks; these reach the loader's and the analyses' validation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::fuzz {

// A fuzz input holds one or more trace files, concatenated: each file starts with SQLite's
// 16-byte header "SQLite format 3\0", so the input splits at every occurrence of it, and at
// every kFileMarker (which starts a file of another kind: a Flight Recorder dump). A part keeps
// its header or marker; file_bytes() is a part without its marker.
inline constexpr char kFileMarker[] = "\0LSFUZZ-FILE\0";
inline constexpr size_t kFileMarkerLen = sizeof kFileMarker - 1;
std::vector<std::string> split_files(const uint8_t* data, size_t size);
std::string_view file_bytes(std::string_view part);
std::string join_files(const std::vector<std::string>& files);

// Applies `n` random SQL mutations to one SQLite file image; returns false (and leaves `file`
// unchanged) when the bytes are not a database SQLite can open. `log`, when given, receives the
// statements that were applied (for reproducing a finding by hand).
bool mutate_sqlite(std::string& file, std::mt19937_64& rng, int n, std::vector<std::string>* log = nullptr);

}  // namespace lockstep::fuzz
