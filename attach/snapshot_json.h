// NodeSnapshot <-> JSON: the file `lockstep attach` writes per node (DIR/<host>.attach.json) and
// the analysis reads back (possibly from another node: untrusted input, every field checked).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "snapshot.h"

namespace lockstep::attach {

inline constexpr int kSnapshotFormat = 1;

nlohmann::json to_json(const NodeSnapshot& n);
// nullopt with error set when j is not a snapshot of a format we read.
std::optional<NodeSnapshot> node_from_json(const nlohmann::json& j, std::string& error);

}  // namespace lockstep::attach
