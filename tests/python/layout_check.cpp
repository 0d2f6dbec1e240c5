// Compile-time proof that python_layouts.h matches the CPython headers it is built against
// (built once per interpreter, with its internal headers; a mismatch fails the build of the
// test module, so the Python tests cannot run on a wrong layout). Runtime: nothing.
#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#else
#include <frameobject.h>
#endif
#if PY_VERSION_HEX >= 0x030D0000
#include <internal/pycore_runtime.h>
#endif

#include <cstddef>

#include "python_layouts.h"

namespace lp = lockstep::pyframes_detail;

static_assert(sizeof(void*) == 8, "layouts are for LP64 targets");
static_assert(offsetof(PyObject, ob_type) == 8);
static_assert(offsetof(PyVarObject, ob_size) == 16);
static_assert(offsetof(PyBytesObject, ob_sval) == 32);
static_assert(offsetof(PyASCIIObject, length) == 16);
#if PY_VERSION_HEX >= 0x030B0000
static_assert(FRAME_OWNED_BY_GENERATOR == lp::kOwnedByGenerator);
#endif

// The state bitfield positions (interned:2, kind:3, compact:1, ascii:1): checked by value.
constexpr unsigned state_bits(unsigned kind, unsigned compact, unsigned ascii) {
  return (kind << lp::kStateKindShift) | (compact ? lp::kStateCompactBit : 0) |
         (ascii ? lp::kStateAsciiBit : 0);
}
static_assert(state_bits(4, 1, 0) == ((4u << 2) | 32u));

#if PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030B0000
constexpr const lp::PyLayout& L = lp::kLayout310;
static_assert(offsetof(PyThreadState, frame) == L.ts_frame);
static_assert(offsetof(PyFrameObject, f_back) == L.fr_previous);
static_assert(offsetof(PyFrameObject, f_code) == L.fr_code);
static_assert(offsetof(PyFrameObject, f_lasti) == L.fr_lasti);
static_assert(offsetof(PyCodeObject, co_firstlineno) == L.co_firstlineno);
static_assert(offsetof(PyCodeObject, co_filename) == L.co_filename);
static_assert(offsetof(PyCodeObject, co_name) == L.co_qualname);
static_assert(offsetof(PyCodeObject, co_linetable) == L.co_linetable);
static_assert(sizeof(PyASCIIObject) == L.uni_ascii_size);
static_assert(sizeof(PyCompactUnicodeObject) == L.uni_compact_size);
static_assert(offsetof(PyASCIIObject, state) == L.uni_state);
#define LOCKSTEP_SKIP_COMMON_CHECKS 1  // the rest is about _PyInterpreterFrame (3.11+)
#elif PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
constexpr const lp::PyLayout& L = lp::kLayout311;
static_assert(offsetof(PyThreadState, cframe) == L.ts_cframe);
static_assert(offsetof(_PyCFrame, current_frame) == L.cframe_current);
static_assert(offsetof(_PyInterpreterFrame, f_code) == L.fr_code);
static_assert(offsetof(_PyInterpreterFrame, prev_instr) == L.fr_instr);
static_assert(offsetof(PyCodeObject, _co_firsttraceable) == L.co_firsttraceable);
static_assert(offsetof(PyASCIIObject, state) + sizeof(unsigned) + 4 == offsetof(PyASCIIObject, wstr));
#elif PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
constexpr const lp::PyLayout& L = lp::kLayout312;
static_assert(offsetof(PyThreadState, cframe) == L.ts_cframe);
static_assert(offsetof(_PyCFrame, current_frame) == L.cframe_current);
static_assert(offsetof(_PyInterpreterFrame, f_code) == L.fr_code);
static_assert(offsetof(_PyInterpreterFrame, prev_instr) == L.fr_instr);
static_assert(FRAME_OWNED_BY_CSTACK == lp::kOwnedByCStack);
static_assert(offsetof(PyCodeObject, _co_firsttraceable) == L.co_firsttraceable);
static_assert(offsetof(PyThreadState, interp) == L.ts_interp);
#elif PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030F0000
// 3.13 and 3.14 take their offsets from _Py_DebugOffsets at run time; check our mirror of that
// struct and the one size we derive instead of reading.
#if PY_VERSION_HEX < 0x030E0000
using D = lp::PyDebugOffsets313;
#else
using D = lp::PyDebugOffsets314;
static_assert(offsetof(_Py_DebugOffsets, interpreter_frame.tlbc_index) ==
              offsetof(D, interpreter_frame.tlbc_index));
