// Reading a member of a JSON object that the cluster or a file sent, where
// a missing member or one of the wrong type is the same as none: the one
// set of accessors for nlohmann::json and nlohmann::ordered_json alike
// (templates, so core itself needs no JSON library).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gracekeeper::core {

// The member `key` of `object`; nullptr when `object` is not an object or
// has no such member.
template <class Json>
const Json* member(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// The string member `key`; "" when absent or not a string.
template <class Json>
std::string string_member(const Json& object, const char* key) {
  const Json* v = member(object, key);
  return v != nullptr && v->is_string() ? v->template get<std::string>() : std::string();
}

// The integer member `key`; `absent` when absent or not an integer.
template <class Json>
std::int64_t int_member(const Json& object, const char* key, std::int64_t absent = 0) {
  const Json* v = member(object, key);
  return v != nullptr && v->is_number_integer() ? v->template get<std::int64_t>() : absent;
}

// The boolean member `key`; nullopt when absent or not a boolean.
template <class Json>
std::optional<bool> bool_member(const Json& object, const char* key) {
  const Json* v = member(object, key);
  return v != nullptr && v->is_boolean() ? std::optional<bool>(v->template get<bool>())
                                         : std::nullopt;
}

}  // namespace gracekeeper::core
