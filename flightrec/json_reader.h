// The JSON variant of a Flight Recorder dump (torch._C._distributed_c10d._dump_nccl_trace_json),
// read into the same Document as a pickle, under the same Limits.
#pragma once

#include <string_view>

#include "value.h"

namespace lockstep::flightrec {

Document parse_json(std::string_view text, const Limits& limits = {});

}  // namespace lockstep::flightrec
