// Python frames on interpreters this machine does not have: synthetic CPython memory (thread
// state, frames, code, str and bytes objects) laid out to each version's layout, read through
// the same detection and capture code the recorder uses.
//
// For 3.13 and 3.14 (GIL and free-threaded) the objects are placed from an independent model
// of the layout, and the _Py_DebugOffsets table handed to the reader is generated from that
// model: a reader that mixed up two fields of the table would look in the wrong place and fail.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "python_frames.h"
#include "python_layouts.h"

namespace lp = lockstep::pyframes_detail;
using lockstep::PyFrameRaw;

namespace {

char kCodeType, kUnicodeType, kBytesType;  // only their addresses matter

// Where each field lives, as one CPython build lays it out.
struct Model {
  int minor = 13;
  bool free_threaded = false;
  uint32_t ob_type = 8, var_size = 16;
  uint32_t ts_size = 320, ts_current_frame = 72;
  uint32_t fr_size = 80, fr_previous = 8, fr_exec = 0, fr_instr = 56, fr_owner = 70,
           fr_tlbc = 0;
  uint32_t co_struct = 208, co_filename = 112, co_qualname = 128, co_linetable = 136,
           co_firstlineno = 68, co_adaptive = 208;
  uint32_t by_struct = 40, by_size = 16, by_sval = 32;
  uint32_t uni_struct = 64, uni_state = 32, uni_length = 16, uni_ascii = 40;
  unsigned state_shift = 0;
  bool tagged_exec = false;
};

Model gil_313() { return Model{}; }

Model free_threaded(Model m) {  // PyObject grows to 32 bytes (ob_tid, ..., ob_ref_shared)
  m.free_threaded = true;
  m.ob_type = 24, m.var_size = 32;
  m.co_struct += 16, m.co_filename += 16, m.co_qualname += 16, m.co_linetable += 16,
      m.co_firstlineno += 16, m.co_adaptive += 16;
  m.by_struct = 56, m.by_size = 32, m.by_sval = 48;
  m.uni_struct = 80, m.uni_length = 32, m.uni_state = 48, m.uni_ascii = 56;
  return m;
}

Model gil_314() {
  Model m;
  m.minor = 14;
  m.tagged_exec = true;
  m.fr_instr = 64, m.fr_owner = 74;
  return m;
}

Model ft_314() {
  Model m = free_threaded(gil_314());
  m.state_shift = 6;
  m.fr_tlbc = 76;
  return m;
}

template <typename T>
void put(char* base, uint32_t off, T v) {
  std::memcpy(base + off, &v, sizeof v);
}

// Owns the synthetic objects; frees them at the end of the test.
class Heap {
 public:
  char* alloc(size_t n) {
    void* p = std::aligned_alloc(16, (n + 15) / 16 * 16);
    std::memset(p, 0, (n + 15) / 16 * 16);
    blocks_.emplace_back(static_cast<char*>(p));
    return static_cast<char*>(p);
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<char, Free>> blocks_;
};

class Synthetic {
 public:
  Synthetic(Model m, const lp::PyLayout* fixed = nullptr) : m_(m), fixed_(fixed) {}

  // For the hard-coded layouts (3.10-3.12) the model is the layout itself.
  static Synthetic from_layout(const lp::PyLayout& l) {
    Model m;
    m.minor = l.minor;
    m.ob_type = l.ob_type, m.var_size = l.co_size;
    m.fr_previous = l.fr_previous, m.fr_exec = l.fr_code, m.fr_instr = l.fr_instr,
    m.fr_owner = l.fr_owner;
    m.co_filename = l.co_filename, m.co_qualname = l.co_qualname,
    m.co_linetable = l.co_linetable, m.co_firstlineno = l.co_firstlineno,
    m.co_adaptive = l.co_code_adaptive;
    m.by_size = l.bytes_size, m.by_sval = l.bytes_sval;
    m.uni_length = l.uni_length, m.uni_state = l.uni_state, m.uni_ascii = l.uni_ascii_size;
    return Synthetic(m, &l);
  }

  char* str(const std::string& s) {
    char* o = heap_.alloc(m_.uni_ascii + s.size() + 1);
    put<uintptr_t>(o, m_.ob_type, reinterpret_cast<uintptr_t>(&kUnicodeType));
    put<int64_t>(o, m_.uni_length, static_cast<int64_t>(s.size()));
    uint32_t state = ((1u << lp::kStateKindShift) | lp::kStateCompactBit | lp::kStateAsciiBit)
                     << m_.state_shift;
    if (fixed_ && fixed_->uni_has_ready_bit) state |= lp::kStateReadyBit;
    put<uint32_t>(o, m_.uni_state, state);
    std::memcpy(o + m_.uni_ascii, s.data(), s.size());
    return o;
  }

