// CPython internal struct layouts used by python_frames.cpp to walk a thread's frame chain
// without the GIL and without calling the Python API. Internal to the recorder; public so that
// tests/python/layout_check.cpp can verify every number against the real CPython headers
// (static_assert, one build per interpreter found).
//
// 3.10, 3.11 and 3.12: hard-coded below (x86-64/aarch64 LP64, default non-debug, GIL build).
// 3.13 and 3.14, GIL and free-threaded builds: read at run time from _PyRuntime.debug_offsets
// (_Py_DebugOffsets, the table py-spy and pystack use, which carries its own version field);
// PyDebugOffsets313/314 mirror the prefix of that struct that we read, and every offset read
// from it is checked against the sizes it publishes before it is trusted. A new minor release
// needs one mirror struct here at most.
#pragma once

#include <cstddef>
#include <cstdint>

#include "python_frames.h"

namespace lockstep::pyframes_detail {

inline constexpr uint32_t kNoField = 0xffffffffu;
// PyFrameRaw.addr of a frame whose instruction we cannot locate (reported with line 0).
inline constexpr int32_t kAddrNoLine = INT32_MIN;

// _PyInterpreterFrame.owner values (Include/internal/pycore_frame.h). Owners from 3 up are
// frames that are not Python code: FRAME_OWNED_BY_CSTACK (3 in 3.12/3.13), and in 3.14
// FRAME_OWNED_BY_INTERPRETER (3) and FRAME_OWNED_BY_CSTACK (4); 3.11 never stores 3 or more.
// So one check serves every version.
inline constexpr int kOwnedByGenerator = 1;
inline constexpr int kOwnedByCStack = 3;
inline constexpr int kFirstShimOwner = 3;

// PyASCIIObject.state bit positions (interned:2, kind:3, compact:1, ascii:1, ready:1 in 3.11).
inline constexpr unsigned kStateKindShift = 2;
inline constexpr unsigned kStateCompactBit = 1u << 5;
inline constexpr unsigned kStateAsciiBit = 1u << 6;
inline constexpr unsigned kStateReadyBit = 1u << 7;  // 3.10/3.11 only (uni_has_ready_bit)
// Free-threaded 3.14+: `interned` is a whole byte, so kind/compact/ascii move up by 6 bits.
inline constexpr unsigned kStateShiftFreeThreaded314 = 6;

// How co_linetable encodes lines: PEP 626 pairs (3.10) or the location table (3.11+).
enum class LineTable : uint8_t { kPep626, kLocations };

struct PyLayout {
  int minor = 0;
  bool free_threaded = false;
  // 3.10: PyThreadState.frame -> PyFrameObject chain (f_back, f_code, f_lasti in code units).
  uint32_t ts_frame = kNoField;
  uint32_t fr_lasti = kNoField;
  // PyThreadState -> innermost _PyInterpreterFrame
  uint32_t ts_cframe = kNoField;         // 3.11/3.12: PyThreadState.cframe
  uint32_t cframe_current = kNoField;    // 3.11/3.12: _PyCFrame.current_frame
  uint32_t ts_current_frame = kNoField;  // 3.13+:     PyThreadState.current_frame
  uint32_t ts_interp = kNoField;         // 3.12+: PyThreadState.interp (code-watcher guard)
  // _PyInterpreterFrame
  uint32_t fr_code = 0;      // f_code (3.11/3.12), f_executable (3.13)
  uint32_t fr_previous = 0;
  uint32_t fr_instr = 0;     // prev_instr (3.11/3.12), instr_ptr (3.13)
  uint32_t fr_owner = kNoField;  // 3.10 has no owner
  bool executable_tagged = false;  // 3.14+: f_executable is a _PyStackRef (low bits are tags)
  uint32_t fr_tlbc_index = kNoField;  // free-threaded 3.14+: index of the thread's bytecode copy
  // PyCodeObject
  uint32_t co_size = 16;     // ob_size: number of code units
  uint32_t co_filename = 0;
  uint32_t co_qualname = 0;  // co_name on 3.10, which has no co_qualname
  uint32_t co_linetable = 0;
  uint32_t co_firstlineno = 0;
  uint32_t co_firsttraceable = kNoField;  // not in _Py_DebugOffsets: unused for 3.13
  uint32_t co_code_adaptive = 0;
  // PyObject, PyBytesObject, PyUnicodeObject
  uint32_t ob_type = 8;
  uint32_t bytes_size = 16;
  uint32_t bytes_sval = 32;
  uint32_t uni_length = 16;
  uint32_t uni_state = 32;
  uint32_t uni_ascii_size = 0;    // sizeof(PyASCIIObject): compact ASCII data follows it
  uint32_t uni_compact_size = 0;  // sizeof(PyCompactUnicodeObject): compact non-ASCII data
                                  // follows it; legacy strings keep data.any there
  bool uni_has_ready_bit = false;
  unsigned state_shift = 0;  // added to the kStateKindShift/Compact/Ascii bit positions
  LineTable linetable = LineTable::kLocations;
};

// Python 3.10: Include/cpython/pystate.h, cpython/frameobject.h, cpython/code.h,
// cpython/unicodeobject.h of 3.10.x. Frames are PyFrameObjects; code has no co_qualname.
inline constexpr PyLayout kLayout310 = [] {
  PyLayout l;
  l.minor = 10;
  l.ts_frame = 24;      // after prev, next, interp
  l.fr_previous = 24;   // f_back, after PyObject_VAR_HEAD
  l.fr_code = 32;
  l.fr_lasti = 96;      // int, instruction index (-1: not started)
  l.co_firstlineno = 40;
  l.co_filename = 104;
  l.co_qualname = 112;  // co_name
  l.co_linetable = 120;
  l.uni_ascii_size = 48;
  l.uni_compact_size = 72;
  l.uni_has_ready_bit = true;
  l.linetable = LineTable::kPep626;
  return l;
}();

// Python 3.11: Include/internal/pycore_frame.h, Include/cpython/pystate.h,
// Include/cpython/code.h, Include/cpython/unicodeobject.h of 3.11.x.
inline constexpr PyLayout kLayout311 = [] {
  PyLayout l;
  l.minor = 11;
  l.ts_cframe = 56;
  l.cframe_current = 8;  // after uint8_t use_tracing
  l.fr_code = 32;        // after f_func, f_globals, f_builtins, f_locals
  l.fr_previous = 48;
  l.fr_instr = 56;
  l.fr_owner = 69;       // after int stacktop, bool is_entry
  l.co_firstlineno = 72;
  l.co_filename = 112;
  l.co_qualname = 128;
  l.co_linetable = 136;
  l.co_firsttraceable = 168;
  l.co_code_adaptive = 184;
  l.uni_ascii_size = 48;  // still has wstr
  l.uni_compact_size = 72;
  l.uni_has_ready_bit = true;
  return l;
}();

// Python 3.12: same headers of 3.12.x (f_code moved first, _PyCFrame lost use_tracing,
// PyCodeObject gained co_framesize/co_version/monitoring fields, unicode lost wstr).
inline constexpr PyLayout kLayout312 = [] {
  PyLayout l;
  l.minor = 12;
  l.ts_cframe = 56;
  l.cframe_current = 0;
  l.fr_code = 0;
  l.fr_previous = 8;
  l.fr_instr = 56;
  l.fr_owner = 70;  // after int stacktop, uint16_t return_offset
  l.ts_interp = 16;  // after prev, next
  l.co_firstlineno = 68;
  l.co_filename = 112;
  l.co_qualname = 128;
  l.co_linetable = 136;
  l.co_firsttraceable = 176;
  l.co_code_adaptive = 192;
  l.uni_ascii_size = 40;
  l.uni_compact_size = 56;
  return l;
}();

// Prefix of CPython 3.13's _Py_DebugOffsets (Include/internal/pycore_runtime.h), the first
// member of _PyRuntime. Only stable within one minor version, hence the version check on use.
struct PyDebugOffsets313 {
  char cookie[8];  // "xdebugpy"
  uint64_t version;  // PY_VERSION_HEX of the runtime
  uint64_t free_threaded;
  struct { uint64_t size, finalizing, interpreters_head; } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil,
        gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked,
        gil_runtime_state_holder;
  } interpreter_state;
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id,
        datastack_chunk, status;
  } thread_state;
  struct { uint64_t size, previous, executable, instr_ptr, localsplus, owner; } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
        localspluskinds, co_code_adaptive;
  } code_object;
  struct { uint64_t size, ob_type; } pyobject;
  struct { uint64_t size, tp_name, tp_repr, tp_flags; } type_object;
  struct { uint64_t size, ob_item, ob_size; } tuple_object;
  struct { uint64_t size, ob_item, ob_size; } list_object;
  struct { uint64_t size, ma_keys, ma_values; } dict_object;
  struct { uint64_t size, ob_fval; } float_object;
  struct { uint64_t size, lv_tag, ob_digit; } long_object;
  struct { uint64_t size, ob_size, ob_sval; } bytes_object;
  struct { uint64_t size, state, length, asciiobject_size; } unicode_object;
};

