// Argument parsing for an executable that uses CLI11 directly (lockstep-replay-worker): --help,
// --help-all and --version printed and answered with 0, a usage error printed and answered with the
// executable's own usage code. lockstep and lockstep-launch use command_line.h, which compiles
// CLI11 once (Command::parse answers the same way).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>

namespace lockstep {

// nullopt: parsed, carry on; else the exit code to return from main.
inline std::optional<int> parse_args(CLI::App& app, int argc, char** argv, int usage_exit_code) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return usage_exit_code;
  }
  return std::nullopt;
}

}  // namespace lockstep
