// Subcommand registry: each src/cli/cmd_<name>.cpp registers itself with
//   static brl::cli::Register reg("name", "help", setup_fn);
// where setup_fn adds options to the CLI11 subcommand and returns the function to run.
// The files are compiled into the executable itself, so static registration is kept.
#pragma once

#include <CLI/CLI.hpp>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "util/config_table.h"

namespace brl::cli {

using RunFn = std::function<int()>;
using SetupFn = std::function<RunFn(CLI::App&)>;

struct CommandSpec {
  std::string name, help;
  SetupFn setup;
};

std::vector<CommandSpec>& registry();

struct Register {
  Register(std::string name, std::string help, SetupFn setup) {
    registry().push_back({std::move(name), std::move(help), std::move(setup)});
  }
};

// An option whose value is one of an enum's config names (TRL's spellings), e.g.
// --habit negate|plus_one; any other value is refused naming the allowed ones.
template <class E>
CLI::Option* add_enum_option(CLI::App& app, const std::string& flag, E* ptr, const EnumNames<E>& names,
                             const std::string& help) {
  auto set = [ptr, &names, flag](const std::string& v) {
    auto e = names.parse(v);
    if (!e) throw CLI::ValidationError(flag, "'" + v + "' is not " + name_list(names.names));
    *ptr = *e;
  };
  return app.add_option_function<std::string>(flag, set, help)->default_str(names(*ptr));
}

// Sets libtorch's intra-op threads to the core count (it starts with 1) and warns when the
// BLAS in use is the slow reference one. Call from commands that do tensor work.
void init_compute(int threads = 0);

// On SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT: the signal and a backtrace on stderr (the
// process's log), then the default action. Installed by main for every command.
void install_crash_report();

// Installs SIGINT/SIGTERM handlers that set the returned flag (long-running commands stop
// cleanly on Ctrl-C); a second Ctrl-C exits at once.
const std::atomic<bool>& stop_on_signals();

}  // namespace brl::cli