  char* bytes(const std::vector<uint8_t>& b) {
    char* o = heap_.alloc(m_.by_sval + b.size() + 1);
    put<uintptr_t>(o, m_.ob_type, reinterpret_cast<uintptr_t>(&kBytesType));
    put<int64_t>(o, m_.by_size, static_cast<int64_t>(b.size()));
    std::memcpy(o + m_.by_sval, b.data(), b.size());
    return o;
  }

  // A code object of 8 code units whose every instruction is on line firstlineno + 2.
  char* code(const std::string& file, const std::string& name, int firstlineno) {
    const bool pep626 = fixed_ && fixed_->linetable == lp::LineTable::kPep626;
    // 3.11+: one location entry (no columns, code 13) over 8 units, line delta +2 (svarint 4).
    // 3.10: one (16 bytes, +2 lines) pair.
    const std::vector<uint8_t> table = pep626 ? std::vector<uint8_t>{16, 2}
                                              : std::vector<uint8_t>{0x80 | (13 << 3) | 7, 4};
    const uint32_t units = 8;
    char* o = heap_.alloc(std::max(m_.co_struct, m_.co_adaptive) + units * 2);
    put<uintptr_t>(o, m_.ob_type, reinterpret_cast<uintptr_t>(&kCodeType));
    put<int64_t>(o, m_.var_size, units);
    put<const char*>(o, m_.co_filename, str(file));
    put<const char*>(o, m_.co_qualname, str(name));
    put<const char*>(o, m_.co_linetable, bytes(table));
    put<int32_t>(o, m_.co_firstlineno, firstlineno);
    if (fixed_ && fixed_->co_firsttraceable != lp::kNoField)
      put<int32_t>(o, fixed_->co_firsttraceable, 0);
    return o;
  }

  // Frames innermost first; owner >= 3 marks a shim frame.
  struct F {
    char* code;
    int owner = 0;
    int32_t tlbc_index = 0;
  };
  const void* thread(const std::vector<F>& frames) {
    const bool frame_objects = fixed_ && fixed_->ts_frame != lp::kNoField;
    char* prev = nullptr;
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      char* f = heap_.alloc(frame_objects ? 128 : m_.fr_size);
      put<char*>(f, m_.fr_previous, prev);
      uintptr_t exec = reinterpret_cast<uintptr_t>(it->code);
      if (m_.tagged_exec) exec |= 1;  // Py_TAG_REFCNT / deferred: a tag bit, not the address
      put<uintptr_t>(f, m_.fr_exec, exec);
      if (frame_objects) {
        put<int32_t>(f, fixed_->fr_lasti, 3);  // instruction 3 -> byte offset 6
      } else {
        put<char*>(f, m_.fr_instr, it->code + m_.co_adaptive + 3 * 2);
        put<int8_t>(f, m_.fr_owner, static_cast<int8_t>(it->owner));
        if (m_.fr_tlbc) put<int32_t>(f, m_.fr_tlbc, it->tlbc_index);
      }
      prev = f;
    }
    char* ts = heap_.alloc(512);
    if (frame_objects) {
      put<char*>(ts, fixed_->ts_frame, prev);
    } else if (fixed_ && fixed_->ts_cframe != lp::kNoField) {
      char* cframe = heap_.alloc(64);
      put<char*>(cframe, fixed_->cframe_current, prev);
      put<char*>(ts, fixed_->ts_cframe, cframe);
    } else {
      put<char*>(ts, m_.ts_current_frame, prev);
    }
    return ts;
  }

  // _PyRuntime for 3.13/3.14: the debug offsets generated from the model.
  template <typename D>
  const void* runtime(uint64_t version_hex) {
    D d{};
    std::memcpy(d.cookie, "xdebugpy", 8);
    d.version = version_hex;
    d.free_threaded = m_.free_threaded;
    d.thread_state.size = m_.ts_size, d.thread_state.current_frame = m_.ts_current_frame;
    d.interpreter_frame.size = m_.fr_size, d.interpreter_frame.previous = m_.fr_previous,
    d.interpreter_frame.executable = m_.fr_exec, d.interpreter_frame.instr_ptr = m_.fr_instr,
    d.interpreter_frame.owner = m_.fr_owner;
    d.code_object.size = m_.co_struct, d.code_object.filename = m_.co_filename,
    d.code_object.qualname = m_.co_qualname, d.code_object.linetable = m_.co_linetable,
    d.code_object.firstlineno = m_.co_firstlineno,
    d.code_object.co_code_adaptive = m_.co_adaptive;
    d.code_object.name = m_.co_qualname + 8;  // a different field: must not be read as a name
    d.pyobject.size = m_.ob_type + 8, d.pyobject.ob_type = m_.ob_type;
    d.tuple_object.size = m_.var_size + 16, d.tuple_object.ob_size = m_.var_size;
    d.bytes_object.size = m_.by_struct, d.bytes_object.ob_size = m_.by_size,
    d.bytes_object.ob_sval = m_.by_sval;
    d.unicode_object.size = m_.uni_struct, d.unicode_object.state = m_.uni_state,
    d.unicode_object.length = m_.uni_length, d.unicode_object.asciiobject_size = m_.uni_ascii;
    if constexpr (sizeof(D) == sizeof(lp::PyDebugOffsets314))
      d.interpreter_frame.tlbc_index = m_.fr_tlbc;
    char* r = heap_.alloc(sizeof d);
    std::memcpy(r, &d, sizeof d);
    return r;
  }

