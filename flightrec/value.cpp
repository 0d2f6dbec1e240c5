#include "value.h"

namespace lockstep::flightrec {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong(const char* what, const char* want, Kind got) {
  throw DumpError(std::string(what) + ": expected " + want + ", found " + kind_name(got));
}
}  // namespace

std::optional<uint32_t> Document::get(uint32_t dict, std::string_view key) const {
  const Node& d = at(dict);
  if (d.kind != Kind::kDict) return std::nullopt;
  std::optional<uint32_t> found;
  for (size_t k = 0; k + 1 < d.items.size(); k += 2) {
    const Node& kn = at(d.items[k]);
    if (kn.kind == Kind::kStr && kn.s == key) found = d.items[k + 1];
  }
  return found;
}

const std::string& Document::str(uint32_t id, const char* what) const {
  const Node& n = at(id);
  if (n.kind != Kind::kStr && n.kind != Kind::kBytes) wrong(what, "a string", n.kind);
  return n.s;
}

int64_t Document::integer(uint32_t id, const char* what) const {
  const Node& n = at(id);
  if (n.kind == Kind::kInt || n.kind == Kind::kBool) return n.i;
  if (n.kind == Kind::kStr && !n.s.empty() && n.s.size() < 20) {  // JSON pg_status holds numbers as text
    size_t k = n.s[0] == '-' ? 1 : 0;
    int64_t v = 0;
    if (k == n.s.size()) wrong(what, "an integer", n.kind);
    for (; k < n.s.size(); ++k) {
      if (n.s[k] < '0' || n.s[k] > '9') wrong(what, "an integer", n.kind);
      // 19 digits can exceed int64: such a string is no integer of the dump.
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, n.s[k] - '0', &v))
        wrong(what, "an integer that fits in 64 bits", n.kind);
    }
    return n.s[0] == '-' ? -v : v;
  }
  wrong(what, "an integer", n.kind);
}

bool Document::boolean(uint32_t id, const char* what) const {
  const Node& n = at(id);
  if (n.kind == Kind::kBool || n.kind == Kind::kInt) return n.i != 0;
  wrong(what, "a bool", n.kind);
}

const std::vector<uint32_t>& Document::seq(uint32_t id, const char* what) const {
  const Node& n = at(id);
  if (n.kind != Kind::kList && n.kind != Kind::kTuple) wrong(what, "a list", n.kind);
  return n.items;
}

const Node& Document::dict(uint32_t id, const char* what) const {
  const Node& n = at(id);
  if (n.kind != Kind::kDict) wrong(what, "a dict", n.kind);
  return n;
}

}  // namespace lockstep::flightrec
