#include "util/config_table.h"

#include <algorithm>

#include "util/error.h"
#include "util/json_int.h"

namespace brl {

std::string nearest_name(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& k : known) {
    std::vector<size_t> prev(k.size() + 1), cur(k.size() + 1);
    for (size_t j = 0; j <= k.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= name.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= k.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (name[i - 1] != k[j - 1])});
      std::swap(prev, cur);
    }
    // A name the value abbreviates ("seq" for sequence) beats any edit distance.
    const size_t d = !name.empty() && k.starts_with(name) ? 0 : prev[k.size()];
    if (d < best_d) best_d = d, best = k;
  }
  return best;
}

std::string name_list(const std::vector<std::string>& names) {
  if (names.size() == 2) return names[0] + " or " + names[1];
  std::string s = "one of ";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

namespace {
// The path of the first null inside v ("name.key[2]"), or "".
std::string null_path(const nlohmann::json& v, const std::string& path) {
  if (v.is_null()) return path;
  if (v.is_object())
    for (auto& item : v.items())
      if (auto p = null_path(item.value(), path + "." + item.key()); !p.empty()) return p;
  if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i)
      if (auto p = null_path(v[i], path + "[" + std::to_string(i) + "]"); !p.empty()) return p;
  return "";
}
}  // namespace

void ConfigTable::set_one(const Field& f, const nlohmann::json& v, const std::string& source) {
  auto bad = [&](const char* want) {
    throw UserError(source + ": [" + section_ + "] " + f.name + " = " + v.dump() + " is not " + want,
                    f.name + ": " + f.help);
  };
  if (auto* e = std::get_if<EnumRef>(&f.ptr)) {
    auto it = v.is_string() ? std::find(e->names.begin(), e->names.end(), v.get<std::string>()) : e->names.end();
    if (it == e->names.end())
      throw UserError(source + ": [" + section_ + "] " + f.name + " = " + v.dump() + ": must be " + name_list(e->names),
                      "did you mean \"" + nearest_name(v.is_string() ? v.get<std::string>() : v.dump(), e->names) +
                          "\"? (" + f.name + ": " + f.help + ")");
    e->set(e->ptr, static_cast<int>(it - e->names.begin()));
    return;
  }
  std::visit(
      [&](auto p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<decltype(p), EnumRef>) {
          // handled above
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) bad("a boolean (true/false)");
          *p = v.get<bool>();
        } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) {
          if (!json_int_fits<T>(v))
            bad(std::is_same_v<T, int> ? "an integer in [-2^31, 2^31)" : "an integer in [-2^63, 2^63)");
          *p = v.get<T>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) bad("a number");
          *p = v.get<double>();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) bad("a string");
          *p = v.get<std::string>();
        } else if constexpr (std::is_same_v<T, std::optional<double>>) {
          if (v.is_null()) *p = std::nullopt;
          else if (v.is_number()) *p = v.get<double>();
          else bad("a number or null");
        } else if constexpr (std::is_same_v<T, std::optional<int>>) {
          // TRL's spellings of None for such knobs ("auto": the tool decides, as unset does here).
          if (v.is_null() || v == "auto" || v == "none" || v == "null") *p = std::nullopt;
          else if (json_int_fits<int>(v)) *p = v.get<int>();
          else bad("an integer in [-2^31, 2^31), \"auto\" or null");
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          if (!v.is_array()) bad("a list of numbers");
          p->clear();
          for (auto& e : v) {
            if (!e.is_number()) bad("a list of numbers");
            p->push_back(e.get<double>());
          }
        } else if constexpr (std::is_same_v<T, nlohmann::json>) {
          nlohmann::json obj = v.is_string() ? nlohmann::json::parse(v.get<std::string>(), nullptr, false) : v;
          if (!obj.is_object()) bad("a table, e.g. {enable_thinking = false}");
          // TOML, where configs are printed, has no null: an absent key says it.
          if (const std::string at = null_path(obj, f.name); !at.empty())
            throw UserError(source + ": [" + section_ + "] " + at + " is null", "leave the key out instead");
          *p = std::move(obj);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          if (v.is_string()) {  // "q_proj,v_proj" or "all-linear"
            p->clear();
            std::string s = v.get<std::string>(), cur;
            for (char c : s + ",") {
              if (c == ',') {
                if (!cur.empty()) p->push_back(cur);
                cur.clear();
              } else if (c != ' ') {
                cur += c;
              }
            }
            return;
          }
          if (!v.is_array()) bad("a list of strings");
          p->clear();
          for (auto& e : v) {
            if (!e.is_string()) bad("a list of strings");
            p->push_back(e.get<std::string>());
          }
        }
      },
      f.ptr);
}

