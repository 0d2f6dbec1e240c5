// A plain value tree read from an untrusted dump: dict/list/tuple/str/bytes/int/float/bool/None.
// Nodes live in one arena and refer to each other by index; a pickle's memo may share a node
// between several parents (a DAG), never in a cycle (pickle.cpp seals a container once it is
// placed). Every accessor is bounded: nothing here recurses over the input.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::flightrec {

// Raised for anything unreadable; the message is the user-facing reason.
struct DumpError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kStr, kBytes, kList, kTuple, kDict };
const char* kind_name(Kind k);

struct Limits {
  size_t max_input_bytes = size_t(1) << 30;   // a 20,000-entry dump with stacks is ~10 MB
  size_t max_nodes = 8u << 20;                // values, containers included
  size_t max_items = 16u << 20;               // container slots in all (dict: 2 per item)
  size_t max_string_bytes = 256u << 20;       // all strings together
  size_t max_string_len = 1u << 20;           // one string
  size_t max_depth = 64;                      // nesting of containers (FR needs 6)
  size_t max_stack = 1u << 20;                // VM stack entries
  size_t max_memo = 1u << 20;                 // memo slots
};

struct Node {
  Kind kind = Kind::kNone;
  bool sealed = false;        // placed in a container: immutable from then on
  uint16_t height = 0;        // 0 for scalars; 1 + tallest child for containers
  int64_t i = 0;              // kBool, kInt
  double f = 0;               // kFloat
  std::string s;              // kStr, kBytes
  std::vector<uint32_t> items;  // kList, kTuple; kDict: key, value, key, value, ...
};

class Document {
 public:
  std::vector<Node> nodes;
  uint32_t root = 0;

  const Node& at(uint32_t id) const { return nodes.at(id); }
  // Dict lookup by string key (the last duplicate wins, as in Python); nullopt when absent.
  std::optional<uint32_t> get(uint32_t dict, std::string_view key) const;
  // Typed reads: throw DumpError naming `what` when the node has another type.
  const std::string& str(uint32_t id, const char* what) const;
  int64_t integer(uint32_t id, const char* what) const;  // int, bool, or a decimal string
  bool boolean(uint32_t id, const char* what) const;
  const std::vector<uint32_t>& seq(uint32_t id, const char* what) const;  // list or tuple
  const Node& dict(uint32_t id, const char* what) const;
  bool is_none(uint32_t id) const { return at(id).kind == Kind::kNone; }
};

}  // namespace lockstep::flightrec
