// Integers from JSON that another machine wrote (bucket records, update headers, tokenizer
// files). nlohmann's get<int64_t>() converts a JSON float with a plain C++ cast, which is
// undefined behaviour when the value is out of range ({"version": 1e300}; found by
// fuzz/records_fuzz), and silently truncates 2.5 or wraps 2^63 as well. json_int accepts only
// a JSON integer that fits T and otherwise throws nlohmann's type_error, which the parsers
// already turn into "field missing or of the wrong type".
#pragma once

#include <nlohmann/json.hpp>

#include <limits>
#include <string>
#include <type_traits>

namespace brl {

// Whether v is a JSON integer that fits T (never a float, bool or string).
template <class T>
bool json_int_fits(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  using L = std::numeric_limits<T>;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(L::max());
  if (!v.is_number_integer()) return false;
  const int64_t x = v.get<int64_t>();  // signed storage: may be negative
  if constexpr (std::is_signed_v<T>) return x >= static_cast<int64_t>(L::min()) && x <= static_cast<int64_t>(L::max());
  else return x >= 0 && static_cast<uint64_t>(x) <= static_cast<uint64_t>(L::max());
}

template <class T>
T json_int(const nlohmann::json& v) {
  using L = std::numeric_limits<T>;
  if (!json_int_fits<T>(v))
    throw nlohmann::json::type_error::create(
        302,
        "expected an integer in [" + std::to_string(L::min()) + ", " + std::to_string(L::max()) + "], got " + v.dump(),
        &v);
  return v.get<T>();
}

// obj[key] as json_int<T>, or `fallback` when the key is absent (nlohmann's value()).
template <class T>
T json_int(const nlohmann::json& obj, const char* key, T fallback) {
  if (!obj.is_object()) throw nlohmann::json::type_error::create(306, "cannot read a field of a non-object", &obj);
  auto it = obj.find(key);
  return it == obj.end() ? fallback : json_int<T>(*it);
}

}  // namespace brl