void ConfigTable::set_from_json(const nlohmann::json& obj, const std::string& source) {
  if (!obj.is_object()) throw UserError(source + ": [" + section_ + "] must be a table of key = value");
  std::vector<std::string> names;
  for (auto& f : fields_) names.push_back(f.name);
  for (auto& item : obj.items()) {
    // Not a structured binding: clang 14 (the sanitizer build) cannot capture one in a lambda.
    const std::string& k = item.key();
    const nlohmann::json& v = item.value();
    auto it = std::find_if(fields_.begin(), fields_.end(), [&](auto& f) { return f.name == k; });
    if (it == fields_.end()) {
      if (std::string why = foreign_reason(k); !why.empty())
        throw UserError(source + ": [" + section_ + "] " + k + " is not a bucketrl setting: " + why, "remove it");
      throw UserError(source + ": unknown key '" + k + "' in [" + section_ + "]",
                      "did you mean '" + nearest_name(k, names) + "'?");
    }
    set_one(*it, v, source);
  }
}

void ConfigTable::set_from_override(const std::string& kv) {
  auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UserError("override '" + kv + "' is not key=value", "e.g. --set learning_rate=1e-5");
  std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
  nlohmann::json v = nlohmann::json::parse(val, nullptr, false);
  if (v.is_discarded()) v = val;
  set_from_json(nlohmann::json{{key, v}}, "command line");
}

std::string ConfigTable::foreign_reason(const std::string& key) const {
  for (const auto& [name, why] : foreign_)
    if (name == key || (name.ends_with('*') && key.starts_with(name.substr(0, name.size() - 1)))) return why;
  return {};
}

bool ConfigTable::has(const std::string& name) const {
  return std::any_of(fields_.begin(), fields_.end(), [&](auto& f) { return f.name == name; });
}

std::string ConfigTable::kind(const Field& f) {
  return std::visit(
      [](auto p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<decltype(p), EnumRef>) {
          std::string s;
          for (auto& n : p.names) s += (s.empty() ? "" : " | ") + n;
          return s;
        } else if constexpr (std::is_same_v<T, bool>) return "boolean";
        else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) return "integer";
        else if constexpr (std::is_same_v<T, double>) return "number";
        else if constexpr (std::is_same_v<T, std::string>) return "string";
        else if constexpr (std::is_same_v<T, std::optional<double>>) return "number (optional)";
        else if constexpr (std::is_same_v<T, std::optional<int>>) return "integer (optional)";
        else if constexpr (std::is_same_v<T, std::vector<double>>) return "list of numbers";
        else if constexpr (std::is_same_v<T, nlohmann::json>) return "table";
        else {
          static_assert(std::is_same_v<T, std::vector<std::string>>, "a new field type needs its kind");
          return "list of strings";
        }
      },
      f.ptr);
}

nlohmann::json ConfigTable::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (auto& f : fields_)
    std::visit(
        [&](auto p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<decltype(p), EnumRef>) j[f.name] = p.names.at(static_cast<size_t>(p.get(p.ptr)));
          else if constexpr (std::is_same_v<T, std::optional<double>> || std::is_same_v<T, std::optional<int>>)
            j[f.name] = p->has_value() ? nlohmann::json(**p) : nlohmann::json(nullptr);
          else j[f.name] = *p;
        },
        f.ptr);
  return j;
}

}  // namespace brl
