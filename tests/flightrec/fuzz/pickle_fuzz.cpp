// libFuzzer target: the Flight Recorder dump reader (pickle VM, JSON reader, typed dump) on
// arbitrary bytes, and the mapping of a dump that reads to a lockstep Process (to_process,
// align_windows). Anything but a DumpError is a bug; ASan/UBSan catch memory errors and
// arithmetic on the dump's numbers that overflows.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "flightrec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep::flightrec;
  Limits lim;
  lim.max_nodes = 1u << 16;   // small limits keep each run fast; the logic is the same
  lim.max_items = 1u << 17;
  lim.max_string_bytes = 1u << 20;
  lim.max_string_len = 1u << 16;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    FrDump d = read_dump(in, "fuzz", lim);
    // As rank 0 (a file-name rank), and with no rank (told by a one-rank group, or refused).
    std::vector<lockstep::Process> procs;
    for (int rank : {0, -1}) {
      try {
        procs.push_back(to_process(d, rank));
      } catch (const DumpError&) {
      }
    }
    align_windows(procs);
  } catch (const DumpError&) {
  }
  return 0;
}
