// The pickle VM on hostile input: nothing outside the allowlist runs, every limit holds.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "dump.h"
#include "pickle.h"

using namespace std::string_literals;

namespace lockstep::flightrec {
namespace {

std::string P(std::string body) { return std::string("\x80\x02", 2) + body; }

std::string reject(const std::string& bytes, Limits lim = {}) {
  try {
    parse_pickle(bytes, lim);
  } catch (const DumpError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(Pickle, ReadsPlainData) {
  // {'a': [1, -2, True, None, 3.5], 'b': ('x', 'y')} written by hand with torch's opcodes.
  std::string b = P(std::string("}(X\x01\x00\x00\x00"s) + "a"s + "](K\x01J\xfe\xff\xff\xff\x88NG@\x0c\x00\x00\x00\x00\x00\x00"s +
                    "eX\x01\x00\x00\x00"s + "bX\x01\x00\x00\x00xX\x01\x00\x00\x00y\x86u."s);
  Document d = parse_pickle(b);
  auto a = d.get(d.root, "a");
  ASSERT_TRUE(a);
  const auto& items = d.seq(*a, "a");
  ASSERT_EQ(items.size(), 5u);
  EXPECT_EQ(d.integer(items[0], "0"), 1);
  EXPECT_EQ(d.integer(items[1], "1"), -2);
  EXPECT_TRUE(d.boolean(items[2], "2"));
  EXPECT_TRUE(d.is_none(items[3]));
  EXPECT_DOUBLE_EQ(d.at(items[4]).f, 3.5);
  auto t = d.get(d.root, "b");
  ASSERT_TRUE(t);
  EXPECT_EQ(d.str(d.seq(*t, "b")[1], "y"), "y");
}

TEST(Pickle, RefusesGlobalReduce) {
  // pickle.dumps(os.system('id')) style: GLOBAL 'os system', args tuple, REDUCE.
  std::string evil = P("cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."s);
  std::string why = reject(evil);
  EXPECT_NE(why.find("GLOBAL"), std::string::npos) << why;
  EXPECT_NE(why.find("refused"), std::string::npos) << why;
}

TEST(Pickle, RefusesEveryObjectOpcode) {
  for (std::string op : {"\x93", "R", "b", "i", "o", "\x81", "\x92", "P", "Q", "\x82", "\x83", "\x84", "\x8f", "\x91"}) {
    std::string why = reject(P("N" + op + "."));
    EXPECT_NE(why.find("not allowed"), std::string::npos) << why;
  }
  EXPECT_NE(reject(P("I1\n.")).find("INT"), std::string::npos);  // text protocol opcodes too
}

TEST(Pickle, DeepNestingIsBounded) {
  std::string b = P(std::string(200, ']') + std::string(199, 'a') + ".");
  EXPECT_NE(reject(b).find("nesting deeper"), std::string::npos);
  std::string marks = P(std::string(100000, '(') + ".");
  EXPECT_NE(reject(marks).find("MARK"), std::string::npos);
}

TEST(Pickle, HugeLengthsAndTruncation) {
  EXPECT_NE(reject(P("X\xff\xff\xff\xff" "abc.")).find("exceeds"), std::string::npos);
  EXPECT_NE(reject(P("\x8d\xff\xff\xff\xff\xff\xff\xff\x7f.")).find("exceeds"), std::string::npos);
  EXPECT_NE(reject(P("X\x10\x00\x00\x00"s "abc"s)).find("truncated"s), std::string::npos);
  EXPECT_NE(reject(P("]")).find("truncated"), std::string::npos);
  EXPECT_NE(reject(P("\x8a\x09" "123456789.")).find("64 bits"), std::string::npos);
  EXPECT_NE(reject("{}").find("PROTO"), std::string::npos);
}

TEST(Pickle, MemoAbuse) {
  EXPECT_NE(reject(P("h\x05.")).find("never set"), std::string::npos);
  EXPECT_NE(reject(P("Nr\xff\xff\xff\x7f.")).find("memo index"), std::string::npos);
  // A list appended into itself (a cycle) and a container changed after being placed.
  EXPECT_NE(reject(P("]q\x00h\x00"s "a."s)).find("itself"s), std::string::npos);
  EXPECT_NE(reject(P("]q\x00]h\x00"s "a0h\x00K\x01"s "a."s)).find("after it was placed"s), std::string::npos);
}

TEST(Pickle, SharedValuesCannotExpand) {
  // entries = [e] * 4000 where e's frames hold 4000 references to one frame: 16 M frames if
  // materialized; the reader charges what it reads out and stops.
  std::string frame = "}(X\x04\x00\x00\x00nameX\x01\x00\x00\x00"s "fu"s;
  std::string frames = "](" + frame + "q\x01";
  for (int k = 0; k < 3999; ++k) frames += "h\x01";
  frames += "e";
  std::string entry = std::string("}(X\x09\x00\x00\x00record_idK\x01X\x0d\x00\x00\x00process_groupX\x01\x00\x00\x00"s "0X\x01\x00\x00\x00"s "a\x86"s) +
                      "X\x0e\x00\x00\x00profiling_nameX\x0f\x00\x00\x00nccl:all_reduceX\x05\x00\x00\x00stateX\x09\x00\x00\x00"s "completed"s +
                      "X\x06\x00\x00\x00"s "frames"s + frames + "uq\x02"s;
  std::string entries = "](" + entry;
  for (int k = 0; k < 3999; ++k) entries += "h\x02";
  entries += "e";
  std::string dump = P("}(X\x07\x00\x00\x00versionX\x04\x00\x00\x00"s "2.10X\x07\x00\x00\x00"s "entries"s + entries + "u."s);
  Limits lim;
  lim.max_items = 1u << 20;
  try {
    FrDump d = read_dump(dump, "x", lim);
    // Shared frame lists are read once: 4000 entries, one stack.
    EXPECT_EQ(d.entries.size(), 4000u);
    EXPECT_EQ(d.stacks.size(), 1u);
  } catch (const DumpError& e) {
    EXPECT_NE(std::string(e.what()).find("limits"), std::string::npos) << e.what();
  }
}

TEST(Dump, WrongTypesNameTheField) {
  auto why = [](const std::string& body) {
    try {
      read_dump(P(body), "x");
    } catch (const DumpError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // entries is a dict
  EXPECT_NE(why("}(X\x07\x00\x00\x00versionX\x01\x00\x00\x00"s "2X\x07\x00\x00\x00"s "entries}u."s).find("entries: expected a list"s), std::string::npos);
  // record_id is a list
  EXPECT_NE(why("}(X\x07\x00\x00\x00versionX\x01\x00\x00\x00"s "2X\x07\x00\x00\x00"s "entries](}(X\x09\x00\x00\x00record_id]ueu."s).find("record_id"s),
            std::string::npos);
  EXPECT_NE(why("}(X\x03\x00\x00\x00"s "fooK\x01u."s).find("not a Flight Recorder dump"s), std::string::npos);
}

TEST(Dump, TruncatedRealDump) {
  std::ifstream in(std::string(LOCKSTEP_FR_DATA) + "/ws1-completed/nccl_trace_rank_0", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string b = ss.str();
  ASSERT_GT(b.size(), 1000u);
  for (size_t cut : {size_t(3), b.size() / 3, b.size() / 2, b.size() - 1}) {
    EXPECT_THROW(read_dump(std::string_view(b).substr(0, cut), "x"), DumpError) << cut;
  }
  std::string flipped = b;
  flipped[2] = 'c';  // GLOBAL where the top-level dict starts
  EXPECT_THROW(read_dump(flipped, "x"), DumpError);
}

TEST(Dump, PrintableRemovesTerminalEscapes) {
  EXPECT_EQ(printable("a\x1b[31mb\x07\xc2\x9b" "c\xff"), "a\\x1b[31mb\\x07\\u009bc\\xff");
  EXPECT_EQ(printable("f\xc3\xa9"), "f\xc3\xa9");
}

}  // namespace
}  // namespace lockstep::flightrec
