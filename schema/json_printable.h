// A JSON document built from trace strings, made printable in one pass (text_escape.h): every
// string value and key that is not already printable is replaced by its printable form. For
// documents assembled from many sources (the report page's data, the timeline's trace file),
// where escaping each field where it enters would miss the next field someone adds.
#pragma once

#include <nlohmann/json.hpp>
#include <utility>

#include "text_escape.h"

namespace lockstep {

inline void make_printable(nlohmann::json& j) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (!is_printable(s)) j = printable(s);
  } else if (j.is_array()) {
    for (auto& v : j) make_printable(v);
  } else if (j.is_object()) {
    bool keys_printable = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      keys_printable &= is_printable(it.key());
      make_printable(it.value());
    }
    if (!keys_printable) {
      nlohmann::json out = nlohmann::json::object();
      for (auto it = j.begin(); it != j.end(); ++it) out[printable(it.key())] = std::move(it.value());
      j = std::move(out);
    }
  }
}

}  // namespace lockstep
