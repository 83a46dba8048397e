// Helpers shared by the manifest tests.
#pragma once

#include <cmath>
#include <string>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest::testing {

// nlohmann's operator== treats 1 and 1.0 as equal and NaN as unequal to
// itself; a round trip must keep types exactly, and NaN is a value like any other.
// Signed and unsigned integers are one kind here (Json::parse makes positive
// numbers unsigned, the reader makes int64).
inline bool same(const Json& a, const Json& b) {
  if (a.is_number_integer() && b.is_number_integer()) return a == b;
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Json::value_t::object: {
      if (a.size() != b.size()) return false;
      auto ia = a.begin();
      auto ib = b.begin();
      for (; ia != a.end(); ++ia, ++ib) {
        if (ia.key() != ib.key() || !same(*ia, *ib)) return false;
      }
      return true;
    }
    case Json::value_t::array: {
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (!same(a[i], b[i])) return false;
      }
      return true;
    }
    case Json::value_t::number_float: {
      double x = a.get<double>();
      double y = b.get<double>();
      if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
      return x == y && std::signbit(x) == std::signbit(y);
    }
    default:
      return a == b;
  }
}

// The value of the only document in `text`, or a failed expectation's message.
inline std::expected<Json, std::string> read_one(std::string text, const Limits& limits = {}) {
  auto docs = read_text(std::move(text), "test.yaml", limits);
  if (!docs) return std::unexpected(docs.error().format());
  if (docs->size() != 1) {
    return std::unexpected("expected one document, got " + std::to_string(docs->size()));
  }
  return std::move(docs->front().value);
}

// Wraps a value as the `v` field of an object, since documents must be objects.
inline std::expected<Json, std::string> read_value(const std::string& yaml_value) {
  auto doc = read_one("v: " + yaml_value + "\n");
  if (!doc) return doc;
  return (*doc)["v"];
}

}  // namespace gracekeeper::manifest::testing
