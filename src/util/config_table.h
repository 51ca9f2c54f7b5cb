// One table of named config fields per subsystem (llama.cpp's flag table, TRL's config
// dataclass): name, help, a pointer to the member. The table serves parsing from JSON/TOML
// objects, `key=value` overrides from the command line, printing the resolved config, and
// error messages that name the key. Unknown keys are errors with the nearest known name.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace brl {

// "a or b"; "one of a, b, c": what a value must be, for error messages.
std::string name_list(const std::vector<std::string>& names);

// An enum's values and their names in config files (TRL's and PEFT's spellings), in the
// enum's order: names[static_cast<size_t>(value)].
template <class E>
struct EnumNames {
  std::vector<std::string> names;
  const std::string& operator()(E e) const { return names.at(static_cast<size_t>(e)); }
  // The value named `name`; nullopt for a name not in the list.
  std::optional<E> parse(const std::string& name) const {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return static_cast<E>(i);
    return std::nullopt;
  }
  // The value named `name`, which must be one (code and tests that spell a known name).
  E value(const std::string& name) const {
    if (auto e = parse(name)) return *e;
    throw std::invalid_argument("'" + name + "' is not " + name_list(names));
  }
};

class ConfigTable {
 public:
  // An enum field: read and written as one of its names.
  struct EnumRef {
    void* ptr;  // the enum member
    int (*get)(const void*);
    void (*set)(void*, int);
    std::vector<std::string> names;
  };
  using Ptr = std::variant<int*, int64_t*, double*, bool*, std::string*, std::optional<double>*, std::optional<int>*,
                           std::vector<double>*, std::vector<std::string>*, nlohmann::json*, EnumRef>;
  struct Field {
    std::string name, help;
    Ptr ptr;
  };

  explicit ConfigTable(std::string section) : section_(std::move(section)) {}
  ConfigTable& add(std::string name, Ptr ptr, std::string help) {
    fields_.push_back({std::move(name), std::move(help), ptr});
    return *this;
  }
  template <class E>
  ConfigTable& add(std::string name, E* ptr, const EnumNames<E>& names, std::string help) {
    static_assert(std::is_enum_v<E>);
    auto get = [](const void* p) { return static_cast<int>(*static_cast<const E*>(p)); };
    auto set = [](void* p, int v) { *static_cast<E*>(p) = static_cast<E>(v); };
    return add(std::move(name), EnumRef{ptr, get, set, names.names}, std::move(help));
  }

  // A key of another tool's config (TRL's) that this table lacks on purpose: set_from_json
  // refuses it with `why` instead of a "did you mean". A name ending in '*' is a prefix.
  ConfigTable& foreign(std::string name, std::string why) {
    foreign_.emplace_back(std::move(name), std::move(why));
    return *this;
  }
  // Why `key` is refused (foreign), or empty.
  std::string foreign_reason(const std::string& key) const;

  // Sets every key of obj; throws UserError naming `source`, the section and the key.
  void set_from_json(const nlohmann::json& obj, const std::string& source);
  // "key=value" (value parsed as JSON when it parses, else as a string). A nlohmann::json
  // field holds a table (a JSON object; TRL's dict knobs such as chat_template_kwargs): set
  // from an object, or from a string holding one as TRL's command line takes it.
  void set_from_override(const std::string& kv);
  bool has(const std::string& name) const;
  nlohmann::json to_json() const;
  // What a field's value must be, in words: "integer", "list of strings", "grpo | bnpo | ...".
  static std::string kind(const Field& f);
  const std::vector<Field>& fields() const { return fields_; }
  const std::string& section() const { return section_; }

 private:
  void set_one(const Field& f, const nlohmann::json& v, const std::string& source);
  std::string section_;
  std::vector<Field> fields_;
  std::vector<std::pair<std::string, std::string>> foreign_;
};

// The known name closest to `name` (one it abbreviates, else by edit distance), for "did you
// mean" hints.
std::string nearest_name(const std::string& name, const std::vector<std::string>& known);

}  // namespace brl
