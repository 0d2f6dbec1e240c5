// Placeholder until the replay engineer's cmd_replay.cpp lands.
#include <iostream>

#include "commands.h"
#include "exit_codes.h"

namespace lockstep::cli {

void add_replay_command(CLI::App& app, int* exit_code) {
  auto* sub = app.add_subcommand("replay", "Re-run a recorded schedule (not built yet)");
  sub->allow_extras();
  sub->callback([exit_code] {
    std::cerr << "replay: not built\n";
    *exit_code = kExitUsage;
  });
}

}  // namespace lockstep::cli
