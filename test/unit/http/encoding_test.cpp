// Percent-encoding and query building, table-driven.
#include "gracekeeper/http/encoding.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace gracekeeper::http {
namespace {

struct Case {
  std::string_view in;
  std::string_view out;
};

TEST(PercentEncode, Table) {
  const Case cases[] = {
      {"", ""},
      {"plain", "plain"},
      {"AZaz09-._~", "AZaz09-._~"},  // the unreserved set, as is
      {"a b", "a%20b"},
      {"a+b", "a%2Bb"},  // '+' is not a space in a query: encoded
      {"a/b", "a%2Fb"},  // safe inside one path segment
      {"k=v&x", "k%3Dv%26x"},
      {"app in (web,api)", "app%20in%20%28web%2Capi%29"},
      {"x_bucket{job=\"a b\"}[1m]", "x_bucket%7Bjob%3D%22a%20b%22%7D%5B1m%5D"},
      {"100%", "100%25"},
      {"?#", "%3F%23"},
      {"\xC3\xA9", "%C3%A9"},  // UTF-8 bytes one by one, upper-case hex
      {std::string_view("\0\x7f\xff", 3), "%00%7F%FF"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(percent_encode(c.in), c.out) << "input: " << c.in;
    std::string appended = "prefix/";
    append_percent_encoded(appended, c.in);
    EXPECT_EQ(appended, "prefix/" + std::string{c.out});
  }
}

TEST(PercentEncode, EveryByteOutsideTheUnreservedSetIsEscaped) {
  for (int b = 0; b < 256; ++b) {
    const char ch = static_cast<char>(b);
    const bool unreserved = (b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z') ||
                            (b >= 'a' && b <= 'z') || ch == '-' || ch == '.' || ch == '_' ||
                            ch == '~';
    EXPECT_EQ(percent_encode(std::string_view(&ch, 1)).size(), unreserved ? 1u : 3u) << b;
  }
}

TEST(AddQuery, Table) {
  struct QueryCase {
    std::string target;
    std::string_view key;
    std::string_view value;
    std::string_view want;
  };
  const QueryCase cases[] = {
      {"/api/v1/pods", "labelSelector", "app=web", "/api/v1/pods?labelSelector=app%3Dweb"},
      {"/x?watch=1", "resourceVersion", "42", "/x?watch=1&resourceVersion=42"},
      {"/x", "fieldSelector", "", "/x"},  // empty: not set, nothing appended
      {"/x?a=1", "b", "", "/x?a=1"},
      {"/api/v1/query", "query", "rate(x[1m]) > 0",
       "/api/v1/query?query=rate%28x%5B1m%5D%29%20%3E%200"},
  };
  for (auto c : cases) {
    add_query(c.target, c.key, c.value);
    EXPECT_EQ(c.target, c.want);
  }
}

}  // namespace
}  // namespace gracekeeper::http
