// Fuzzes the TOML run config (RunConfig::from_toml_string): the file a user writes, and the
// config every worker reads back from run.json. Invariants: a bad file is a UserError (never
// another exception or a crash); an accepted config resolves to JSON that, applied to a fresh
// config (what a worker does with run.json), validates and resolves to the same JSON.
#include <cstdint>
#include <string>

#include "config/run_config.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  brl::RunConfig c;
  try {
    c = brl::RunConfig::from_toml_string(text, "run.toml");
    c.validate();  // as `bucketrl init` does before it writes run.json
  } catch (const brl::UserError&) {
    return 0;
  }
  const nlohmann::json j = c.to_json();
  brl::RunConfig d;
  try {
    d.apply_json(j, "run.json");
    d.validate();
  } catch (const brl::UserError&) {
    __builtin_trap();  // an accepted config must survive its own run.json
  }
  if (d.to_json() != j) __builtin_trap();
  return 0;
}
