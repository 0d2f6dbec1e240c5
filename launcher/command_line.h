// The command-line parser of lockstep's executables (lockstep, lockstep-launch,
// lockstep-replay-worker): a small interface over CLI11, which only command_line.cpp includes.
// CLI11 2.1 is header-only and every translation unit that includes it spends 10-13 CPU-s
// generating its code; with one command per file in cli/, that was most of the tool's build time
// (docs/testing.md).
//
// The calls mirror CLI11's (add_subcommand, add_option, add_flag, required, footer, callback), so a
// command registers as it would with CLI11; checks are named methods instead of CLI11 validators.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace lockstep {

// One option, positional or flag of a command. The setters return this, for chaining.
class Option {
 public:
  Option* required();
  Option* positive();      // a number > 0
  Option* non_negative();  // a number >= 0
  template <class T>
  Option* range(T lo, T hi) {
    if constexpr (std::is_floating_point_v<T>) return range_real(lo, hi);
    else return range_integer(lo, hi);
  }
  Option* one_of(const std::vector<std::string>& values);
  // error_of returns "" for a valid value, else the message.
  Option* check(std::function<std::string(const std::string&)> error_of);
  Option* delimiter(char c);                 // "1,2,3" is three values
  Option* expected(int min, int max);        // values per occurrence; max -1: any number
  Option* one_value_per_occurrence();        // "--env A=1 -- prog": prog is no second value
  Option* excludes(Option* other);
  Option* hidden();                          // not in --help

 private:
  friend class Command;
  explicit Option(CLI::Option* option) : option_(option) {}
  Option* range_integer(std::int64_t lo, std::int64_t hi);
  Option* range_real(double lo, double hi);
  CLI::Option* option_;
};

// An executable's command line, or one of its subcommands.
class Command {
 public:
  Command(const std::string& description, const std::string& name);
  ~Command();
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  Command* add_subcommand(const std::string& name, const std::string& description);
  // names: "-o,--output" for an option, "dir" for a positional.
  Option* add_option(const std::string& names, std::string& into, const std::string& help);
  Option* add_option(const std::string& names, int& into, const std::string& help);
  Option* add_option(const std::string& names, std::int64_t& into, const std::string& help);
  Option* add_option(const std::string& names, std::uint64_t& into, const std::string& help);
  Option* add_option(const std::string& names, double& into, const std::string& help);
  Option* add_option(const std::string& names, std::vector<std::string>& into, const std::string& help);
  Option* add_option(const std::string& names, std::vector<int>& into, const std::string& help);
  Option* add_flag(const std::string& names, bool& into, const std::string& help);
  void version_flag(const std::string& names, const std::string& version);
  void footer(const std::string& text);
  // Runs after this command's arguments parsed, inside parse().
  void callback(std::function<void()> run);

  // nullopt: parsed (and the chosen command's callback ran), carry on; else the exit code to
  // return from main: 0 after --help, --help-all or --version was printed, usage_exit_code after a
  // usage error was printed. Exceptions of the callbacks propagate.
  std::optional<int> parse(int argc, const char* const* argv, int usage_exit_code);
  bool subcommand_chosen() const;
  std::string help() const;

 private:
  explicit Command(CLI::App* app);
  Option* keep(CLI::Option* option);

  std::unique_ptr<CLI::App> owned_;  // the root's; subcommands belong to their parent's App
  CLI::App* app_;
  std::vector<std::unique_ptr<Command>> subcommands_;
  std::vector<std::unique_ptr<Option>> options_;
};

}  // namespace lockstep
