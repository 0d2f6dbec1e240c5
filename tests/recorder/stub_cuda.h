// Stream handles with special meaning in the stub CUDA driver/runtime (stub_cuda.cpp,
// stub_cudart.cpp), shared with the probe program.
#pragma once

#include <cstdint>

namespace stub_cuda {
inline constexpr uintptr_t kStuckStream = 0xDEAD0;      // events recorded here never complete
inline constexpr uintptr_t kSlowStream = 0x5100;        // ... complete 100 ms after the record
inline constexpr int kSlowStreamDelayMs = 100;
inline constexpr uintptr_t kCapturingStream = 0xCA970;  // reports an active capture
inline constexpr unsigned long long kCaptureId = 77;
inline constexpr uintptr_t kGraph = 0x6A0;              // the graph it captures into
inline constexpr uintptr_t kGraphExec = 0xE0E0;         // what instantiate returns
}  // namespace stub_cuda
