// Python frames of the calling thread, read from inside an NCCL hook without the GIL.
//
// PyTorch calls NCCL with the GIL released; the calling thread is parked in C code, so its own
// frame chain cannot move while the hook runs. capture_python_frames() walks that chain by
// reading CPython's structs directly (layouts in python_layouts.h): no GIL, no lock, no Python
// API call beyond two that are safe without the GIL (Py_IsInitialized,
// PyGILState_GetThisThreadState). CPython is found at run time (dlsym); nothing links libpython.
// Supported: CPython 3.11, 3.12 (hard-coded layouts), 3.13 (_Py_DebugOffsets). Details and
// what is not captured: docs/python-frames.md.
//
// Use from the recorder:
//   hot path (any thread, inside the hook):
//     PyFrameRaw py[64];
//     size_t n = capture_python_frames(py, 64);            // innermost first
//     uint64_t h = python_frames_hash(py, n, native_hash);  // stack dedup key
//   writer thread, once per new stack:
//     PyFrameInfo fi = resolve_python_frame(py[i]);         // file, qualname, line
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep {

// Interned, immortal description of one code object (file, qualname, location table),
// created the first time a capture meets that code object. Opaque outside python_frames.cpp.
struct PyCodeInfo;

// One captured frame: 16 bytes, trivially copyable, valid for the life of the process (it
// points into the intern table, never at Python objects, so the writer thread may resolve it
// long after the Python frame and its code object are gone).
struct PyFrameRaw {
  const PyCodeInfo* code;  // nullptr: frame seen but not interned (intern table full)
  int32_t addr;            // byte offset of the current instruction in the code, -1 if unknown
  int32_t reserved;
};

// True when this process runs a supported CPython. Decided once, at the first call (dlsym):
// a Python loaded later, or only in a RTLD_LOCAL namespace, is not seen.
bool python_frames_available();

// Why frames are or are not available, e.g. "CPython 3.12.3" or "no CPython in this process".
const char* python_frames_status();

// Hot path. Writes up to `max` frames of the calling thread, innermost first, and returns how
// many. 0 when Python is not available or not initialized, the thread has no Python thread
// state (pure C thread), or it runs no Python code. Deeper stacks keep their innermost `max`.
// Allocation-free except the first time a code object is met (it is interned then).
size_t capture_python_frames(PyFrameRaw* out, size_t max);

// The same frames, through a per-thread cache of the stacks this thread was seen in: when the
// thread's frame words (code pointer, instruction pointer, owner of every frame) equal those of
// a stack proven right and no code object died since (code watcher), the proven frames are
// returned without reading any code object or the intern table. *stack_id: a process-unique
// id of that proven stack (equal ids: equal frames), 0 when the stack was not cacheable (no
// code watcher, too deep, intern table full).
size_t capture_python_frames_cached(PyFrameRaw* out, size_t max, uint64_t* stack_id);

// Stable hash of captured frames, for stack dedup: equal for the same code objects' contents
// (file, qualname, first line) at the same instruction offsets — across processes too.
// `seed` lets the caller chain it with the native part.
uint64_t python_frames_hash(const PyFrameRaw* frames, size_t n, uint64_t seed = 0);

struct PyFrameInfo {
  std::string file;      // co_filename
  std::string function;  // co_qualname ("Class.method", "outer.<locals>.inner", "<lambda>")
  int line = 0;          // 0 when unknown
};

// Which guard tells a live code object from a dead one at the same address, for humans:
// "code watcher ..." once CPython 3.12+ reports code objects' deaths to us (registered from the
// main thread after the first capture that found Python frames), else "exact guard: <why>"
// (names, first line and location table compared at every capture). docs/python-frames.md.
const char* python_frames_guard_status();

// Benchmarking only (bench_knobs.h, "pyguard"): every lookup takes the exact guard even where
// the code watcher would let it trust an entry. Never needed in a real job.
void python_frames_bench_exact_guard(bool on);

// Off the hot path (writer thread). Thread-safe; reads only the intern table.
PyFrameInfo resolve_python_frame(const PyFrameRaw& frame);

}  // namespace lockstep