  Heap heap_;
  Model m_;
  const lp::PyLayout* fixed_;
};

int initialized() { return 1; }
void* no_thread() { return nullptr; }
const char* version_310() { return "3.10.13 (main, Jan  1 2024, 00:00:00) [GCC 12.2.0]"; }

lp::PySymbols symbols() {
  lp::PySymbols s;
  s.is_initialized = initialized;
  s.this_thread_state = no_thread;
  s.code_type = reinterpret_cast<uintptr_t>(&kCodeType);
  s.unicode_type = reinterpret_cast<uintptr_t>(&kUnicodeType);
  s.bytes_type = reinterpret_cast<uintptr_t>(&kBytesType);
  return s;
}

struct Seen {
  std::string file, function;
  int line;
  bool operator==(const Seen& o) const {
    return file == o.file && function == o.function && line == o.line;
  }
};
std::ostream& operator<<(std::ostream& os, const Seen& s) {
  return os << s.file << ":" << s.line << " " << s.function;
}

std::vector<Seen> capture(const lp::PyRuntimeView& rt, const void* ts) {
  PyFrameRaw raw[16];
  const size_t n = lp::python_capture_from(rt, ts, raw, 16);
  std::vector<Seen> out;
  for (size_t i = 0; i < n; ++i) {
    const auto fi = lockstep::resolve_python_frame(raw[i]);
    out.push_back({fi.file, fi.function, fi.line});
  }
  return out;
}

// Two Python frames with a shim frame (owner `shim`) between them; expects both, innermost
// first, each on its firstlineno + 2.
void expect_two_frames(Synthetic& s, const lp::PyRuntimeView& rt, int shim) {
  ASSERT_TRUE(rt.ok) << rt.status;
  char* inner = s.code("/srv/train.py", "Trainer.step", 40);
  char* outer = s.code("/srv/main.py", "main", 10);
  std::vector<Synthetic::F> frames{{inner}};
  if (shim >= 0) frames.push_back({s.code("<shim>", "<shim>", 1), shim});
  frames.push_back({outer});
  const std::vector<Seen> want{{"/srv/train.py", "Trainer.step", 42}, {"/srv/main.py", "main", 12}};
  EXPECT_EQ(capture(rt, s.thread(frames)), want);
}

TEST(PythonFramesSynthetic, Python310ReadsTheFrameObjectChainAndPep626Lines) {
  Synthetic s = Synthetic::from_layout(lp::kLayout310);
  auto sym = symbols();
  sym.get_version = version_310;  // 3.10 has no Py_Version
  const auto rt = lp::python_runtime_from(sym);
  EXPECT_STREQ(rt.status, "CPython 3.10.13");
  expect_two_frames(s, rt, -1);
}

TEST(PythonFramesSynthetic, Python311And312HardCodedLayouts) {
  for (const lp::PyLayout* l : {&lp::kLayout311, &lp::kLayout312}) {
    Synthetic s = Synthetic::from_layout(*l);
    auto sym = symbols();
    const unsigned long v = 0x030B0000ul + (static_cast<unsigned long>(l->minor - 11) << 16);
    sym.py_version = &v;
    SCOPED_TRACE(l->minor);
    expect_two_frames(s, lp::python_runtime_from(sym), l->minor == 12 ? 3 : -1);
  }
}

struct DebugOffsetsCase {
  const char* name;
  Model model;
  uint64_t version;
  std::vector<int> shims;
  const char* status;
};

TEST(PythonFramesSynthetic, DebugOffsetVersionsGilAndFreeThreaded) {
  const DebugOffsetsCase cases[] = {
      {"3.13", gil_313(), 0x030D05F0, {3}, "CPython 3.13.5"},
      {"3.13t", free_threaded(gil_313()), 0x030D05F0, {3}, "CPython 3.13.5 (free-threaded)"},
      {"3.14", gil_314(), 0x030E00F0, {3, 4}, "CPython 3.14.0"},
      {"3.14t", ft_314(), 0x030E00F0, {3, 4}, "CPython 3.14.0 (free-threaded)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Synthetic s(c.model);
    auto sym = symbols();
    const unsigned long v = c.version;
    sym.py_version = &v;
    sym.runtime = c.model.minor == 13 ? s.runtime<lp::PyDebugOffsets313>(c.version)
                                      : s.runtime<lp::PyDebugOffsets314>(c.version);
    const auto rt = lp::python_runtime_from(sym);
    ASSERT_TRUE(rt.ok) << rt.status;
    EXPECT_STREQ(rt.status, c.status);
    for (int shim : c.shims) expect_two_frames(s, rt, shim);
  }
}

TEST(PythonFramesSynthetic, FreeThreaded314FrameOnItsOwnBytecodeCopyHasNoLine) {
  Synthetic s(ft_314());
  auto sym = symbols();
  const unsigned long v = 0x030E00F0;
  sym.py_version = &v;
  sym.runtime = s.runtime<lp::PyDebugOffsets314>(v);
  const auto rt = lp::python_runtime_from(sym);
  ASSERT_TRUE(rt.ok) << rt.status;
  char* code = s.code("/srv/worker.py", "Worker.run", 7);
  Synthetic::F f{code};
  f.tlbc_index = 2;
  const std::vector<Seen> want{{"/srv/worker.py", "Worker.run", 0}};
  EXPECT_EQ(capture(rt, s.thread({f})), want);
}

TEST(PythonFramesSynthetic, UnsupportedOrInconsistentInterpretersAreRefusedWithOneReason) {
  Synthetic s(gil_314());
  auto sym = symbols();
  unsigned long v = 0x030F0000;  // 3.15: no table entry yet
  sym.py_version = &v;
  sym.runtime = s.runtime<lp::PyDebugOffsets314>(v);
  auto rt = lp::python_runtime_from(sym);
  EXPECT_FALSE(rt.ok);
  EXPECT_STREQ(rt.status, "CPython 3.15 not supported (supported: 3.10 to 3.14)");

  v = 0x030E00F0;  // Py_Version says 3.14, the table says 3.13
  sym.runtime = s.runtime<lp::PyDebugOffsets314>(0x030D05F0);
  rt = lp::python_runtime_from(sym);
  EXPECT_FALSE(rt.ok);
  EXPECT_NE(std::string(rt.status).find("debug offsets of version"), std::string::npos)
      << rt.status;

  Model bad = gil_314();
  bad.ts_current_frame = bad.ts_size;  // points past the thread state
  Synthetic b(bad);
  sym.runtime = b.runtime<lp::PyDebugOffsets314>(v);
  rt = lp::python_runtime_from(sym);
  EXPECT_FALSE(rt.ok);
  EXPECT_STREQ(rt.status, "CPython 3.14: debug offsets fail validation; frames not read");

  char garbage[sizeof(lp::PyDebugOffsets314)] = "not a debug table";
  sym.runtime = garbage;
  rt = lp::python_runtime_from(sym);
  EXPECT_FALSE(rt.ok);
  EXPECT_STREQ(rt.status, "CPython 3.14: _PyRuntime.debug_offsets has no cookie");

  auto old = symbols();  // neither Py_Version nor a parsable Py_GetVersion
  old.get_version = [] { return "unknown"; };
  rt = lp::python_runtime_from(old);
  EXPECT_FALSE(rt.ok);
  EXPECT_STREQ(rt.status, "CPython version unknown; frames not read");
  // Refused means no frames, never a read through the refused layout.
  EXPECT_EQ(lp::python_capture_from(rt, s.thread({{s.code("a", "b", 1)}}), nullptr, 4), 0u);
}

TEST(PythonFramesSynthetic, Pep626DecoderMatchesCPython310Rules) {
  // (start delta, line delta) pairs: +2 lines over 4 bytes, an empty range that moves the line
  // by +1, a no-line range (-128) over 2 bytes, then +1 over 2 bytes.
  const uint8_t t[] = {4, 2, 0, 1, 2, 0x80, 2, 1};
  EXPECT_EQ(lp::python_linetable_line_310(t, sizeof t, 10, -2), 10);
  EXPECT_EQ(lp::python_linetable_line_310(t, sizeof t, 10, 0), 12);
  EXPECT_EQ(lp::python_linetable_line_310(t, sizeof t, 10, 2), 12);
  EXPECT_EQ(lp::python_linetable_line_310(t, sizeof t, 10, 4), -1);
  EXPECT_EQ(lp::python_linetable_line_310(t, sizeof t, 10, 6), 14);
  EXPECT_EQ(lp::python_linetable_line_310(t, sizeof t, 10, 8), -1);
  EXPECT_EQ(lp::python_linetable_line_310(t, 3, 10, 4), -1);  // odd length: last byte ignored
}

}  // namespace
