#include "pickle.h"

#include <cstring>

namespace lockstep::flightrec {
namespace {

const char* opcode_name(uint8_t op) {
  switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'p': return "PUT";
    case 'g': return "GET";
    default: return nullptr;
  }
}

class Machine {
 public:
  Machine(std::string_view in, const Limits& lim) : in_(in), lim_(lim) {}

  Document run() {
    if (in_.size() > lim_.max_input_bytes)
      throw DumpError("pickle of " + std::to_string(in_.size()) + " bytes exceeds the limit of " +
                      std::to_string(lim_.max_input_bytes));
    if (in_.empty() || static_cast<uint8_t>(in_[0]) != 0x80) throw DumpError("not a binary pickle (no PROTO opcode)");
    while (true) {
      if (pos_ >= in_.size()) fail("truncated: no STOP opcode");
      op_pos_ = pos_;
      uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      if (step(op)) break;
    }
    if (pos_ != in_.size()) fail(std::to_string(in_.size() - pos_) + " bytes after STOP");
    return std::move(doc_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw DumpError("pickle: " + what + " (at byte " + std::to_string(op_pos_) + ")");
  }

  const char* take(size_t n) {
    if (n > in_.size() - pos_) fail("truncated: needs " + std::to_string(n) + " more bytes, " + std::to_string(in_.size() - pos_) + " left");
    const char* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint64_t le(size_t n) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(take(n));
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= uint64_t(p[k]) << (8 * k);
    return v;
  }

  uint32_t make(Kind k) {
    if (doc_.nodes.size() >= lim_.max_nodes) fail("more than " + std::to_string(lim_.max_nodes) + " values");
    doc_.nodes.emplace_back();
    doc_.nodes.back().kind = k;
    return static_cast<uint32_t>(doc_.nodes.size() - 1);
  }
  void push(uint32_t id) {
    if (stack_.size() >= lim_.max_stack) fail("stack deeper than " + std::to_string(lim_.max_stack));
    stack_.push_back(id);
  }
  uint32_t pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    uint32_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  uint32_t top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  size_t pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  void string(Kind k, size_t n) {
    if (n > lim_.max_string_len) fail("string of " + std::to_string(n) + " bytes exceeds the limit of " + std::to_string(lim_.max_string_len));
    if (n > lim_.max_string_bytes - string_bytes_) fail("strings exceed " + std::to_string(lim_.max_string_bytes) + " bytes in all");
    const char* p = take(n);
    string_bytes_ += n;
    uint32_t id = make(k);
    doc_.nodes[id].s.assign(p, n);
    push(id);
  }
  void integer(int64_t v) {
    uint32_t id = make(Kind::kInt);
    doc_.nodes[id].i = v;
    push(id);
  }
  void long_n(uint64_t n) {
    if (n > 8) fail("integer of " + std::to_string(n) + " bytes does not fit in 64 bits");
    const unsigned char* p = reinterpret_cast<const unsigned char*>(take(n));
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= uint64_t(p[k]) << (8 * k);
    if (n > 0 && n < 8 && (p[n - 1] & 0x80)) v |= ~uint64_t(0) << (8 * n);  // sign-extend
    integer(static_cast<int64_t>(v));
  }

  // Places `child` into container `parent`: the child is sealed (immutable from now on), so no
  // cycle can ever form, and the parent's height stays exact.
  void place(uint32_t parent, uint32_t child) {
    if (child == parent) fail("a container placed inside itself");
    Node& c = doc_.nodes[child];
    c.sealed = true;
    uint16_t h = c.height;
    Node& p = doc_.nodes[parent];
    if (h + 1u > lim_.max_depth) fail("nesting deeper than " + std::to_string(lim_.max_depth));
    if (h + 1u > p.height) p.height = static_cast<uint16_t>(h + 1);
    if (items_ >= lim_.max_items) fail("more than " + std::to_string(lim_.max_items) + " container items");
    ++items_;
    p.items.push_back(child);
  }
  Node& mutable_container(uint32_t id, Kind want, const char* opname) {
    Node& n = doc_.nodes[id];
    if (n.kind != want) fail(std::string(opname) + " on a " + kind_name(n.kind));
    if (n.sealed) fail(std::string(opname) + " modifies a container after it was placed (not written by any pickler FR uses)");
    return n;
  }
  void check_key(uint32_t key) {
    Kind k = doc_.nodes[key].kind;
    if (k == Kind::kList || k == Kind::kDict || k == Kind::kTuple) fail(std::string("unsupported dict key of type ") + kind_name(k));
  }
  void set_items(uint32_t dict, size_t from) {
    if ((stack_.size() - from) % 2) fail("odd number of items for a dict");
    mutable_container(dict, Kind::kDict, "SETITEMS");
    for (size_t k = from; k < stack_.size(); k += 2) {
      check_key(stack_[k]);
      place(dict, stack_[k]);
      place(dict, stack_[k + 1]);
    }
    stack_.resize(from);
  }
  void append_items(uint32_t list, size_t from) {
    mutable_container(list, Kind::kList, "APPENDS");
    for (size_t k = from; k < stack_.size(); ++k) place(list, stack_[k]);
    stack_.resize(from);
  }
  void tuple_from(size_t from) {
    uint32_t t = make(Kind::kTuple);
    for (size_t k = from; k < stack_.size(); ++k) place(t, stack_[k]);
    stack_.resize(from);
    push(t);
  }
  void memo_put(uint64_t idx) {
    if (idx >= lim_.max_memo) fail("memo index " + std::to_string(idx) + " beyond the limit of " + std::to_string(lim_.max_memo));
    if (memo_.size() <= idx) memo_.resize(idx + 1, kUnset);
    memo_[idx] = top();
  }
  void memo_get(uint64_t idx) {
    if (idx >= memo_.size() || memo_[idx] == kUnset) fail("memo index " + std::to_string(idx) + " was never set");
    push(memo_[idx]);
  }

  // Returns true at STOP.
  bool step(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        uint8_t v = static_cast<uint8_t>(*take(1));
        if (v < 2 || v > 5) fail("pickle protocol " + std::to_string(v) + " (2-5 are read)");
        return false;
      }
      case 0x95: {  // FRAME: a length prefix (protocol 4+); the framed opcodes follow inline
        uint64_t n = le(8);
        if (n > in_.size() - pos_) fail("truncated: FRAME of " + std::to_string(n) + " bytes");
        return false;
      }
      case '.': {  // STOP
        if (!marks_.empty()) fail("STOP with an open MARK");
        if (stack_.size() != 1) fail("STOP with " + std::to_string(stack_.size()) + " values on the stack (1 expected)");
        doc_.root = stack_.back();
        return true;
      }
      case '(':
        if (marks_.size() >= lim_.max_depth * 4) fail("too many open MARKs");
        marks_.push_back(stack_.size());
        return false;
      case '0': pop(); return false;
      case '1': stack_.resize(pop_mark()); return false;
      case '2': push(top()); return false;
      case 'N': push(make(Kind::kNone)); return false;
      case 0x88:
      case 0x89: {
        uint32_t id = make(Kind::kBool);
        doc_.nodes[id].i = op == 0x88;
        push(id);
        return false;
      }
      case 'J': integer(static_cast<int32_t>(static_cast<uint32_t>(le(4)))); return false;
      case 'K': integer(static_cast<int64_t>(le(1))); return false;
      case 'M': integer(static_cast<int64_t>(le(2))); return false;
      case 0x8a: long_n(le(1)); return false;
      case 0x8b: long_n(le(4)); return false;
      case 'G': {
        const unsigned char* p = reinterpret_cast<const unsigned char*>(take(8));
        uint64_t bits = 0;
        for (int k = 0; k < 8; ++k) bits = (bits << 8) | p[k];  // big-endian
        double d;
        std::memcpy(&d, &bits, sizeof d);
        uint32_t id = make(Kind::kFloat);
        doc_.nodes[id].f = d;
        push(id);
        return false;
      }
      case 'X': string(Kind::kStr, le(4)); return false;
      case 0x8c: string(Kind::kStr, le(1)); return false;
      case 0x8d: string(Kind::kStr, le(8)); return false;
      case 'T': string(Kind::kBytes, le(4)); return false;
      case 'U': string(Kind::kBytes, le(1)); return false;
      case 'B': string(Kind::kBytes, le(4)); return false;
      case 'C': string(Kind::kBytes, le(1)); return false;
      case 0x8e: string(Kind::kBytes, le(8)); return false;
      case ']': push(make(Kind::kList)); return false;
      case '}': push(make(Kind::kDict)); return false;
      case ')': push(make(Kind::kTuple)); return false;
      case 'a': {
        uint32_t v = pop();
        append_one(top(), v);
        return false;
      }
      case 'e': {
        size_t m = pop_mark();
        if (m == 0) fail("APPENDS without a list below its MARK");
        uint32_t list = stack_[m - 1];
        append_items(list, m);
        return false;
      }
      case 'l': {
        size_t m = pop_mark();
        uint32_t list = make(Kind::kList);
        append_items(list, m);
        push(list);
        return false;
      }
      case 's': {
        uint32_t v = pop(), k = pop();
        uint32_t d = top();
        mutable_container(d, Kind::kDict, "SETITEM");
        check_key(k);
        place(d, k);
        place(d, v);
        return false;
      }
      case 'u': {
        size_t m = pop_mark();
        if (m == 0) fail("SETITEMS without a dict below its MARK");
        set_items(stack_[m - 1], m);
        return false;
      }
      case 'd': {
        size_t m = pop_mark();
        uint32_t d = make(Kind::kDict);
        set_items(d, m);
        push(d);
        return false;
      }
      case 't': tuple_from(pop_mark()); return false;
      case 0x85:
      case 0x86:
      case 0x87: {
        size_t n = op - 0x84u;
        if (stack_.size() < floor() + n) fail("stack underflow");
        tuple_from(stack_.size() - n);
        return false;
      }
      case 'q': memo_put(le(1)); return false;
      case 'r': memo_put(le(4)); return false;
      case 0x94: memo_put(memo_.size()); return false;
      case 'h': memo_get(le(1)); return false;
      case 'j': memo_get(le(4)); return false;
      default: break;
    }
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", op);
    if (const char* name = opcode_name(op))
      fail(std::string("opcode ") + name + " (" + hex + ") is not allowed: a Flight Recorder dump holds plain data only; "
           "this pickle would import or call code and is refused");
    fail(std::string("unknown opcode ") + hex);
  }
  void append_one(uint32_t list, uint32_t v) {
    mutable_container(list, Kind::kList, "APPEND");
    place(list, v);
  }

  static constexpr uint32_t kUnset = 0xffffffffu;
  std::string_view in_;
  const Limits& lim_;
  size_t pos_ = 0, op_pos_ = 0;
  size_t items_ = 0, string_bytes_ = 0;
  Document doc_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::vector<uint32_t> memo_;
};

}  // namespace

Document parse_pickle(std::string_view bytes, const Limits& limits) { return Machine(bytes, limits).run(); }

}  // namespace lockstep::flightrec
