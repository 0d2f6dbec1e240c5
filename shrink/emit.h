// The forms a shrunk schedule is handed over in (docs/shrink.md): a standalone C program (NCCL +
// CUDA driver API, one process per rank), a PyTorch script (torch.distributed, same calls in the
// same order), the trace itself, and a README with the commands and the expected hang.
#pragma once

#include <string>

#include "shrink.h"
#include "trace_model.h"

namespace lockstep::shrink {

// Throws std::runtime_error for an op the emitters cannot express (named).
std::string emit_c(const Trace& minimal, const std::string& title);
std::string emit_python(const Trace& minimal, const std::string& title);

// Writes repro.c, repro.py, trace/ and README.md into dir (created). `replay_line`: the outcome
// of the final replay on a real NCCL library, or "" when it was not run.
void write_reproducer(const Result& r, const std::string& source_dir, const std::string& dir,
                      const std::string& replay_line);

}  // namespace lockstep::shrink
