// A client of NCCL's RAS service (NCCL >= 2.24, src/ras/client.cc in NVIDIA/nccl): connect to
// host:port (NCCL_RAS_ADDR of the job, default localhost:28028), "CLIENT PROTOCOL 2",
// "TIMEOUT n", "SET FORMAT json" (2.28+; older servers answer ERROR and we keep their text),
// "VERBOSE STATUS", read until the server closes. Bounded in time and size.
#pragma once

#include <string>

#include "snapshot.h"

namespace lockstep::attach {

inline constexpr const char* kDefaultRasAddress = "localhost:28028";

// timeout_s bounds the whole exchange (the server's collective over its peers included).
RasAnswer query_ras(const std::string& address, int timeout_s);

// Parses a RAS JSON report (NCCL 2.28 client_support.cc rasDumpCommsToJSON) into answer.comms;
// false (comms left empty) when the text is not such a report. Untrusted input.
bool parse_ras_json(const std::string& text, RasAnswer& answer);

}  // namespace lockstep::attach
