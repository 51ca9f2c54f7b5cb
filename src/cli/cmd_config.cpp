// `bucketrl config`: every run.toml key with its value and meaning, as TOML to start a run.toml
// from (the defaults, or a config file with --set overrides applied), or as the Markdown
// reference in docs/configuration.md (generated from the config tables, so it cannot drift).
#include <cstdio>

#include "cli/command.h"
#include "config/run_config.h"

using namespace brl;

namespace {

cli::RunFn setup_config(CLI::App& app) {
  static std::string config;
  static std::vector<std::string> sets;
  static bool markdown = false;
  app.add_option("--config", config, "run.toml or run.json to resolve (default: the defaults)");
  app.add_option("--set", sets, "override a key: section.key=value (repeatable)");
  app.add_flag("--markdown", markdown, "the configuration reference as Markdown (docs/configuration.md)");
  return [] {
    RunConfig cfg = config.empty() ? RunConfig() : RunConfig::from_file(config);
    cfg.apply_overrides(sets);
    cfg.validate();
    std::fputs((markdown ? cfg.reference_markdown() : cfg.to_toml()).c_str(), stdout);
    return 0;
  };
}
cli::Register config_reg("config", "print every run.toml key with its value and meaning (TOML or --markdown)",
                         setup_config);

}  // namespace
