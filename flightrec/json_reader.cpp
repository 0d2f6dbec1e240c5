#include "json_reader.h"

#include <nlohmann/json.hpp>

namespace lockstep::flightrec {
namespace {

// Nesting of the text, strings skipped: checked before nlohmann builds anything, so the
// conversion below can recurse safely.
size_t nesting(std::string_view t) {
  size_t depth = 0, most = 0;
  bool in_str = false;
  for (size_t k = 0; k < t.size(); ++k) {
    char c = t[k];
    if (in_str) {
      if (c == '\\') ++k;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      most = std::max(most, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return most;
}

class Builder {
 public:
  Builder(Document& doc, const Limits& lim) : doc_(doc), lim_(lim) {}

  uint32_t add(const nlohmann::json& j) {
    using T = nlohmann::json::value_t;
    switch (j.type()) {
      case T::null: return make(Kind::kNone);
      case T::boolean: {
        uint32_t id = make(Kind::kBool);
        doc_.nodes[id].i = j.get<bool>();
        return id;
      }
      case T::number_integer: {
        uint32_t id = make(Kind::kInt);
        doc_.nodes[id].i = j.get<int64_t>();
        return id;
      }
      case T::number_unsigned: {
        uint64_t v = j.get<uint64_t>();
        if (v > uint64_t(INT64_MAX)) throw DumpError("json: integer " + std::to_string(v) + " does not fit in 64 bits");
        uint32_t id = make(Kind::kInt);
        doc_.nodes[id].i = static_cast<int64_t>(v);
        return id;
      }
      case T::number_float: {
        uint32_t id = make(Kind::kFloat);
        doc_.nodes[id].f = j.get<double>();
        return id;
      }
      case T::string: return text(Kind::kStr, j.get_ref<const std::string&>());
      case T::array: {
        uint32_t id = make(Kind::kList);
        for (const auto& e : j) place(id, add(e));
        return id;
      }
      case T::object: {
        uint32_t id = make(Kind::kDict);
        for (auto it = j.begin(); it != j.end(); ++it) {
          place(id, text(Kind::kStr, it.key()));
          place(id, add(it.value()));
        }
        return id;
      }
      default: throw DumpError("json: unsupported value");
    }
  }

 private:
  uint32_t make(Kind k) {
    if (doc_.nodes.size() >= lim_.max_nodes) throw DumpError("json: more than " + std::to_string(lim_.max_nodes) + " values");
    doc_.nodes.emplace_back();
    doc_.nodes.back().kind = k;
    return static_cast<uint32_t>(doc_.nodes.size() - 1);
  }
  uint32_t text(Kind k, const std::string& s) {
    if (s.size() > lim_.max_string_len) throw DumpError("json: string of " + std::to_string(s.size()) + " bytes exceeds the limit");
    uint32_t id = make(k);
    doc_.nodes[id].s = s;
    return id;
  }
  void place(uint32_t parent, uint32_t child) {
    if (items_++ >= lim_.max_items) throw DumpError("json: too many container items");
    Node& c = doc_.nodes[child];
    c.sealed = true;
    uint16_t h = c.height;
    Node& p = doc_.nodes[parent];
    if (h + 1u > p.height) p.height = static_cast<uint16_t>(h + 1);
    p.items.push_back(child);
  }

  Document& doc_;
  const Limits& lim_;
  size_t items_ = 0;
};

}  // namespace

Document parse_json(std::string_view text, const Limits& limits) {
  if (text.size() > limits.max_input_bytes) throw DumpError("json of " + std::to_string(text.size()) + " bytes exceeds the limit");
  if (nesting(text) > limits.max_depth) throw DumpError("json: nesting deeper than " + std::to_string(limits.max_depth));
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw DumpError("json: not valid JSON (truncated or corrupt)");
  Document doc;
  Builder b(doc, limits);
  doc.root = b.add(j);
  return doc;
}

}  // namespace lockstep::flightrec