// Prefix of CPython 3.14's _Py_DebugOffsets: interpreter_state gained threads_main,
// code_object_generation, tlbc_generation; interpreter_frame stackpointer, tlbc_index;
// code_object co_tlbc; set_object appeared before dict_object.
struct PyDebugOffsets314 {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  struct { uint64_t size, finalizing, interpreters_head; } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, threads_main, gc, imports_modules, sysdict, builtins,
        ceval_gil, gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked,
        gil_runtime_state_holder, code_object_generation, tlbc_generation;
  } interpreter_state;
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id,
        datastack_chunk, status;
  } thread_state;
  struct {
    uint64_t size, previous, executable, instr_ptr, localsplus, owner, stackpointer, tlbc_index;
  } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
        localspluskinds, co_code_adaptive, co_tlbc;
  } code_object;
  struct { uint64_t size, ob_type; } pyobject;
  struct { uint64_t size, tp_name, tp_repr, tp_flags; } type_object;
  struct { uint64_t size, ob_item, ob_size; } tuple_object;
  struct { uint64_t size, ob_item, ob_size; } list_object;
  struct { uint64_t size, used, table, mask; } set_object;
  struct { uint64_t size, ma_keys, ma_values; } dict_object;
  struct { uint64_t size, ob_fval; } float_object;
  struct { uint64_t size, lv_tag, ob_digit; } long_object;
  struct { uint64_t size, ob_size, ob_sval; } bytes_object;
  struct { uint64_t size, state, length, asciiobject_size; } unicode_object;
};

