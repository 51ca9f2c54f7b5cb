#include <cstdio>

#include "cli/command.h"
#include "model/device.h"

namespace {
brl::cli::RunFn setup_version(CLI::App&) {
  return [] {
    std::printf("bucketrl 0.1.0 (bucket protocol 1)\n%s\n", brl::model::describe_compute().c_str());
    return 0;
  };
}
brl::cli::Register reg("version", "print the version, the protocol version and the compute devices", setup_version);
}  // namespace
