// Review 2026-12-01 (docs/review-2026-12-01.md), finding 5: flightrec's printable() (the
// escaping of every string a Flight Recorder dump brings: process group names, profiling names,
// frames, thread names) let malformed UTF-8 through: bytes 0xf5..0xff taken as 3-byte leads,
// overlong forms (an overlong ESC, 0xe0 0x80 0x9b), surrogates. Fixed in flightrec/dump.cpp.
#include <gtest/gtest.h>

#include <string>

#include "dump.h"

namespace lockstep::flightrec {
namespace {

TEST(ReviewFlightrec, printable_keeps_well_formed_text) {
  EXPECT_EQ(printable("allreduce nccl:all_reduce"), "allreduce nccl:all_reduce");
  EXPECT_EQ(printable("pg \xc3\xa9t\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x98\x80"), "pg \xc3\xa9t\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x98\x80");
  EXPECT_EQ(printable("\xef\xbf\xbd \xf4\x8f\xbf\xbf"), "\xef\xbf\xbd \xf4\x8f\xbf\xbf");  // U+FFFD, U+10FFFF
}

TEST(ReviewFlightrec, printable_replaces_controls_and_malformed_utf8) {
  // Since 2026-12-02 flightrec uses the one escaper (schema/text_escape.h): visible escapes.
  EXPECT_EQ(printable("a\x1b[31mb"), "a\\x1b[31mb");
  EXPECT_EQ(printable("a\xc2\x9b" "31mb"), "a\\u009b31mb");                      // C1 CSI
  EXPECT_EQ(printable("a\xe0\x80\x9b[31mb"), "a\\xe0\\x80\\x9b[31mb");           // overlong ESC
  EXPECT_EQ(printable("a\xe0\x82\x9b" "31mb"), "a\\xe0\\x82\\x9b31mb");          // overlong CSI (U+009B)
  EXPECT_EQ(printable("a\xf0\x80\x80\x9b[31mb"), "a\\xf0\\x80\\x80\\x9b[31mb");  // 4-byte overlong ESC
  EXPECT_EQ(printable("a\xed\xa0\x80z"), "a\\xed\\xa0\\x80z");                   // surrogate U+D800
  EXPECT_EQ(printable("a\xf4\x90\x80\x80z"), "a\\xf4\\x90\\x80\\x80z");          // past U+10FFFF
  EXPECT_EQ(printable("a\xf8\x80\x80z"), "a\\xf8\\x80\\x80z");                   // 0xf8 is no lead byte
  EXPECT_EQ(printable("a\xff\xbf\xbfz"), "a\\xff\\xbf\\xbfz");
}

}  // namespace
}  // namespace lockstep::flightrec