// What the frame reader needs from the process: the interpreter's exported symbols. Found
// with dlsym in a real process; built by hand in tests (synthetic interpreters of each layout).
struct PySymbols {
  const unsigned long* py_version = nullptr;    // Py_Version (3.11+)
  const char* (*get_version)() = nullptr;       // Py_GetVersion (3.10 has no Py_Version)
  int (*is_initialized)() = nullptr;            // Py_IsInitialized
  void* (*this_thread_state)() = nullptr;       // PyGILState_GetThisThreadState
  const void* runtime = nullptr;                // _PyRuntime (3.13+: debug offsets first)
  // The code-watcher guard (3.12+, python_frames.cpp); null where absent (and in tests).
  int (*add_pending_call)(int (*)(void*), void*) = nullptr;  // Py_AddPendingCall
  int (*add_code_watcher)(int (*)(int, void*)) = nullptr;    // PyCode_AddWatcher
  int (*at_exit)(void (*)()) = nullptr;                      // Py_AtExit
  void (*err_clear)() = nullptr;                             // PyErr_Clear
  void* (*interpreter_get)() = nullptr;                      // PyInterpreterState_Get
  uintptr_t code_type = 0, unicode_type = 0, bytes_type = 0;
};

struct PyRuntimeView {
  PyLayout layout;
  PySymbols sym;
  bool ok = false;
  char status[128] = {};
};

// Chooses and validates the layout for the interpreter `sym` describes; never throws, never
// reads past what the symbols point to. status says why not when !ok.
PyRuntimeView python_runtime_from(const PySymbols& sym);

// The layout of a 3.13/3.14 runtime from a copy of the start of its _PyRuntime (at least
// sizeof(PyDebugOffsets314) bytes), validated as for the recorder; `why` says why not. Used by
// `lockstep attach` (attach/remote_python.cpp), which reads _PyRuntime from another process.
bool python_layout_from_runtime_copy(const void* runtime_copy, unsigned minor, PyLayout& layout,
                                     char* why, size_t why_size);

// capture_python_frames() against an explicit runtime and thread state (tests).
size_t python_capture_from(const PyRuntimeView& rt, const void* tstate, PyFrameRaw* out,
                           size_t max);

// PyCodeEvent values (Include/cpython/code.h, 3.12+; checked in layout_check.cpp).
inline constexpr int kPyCodeEventCreate = 0;
inline constexpr int kPyCodeEventDestroy = 1;

// Test hook: while false, the first capture does not ask for the code watcher (so tests can
// exercise the exact guard in a process that captures). Default true.
void python_frames_allow_code_watcher(bool allow);

// Line of the byte offset `addr` from a 3.10 (PEP 626) co_linetable, as PyCode_Addr2Line.
int python_linetable_line_310(const uint8_t* table, size_t len, int firstlineno, int addr);

// Line of the instruction at byte offset `addr` (2 * code-unit index) from a 3.11+ location
// table (co_linetable, format of CPython's Objects/locations.md). Returns firstlineno for a
// negative addr (frame not started), -1 where the table says "no location" or addr is past
// its end — the same answers as PyCode_Addr2Line.
int python_linetable_line(const uint8_t* table, size_t len, int firstlineno, int addr);

}  // namespace lockstep::pyframes_detail
