// Where the first divergence sits in the user's terms: a training step repeats the same
// collectives, so the period of a communicator's signature sequence is its step, and collective
// #k is "step s, collective j of P in the step". The period is found in a reference member's
// collectives (the largest group that issued the op) from the checkpoint interval that holds
// the divergence to a few intervals after it: the same window whether the trace was read whole
// or summary-first (trace_loader.h), so both say the same. Steps are counted from collective #1
// (a warm-up of another length shifts them). docs/scaling.md.
#pragma once

#include <cstdint>
#include <string>

#include "analysis.h"

namespace lockstep {

struct StepPlace {
  bool found = false;
  int gcomm = -1;
  int64_t ordinal = 0;     // collective ordinal on gcomm
  int64_t seq = 0;         // the reference member's seq of that collective
  int64_t period = 0;      // collectives per step
  int64_t step = 0;        // 1-based, counted from collective #1
  int64_t in_step = 0;     // 1-based position in the step
  int ref_proc = -1;       // whose collectives showed the period
  int64_t window_first = 0, window_last = 0;  // the collectives the period was found in
};

StepPlace locate_in_steps(const Analysis& a);
// "where: ..." (no newline), empty when no period was found.
std::string steps_text(const Analysis& a, const StepPlace& p);
// report_json with a "steps" object added (found false when no period; "text": the where line).
// indent: nlohmann's dump indent (-1: compact, as the HTML report's data).
std::string add_steps_json(std::string report_json, const Analysis& a, const StepPlace& p, int indent = 2);

}  // namespace lockstep