static_assert(offsetof(_Py_DebugOffsets, tuple_object.ob_size) == offsetof(D, tuple_object.ob_size));
#endif
static_assert(offsetof(_PyRuntimeState, debug_offsets) == 0);
static_assert(offsetof(_Py_DebugOffsets, version) == offsetof(D, version));
static_assert(offsetof(_Py_DebugOffsets, free_threaded) == offsetof(D, free_threaded));
static_assert(offsetof(_Py_DebugOffsets, thread_state.current_frame) ==
              offsetof(D, thread_state.current_frame));
static_assert(offsetof(_Py_DebugOffsets, thread_state.interp) ==
              offsetof(D, thread_state.interp));
static_assert(offsetof(_Py_DebugOffsets, interpreter_frame.previous) ==
              offsetof(D, interpreter_frame.previous));
static_assert(offsetof(_Py_DebugOffsets, interpreter_frame.executable) ==
              offsetof(D, interpreter_frame.executable));
static_assert(offsetof(_Py_DebugOffsets, interpreter_frame.instr_ptr) ==
              offsetof(D, interpreter_frame.instr_ptr));
static_assert(offsetof(_Py_DebugOffsets, interpreter_frame.owner) ==
              offsetof(D, interpreter_frame.owner));
static_assert(offsetof(_Py_DebugOffsets, code_object.filename) ==
              offsetof(D, code_object.filename));
static_assert(offsetof(_Py_DebugOffsets, code_object.qualname) ==
              offsetof(D, code_object.qualname));
static_assert(offsetof(_Py_DebugOffsets, code_object.linetable) ==
              offsetof(D, code_object.linetable));
static_assert(offsetof(_Py_DebugOffsets, code_object.firstlineno) ==
              offsetof(D, code_object.firstlineno));
static_assert(offsetof(_Py_DebugOffsets, code_object.co_code_adaptive) ==
              offsetof(D, code_object.co_code_adaptive));
static_assert(offsetof(_Py_DebugOffsets, pyobject.ob_type) == offsetof(D, pyobject.ob_type));
static_assert(offsetof(_Py_DebugOffsets, bytes_object.ob_sval) ==
              offsetof(D, bytes_object.ob_sval));
static_assert(offsetof(_Py_DebugOffsets, unicode_object.asciiobject_size) ==
              offsetof(D, unicode_object.asciiobject_size));
static_assert(sizeof(PyCompactUnicodeObject) == sizeof(PyASCIIObject) + 2 * sizeof(void*));
static_assert(FRAME_OWNED_BY_CSTACK >= lp::kFirstShimOwner);
#define LOCKSTEP_SKIP_COMMON_CHECKS 1
#else
#error "python_layouts.h has no layout for this CPython version"
#endif

#ifndef LOCKSTEP_SKIP_COMMON_CHECKS
static_assert(offsetof(_PyInterpreterFrame, previous) == L.fr_previous);
static_assert(offsetof(_PyInterpreterFrame, owner) == L.fr_owner);
static_assert(offsetof(PyCodeObject, co_firstlineno) == L.co_firstlineno);
static_assert(offsetof(PyCodeObject, co_filename) == L.co_filename);
static_assert(offsetof(PyCodeObject, co_qualname) == L.co_qualname);
static_assert(offsetof(PyCodeObject, co_linetable) == L.co_linetable);
static_assert(offsetof(PyCodeObject, co_code_adaptive) == L.co_code_adaptive);
static_assert(offsetof(PyVarObject, ob_size) == L.co_size);
static_assert(offsetof(PyObject, ob_type) == L.ob_type);
static_assert(offsetof(PyBytesObject, ob_sval) == L.bytes_sval);
static_assert(offsetof(PyASCIIObject, length) == L.uni_length);
static_assert(offsetof(PyASCIIObject, state) == L.uni_state);
static_assert(sizeof(PyASCIIObject) == L.uni_ascii_size);
static_assert(sizeof(PyCompactUnicodeObject) == L.uni_compact_size);
static_assert(offsetof(PyUnicodeObject, data) == L.uni_compact_size);
#endif

#if PY_VERSION_HEX >= 0x030C0000
// The code-watcher guard (python_frames.cpp) calls CPython with these values and signatures.
static_assert(PY_CODE_EVENT_CREATE == lp::kPyCodeEventCreate);
static_assert(PY_CODE_EVENT_DESTROY == lp::kPyCodeEventDestroy);
static_assert(sizeof(PyCodeEvent) == sizeof(int));
#endif
