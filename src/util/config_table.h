// One table of named config fields per subsystem (llama.cpp's flag table, TRL's config
// dataclass): name, help, a pointer to the member. The table serves parsing from JSON/TOML
// objects, `key=value` overrides from the command line, printing the resolved config, and
// error messages that name the key. Unknown keys are errors with the nearest known name.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace brl {

class ConfigTable {
 public:
  using Ptr = std::variant<int*, int64_t*, double*, bool*, std::string*, std::optional<double>*,
                           std::optional<int>*, std::vector<double>*, std::vector<std::string>*>;
  struct Field {
    std::string name, help;
    Ptr ptr;
  };

  explicit ConfigTable(std::string section) : section_(std::move(section)) {}
  ConfigTable& add(std::string name, Ptr ptr, std::string help) {
    fields_.push_back({std::move(name), std::move(help), ptr});
    return *this;
  }

  // Sets every key of obj; throws UserError naming `source`, the section and the key.
  void set_from_json(const nlohmann::json& obj, const std::string& source);
  // "key=value" (value parsed as JSON when it parses, else as a string).
  void set_from_override(const std::string& kv);
  bool has(const std::string& name) const;
  nlohmann::json to_json() const;
  const std::vector<Field>& fields() const { return fields_; }
  const std::string& section() const { return section_; }

 private:
  void set_one(const Field& f, const nlohmann::json& v, const std::string& source);
  std::string section_;
  std::vector<Field> fields_;
};

// The known name closest to `name` (edit distance), for "did you mean" hints.
std::string nearest_name(const std::string& name, const std::vector<std::string>& known);

}  // namespace brl
