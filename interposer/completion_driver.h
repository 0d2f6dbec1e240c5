// The CUDA driver entry points that completion tracking uses, found in libcuda.so.1 at run
// time (dlopen, never linked: a process without a driver simply has no completions). Declared
// with plain types so that cuda.h's version macros do not matter.
#pragma once

#include <cstddef>

namespace lockstep::rec {

struct CompletionDriver {
  using Res = int;  // CUresult
  Res (*event_create)(void** ev, unsigned flags) = nullptr;
  Res (*event_record)(void* ev, void* stream) = nullptr;
  Res (*event_query)(void* ev) = nullptr;
  Res (*event_destroy)(void* ev) = nullptr;
  Res (*ctx_get_current)(void** ctx) = nullptr;
  Res (*ctx_set_current)(void* ctx) = nullptr;
  Res (*ctx_get_device)(int* dev) = nullptr;
  Res (*device_get_attribute)(int* value, int attribute, int dev) = nullptr;
  Res (*capture_info)(void* stream, int* status, unsigned long long* id, void** graph,
                      const void** deps, const void** edges, size_t* ndeps) = nullptr;
  Res (*exchange_capture_mode)(int* mode) = nullptr;
  Res (*driver_version)(int* v) = nullptr;
  // Stream memory operations (the memop completion signal): optional.
  Res (*write_value64)(void* stream, unsigned long long addr, unsigned long long value,
                       unsigned flags) = nullptr;
  Res (*mem_host_alloc)(void** p, size_t bytes, unsigned flags) = nullptr;
  Res (*mem_host_get_device_pointer)(unsigned long long* dptr, void* p, unsigned flags) = nullptr;
};

// nullptr when libcuda.so.1 cannot be loaded or lacks the event entry points.
CompletionDriver* load_completion_driver();

}  // namespace lockstep::rec
