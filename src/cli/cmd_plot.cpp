// `bucketrl plot`: SVG charts of a run, from its bucket alone (a finished run, or one in
// progress): train reward over time and per global version (mean and spread across the
// folded updates, held-out accuracy where the evaluator ran), global versions over time.
#include <cstdint>
#include <cstdio>

#include "cli/command.h"
#include "obs/plot.h"
#include "protocol/bucket.h"

using namespace brl;

namespace {

cli::RunFn setup_plot(CLI::App& app) {
  static std::string bucket, out;
  app.add_option("--bucket", bucket, "s3://bucket/prefix or a directory")->required();
  app.add_option("--out", out, "folder for the .svg files")->required();
  return [] {
    auto store = protocol::open_bucket(bucket);
    auto run = protocol::read_run(*store).value();
    obs::RunHistory h;
    h.max_versions = SIZE_MAX;  // every version of the run
    obs::load_history(*store, h, protocol::newest_version(*store).value()).throw_if_error();
    obs::load_evals(*store, h).throw_if_error();
    for (auto& path : obs::write_run_plots(h, run.run_id, out)) std::printf("%s\n", path.c_str());
    return 0;
  };
}
cli::Register plot_reg("plot",
                       "SVG charts of a run from its bucket: reward over time and per version, versions over time",
                       setup_plot);

}  // namespace
