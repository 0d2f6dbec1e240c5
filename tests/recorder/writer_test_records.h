// Records the writer tests push by hand (interposer/record.h), one definition for all of them.
#pragma once

#include <cstdint>

#include "record.h"

namespace lockstep::test {

// The CommInit record of a communicator created by init: id, hash and handle as given, 2 ranks.
inline rec::Record comm_init_record(int64_t id, uint64_t hash, int rank = 0) {
  rec::Record r;
  r.kind = rec::RecKind::CommInit;
  r.comm = {};
  r.comm.id = id;
  r.comm.hash = hash;
  r.comm.handle = 0x1000 * uint64_t(id);
  r.comm.parent_id = -1;
  r.comm.nranks = 2;
  r.comm.rank = rank;
  r.comm.device = -1;
  return r;
}

}  // namespace lockstep::test
