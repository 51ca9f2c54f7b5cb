#include <cstdio>

#include "cli/command.h"

namespace {
brl::cli::Register reg("version", "print the version and protocol version", [](CLI::App&) {
  return [] {
    std::printf("bucketrl 0.1.0 (bucket protocol 1)\n");
    return 0;
  };
});
}
