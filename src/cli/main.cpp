// bucketrl: the command-line entry point. Subcommands live in cmd_*.cpp (see command.h).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include "cli/command.h"
#include "util/error.h"
#include "util/log.h"

namespace brl::cli {
std::vector<CommandSpec>& registry() {
  static std::vector<CommandSpec> r;
  return r;
}
}  // namespace brl::cli

int main(int argc, char** argv) {
  using namespace brl;
  cli::install_crash_report();
  CLI::App app{"bucketrl: asynchronous GRPO + LoRA fine-tuning over an object-storage bucket"};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error (env BRL_LOG_LEVEL)");
  auto& reg = cli::registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::map<CLI::App*, cli::RunFn> runs;
  for (auto& spec : reg) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.help);
    runs[sub] = spec.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    init_logging(log_level);
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
