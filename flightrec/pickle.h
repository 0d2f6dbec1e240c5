// A safe reader for the pickles PyTorch's Flight Recorder writes: a small stack machine over an
// allowlist of data opcodes (below) that builds a Document. It never imports, calls or builds
// objects: GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ(_EX), PERSID, BINPERSID,
// EXT1/2/4, sets, buffers and the text (protocol 0) opcodes are rejected with DumpError.
//
// Allowed (protocol 2-5 binary data):
//   PROTO FRAME STOP MARK POP POP_MARK DUP
//   NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 LONG1 LONG4(<= 8 bytes) BINFLOAT
//   BINUNICODE SHORT_BINUNICODE BINUNICODE8 BINSTRING SHORT_BINSTRING BINBYTES SHORT_BINBYTES BINBYTES8
//   EMPTY_LIST APPEND APPENDS LIST  EMPTY_DICT SETITEM SETITEMS DICT
//   EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3  BINPUT LONG_BINPUT MEMOIZE BINGET LONG_BINGET
// torch's C++ pickler (protocol 2) uses PROTO, EMPTY_DICT/LIST, MARK, SETITEMS, APPENDS, TUPLE2,
// BINUNICODE, BININT*, LONG1, BINFLOAT, NONE, NEWTRUE/NEWFALSE, BINPUT, BINGET, STOP.
#pragma once

#include <string_view>

#include "value.h"

namespace lockstep::flightrec {

// Throws DumpError (with the byte offset) on anything outside the allowlist or the limits.
Document parse_pickle(std::string_view bytes, const Limits& limits = {});

}  // namespace lockstep::flightrec
