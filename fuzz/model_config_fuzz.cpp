// Fuzzes a model's config.json (ModelConfig::from_json): what every worker reads from the base
// model a run names. Invariants: a bad file is a UserError (never another exception, a crash or
// undefined behaviour); an accepted config writes config.json that reads back to the same JSON.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  brl::model::ModelConfig c;
  try {
    c = brl::model::ModelConfig::from_json(j, "config.json");
  } catch (const brl::UserError&) {
    return 0;
  }
  const nlohmann::json out = c.to_json();
  try {
    if (brl::model::ModelConfig::from_json(out, "written config.json").to_json() != out) __builtin_trap();
  } catch (const brl::UserError&) {
    __builtin_trap();  // what we write must read back
  }
  return 0;
}
