// The one translation unit that includes CLI11 (command_line.h says why).
#include "command_line.h"

#include <CLI/CLI.hpp>

namespace lockstep {

Option* Option::required() {
  option_->required();
  return this;
}

Option* Option::positive() {
  option_->check(CLI::PositiveNumber);
  return this;
}

Option* Option::non_negative() {
  option_->check(CLI::NonNegativeNumber);
  return this;
}

Option* Option::range_integer(std::int64_t lo, std::int64_t hi) {
  option_->check(CLI::Range(lo, hi));
  return this;
}

Option* Option::range_real(double lo, double hi) {
  option_->check(CLI::Range(lo, hi));
  return this;
}

Option* Option::one_of(const std::vector<std::string>& values) {
  option_->check(CLI::IsMember(values));
  return this;
}

Option* Option::check(std::function<std::string(const std::string&)> error_of) {
  option_->check(std::move(error_of));
  return this;
}

Option* Option::delimiter(char c) {
  option_->delimiter(c);
  return this;
}

Option* Option::expected(int min, int max) {
  option_->expected(min, max);
  return this;
}

Option* Option::one_value_per_occurrence() {
  option_->allow_extra_args(false);
  return this;
}

Option* Option::excludes(Option* other) {
  option_->excludes(other->option_);
  return this;
}

Option* Option::hidden() {
  option_->group("");
  return this;
}

Command::Command(const std::string& description, const std::string& name)
    : owned_(std::make_unique<CLI::App>(description, name)), app_(owned_.get()) {}

Command::Command(CLI::App* app) : app_(app) {}

Command::~Command() = default;

Command* Command::add_subcommand(const std::string& name, const std::string& description) {
  subcommands_.push_back(std::unique_ptr<Command>(new Command(app_->add_subcommand(name, description))));
  return subcommands_.back().get();
}

Option* Command::keep(CLI::Option* option) {
  options_.push_back(std::unique_ptr<Option>(new Option(option)));
  return options_.back().get();
}

Option* Command::add_option(const std::string& names, std::string& into, const std::string& help) {
  return keep(app_->add_option(names, into, help));
}

Option* Command::add_option(const std::string& names, int& into, const std::string& help) {
  return keep(app_->add_option(names, into, help));
}

Option* Command::add_option(const std::string& names, std::int64_t& into, const std::string& help) {
  return keep(app_->add_option(names, into, help));
}

Option* Command::add_option(const std::string& names, std::uint64_t& into, const std::string& help) {
  return keep(app_->add_option(names, into, help));
}

Option* Command::add_option(const std::string& names, double& into, const std::string& help) {
  return keep(app_->add_option(names, into, help));
}

Option* Command::add_option(const std::string& names, std::vector<std::string>& into, const std::string& help) {
  return keep(app_->add_option(names, into, help));
}

Option* Command::add_option(const std::string& names, std::vector<int>& into, const std::string& help) {
  return keep(app_->add_option(names, into, help));
}

Option* Command::add_flag(const std::string& names, bool& into, const std::string& help) {
  return keep(app_->add_flag(names, into, help));
}

void Command::version_flag(const std::string& names, const std::string& version) {
  app_->set_version_flag(names, version);
}

void Command::footer(const std::string& text) { app_->footer(text); }

void Command::callback(std::function<void()> run) { app_->callback(std::move(run)); }

std::optional<int> Command::parse(int argc, const char* const* argv, int usage_exit_code) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app_->exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app_->exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app_->exit(e);
  } catch (const CLI::ParseError& e) {
    app_->exit(e);
    return usage_exit_code;
  }
  return std::nullopt;
}

bool Command::subcommand_chosen() const { return !app_->get_subcommands().empty(); }

std::string Command::help() const { return app_->help(); }

}  // namespace lockstep
