// libFuzzer target: the Flight Recorder dump reader (pickle VM, JSON reader, typed dump) on
// arbitrary bytes. Anything but a DumpError is a bug; ASan/UBSan catch memory errors.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dump.h"

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
    (void)d;
  } catch (const DumpError&) {
  }
  return 0;
}
