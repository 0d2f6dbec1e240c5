// Parts of python_frames that need no interpreter: behaviour in a process without CPython
// (this test binary never links libpython) and the location-table decoder on hand-encoded
// tables (format: CPython's Objects/locations.md).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "python_frames.h"
#include "python_layouts.h"

namespace {

using lockstep::pyframes_detail::python_linetable_line;

int line_at(const std::vector<uint8_t>& t, int first, int addr) {
  return python_linetable_line(t.data(), t.size(), first, addr);
}

// Entry header: 1 CCCC LLL (code, length-1 in code units).
constexpr uint8_t head(int code, int units) {
  return static_cast<uint8_t>(0x80 | (code << 3) | (units - 1));
}

TEST(PythonFramesWithoutPython, ReportsUnavailableAndCapturesNothing) {
  EXPECT_FALSE(lockstep::python_frames_available());
  EXPECT_STREQ(lockstep::python_frames_status(), "no CPython in this process");
  lockstep::PyFrameRaw raw[4] = {};
  EXPECT_EQ(lockstep::capture_python_frames(raw, 4), 0u);
}

TEST(PythonFramesWithoutPython, UninternedFrameResolvesToUnknown) {
  lockstep::PyFrameRaw raw{nullptr, 10, 0};
  const lockstep::PyFrameInfo fi = lockstep::resolve_python_frame(raw);
  EXPECT_EQ(fi.file, "<unknown>");
  EXPECT_EQ(fi.function, "<unknown>");
  EXPECT_EQ(fi.line, 0);
}

TEST(PythonFramesHash, DependsOnOffsetsAndSeed) {
  lockstep::PyFrameRaw a{nullptr, 10, 0}, b{nullptr, 12, 0};
  EXPECT_EQ(lockstep::python_frames_hash(&a, 1), lockstep::python_frames_hash(&a, 1));
  EXPECT_NE(lockstep::python_frames_hash(&a, 1), lockstep::python_frames_hash(&b, 1));
  EXPECT_NE(lockstep::python_frames_hash(&a, 1, 1), lockstep::python_frames_hash(&a, 1, 2));
  EXPECT_NE(lockstep::python_frames_hash(&a, 0), lockstep::python_frames_hash(&a, 1));
}

TEST(LineTable, OneLineFormsAddZeroOneOrTwoLines) {
  // 2 units on firstline (short form, code 0), 1 unit +1 line (code 11), 3 units +2 (code 12),
  // 1 unit +0 (code 10). One-line forms carry two column bytes.
  const std::vector<uint8_t> t = {head(0, 2), 0x00, head(11, 1), 4, 8,
                                  head(12, 3), 0, 1,  head(10, 1), 2, 3};
  EXPECT_EQ(line_at(t, 100, 0), 100);
  EXPECT_EQ(line_at(t, 100, 2), 100);
  EXPECT_EQ(line_at(t, 100, 4), 101);
  EXPECT_EQ(line_at(t, 100, 6), 103);
  EXPECT_EQ(line_at(t, 100, 10), 103);
  EXPECT_EQ(line_at(t, 100, 12), 103);
  EXPECT_EQ(line_at(t, 100, 14), -1) << "past the last entry";
}

TEST(LineTable, LongAndNoColumnFormsUseSignedVarintDeltas) {
  // code 13 (no columns): svarint +70 = zigzag 140 = varint 0b001100 | 64, 0b000010.
  // code 14 (long): svarint -3 = (3<<1)|1 = 7, end-line delta 0, col+1, end col+1.
  const std::vector<uint8_t> t = {head(13, 1), static_cast<uint8_t>(64 | (140 & 63)),
                                  static_cast<uint8_t>(140 >> 6), head(14, 2), 7, 0, 1, 5};
  EXPECT_EQ(line_at(t, 10, 0), 80);
  EXPECT_EQ(line_at(t, 10, 2), 77);
  EXPECT_EQ(line_at(t, 10, 4), 77);
}

TEST(LineTable, NoLocationEntryHasNoLineButKeepsTheRunningLine) {
  const std::vector<uint8_t> t = {head(11, 1), 0, 0, head(15, 1), head(10, 1), 0, 0};
  EXPECT_EQ(line_at(t, 5, 0), 6);
  EXPECT_EQ(line_at(t, 5, 2), -1);
  EXPECT_EQ(line_at(t, 5, 4), 6);
}

TEST(LineTable, NegativeAddressIsTheFirstLine) {
  const std::vector<uint8_t> t = {head(11, 1), 0, 0};
  EXPECT_EQ(line_at(t, 42, -2), 42);
  EXPECT_EQ(line_at({}, 42, 0), -1);
}

}  // namespace
