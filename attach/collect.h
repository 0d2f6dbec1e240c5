// One node's snapshot: every given process read (procfs, native stacks under a bounded ptrace
// stop, Python frames), and NCCL RAS asked once per distinct RAS address (docs/attach.md).
#pragma once

#include <string>
#include <vector>

#include "snapshot.h"

namespace lockstep::attach {

struct CollectOptions {
  bool native = true;   // ptrace stop + unwind (false: procfs, Python and RAS only)
  bool ras = true;
  int ras_timeout_s = 5;
  // The second look (SecondLook): this long after the first; 0: none (then nothing is proven hung).
  int confirm_ms = 1000;
};

ProcessSnapshot snapshot_process(int pid, const CollectOptions& o);
NodeSnapshot collect_node(const std::vector<int>& pids, const CollectOptions& o);

}  // namespace lockstep::attach
