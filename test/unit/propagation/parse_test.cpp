// parse_query_response on answers as Prometheus 2.42 writes them for
// /api/v1/query (bodies captured from a real server, see
// test/integration/prometheus), and on answers it never writes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gracekeeper/propagation/propagation.h"

namespace gracekeeper::propagation {
namespace {

using ::testing::HasSubstr;

std::string reason_of(std::string_view body) {
  auto r = parse_query_response(body);
  return r ? "value " + std::to_string(*r) : r.error().reason;
}

TEST(ParseQueryResponse, Scalar) {
  // query=scalar(vector(2.5))
  auto r = parse_query_response(
      R"({"status":"success","data":{"resultType":"scalar","result":[1796058839.609,"2.5"]}})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(*r, 2.5);
}

TEST(ParseQueryResponse, VectorOfOne) {
  // histogram_quantile(0.99, sum by (le) (rate(..._bucket[1m])))
  auto r = parse_query_response(
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},)"
      R"("value":[1796058837.338,"0.9999999999999998"]}]}})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(*r, 0.9999999999999998);

  // With labels, exponent notation and a warnings list.
  r = parse_query_response(
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":)"
      R"({"job":"kube-proxy"},"value":[1717000000,"1.5e-05"]}]},"warnings":["w"]})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(*r, 1.5e-05);

  EXPECT_EQ(*parse_query_response(
                R"({"status":"success","data":{"resultType":"scalar","result":[1,"0"]}})"),
            0.0);
}

TEST(ParseQueryResponse, EmptyVector) {
  auto r =
      parse_query_response(R"({"status":"success","data":{"resultType":"vector","result":[]}})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "EmptyResult");
}

TEST(ParseQueryResponse, SeveralSeries) {
  // query=kubeproxy_network_programming_duration_seconds_bucket{le=~"0.25|0.5"}
  auto r = parse_query_response(
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":)"
      R"("kubeproxy_network_programming_duration_seconds_bucket","instance":"127.0.0.1:40051",)"
      R"("job":"kube-proxy","le":"0.25"},"value":[1796058839.762,"4275"]},{"metric":{"__name__":)"
      R"("kubeproxy_network_programming_duration_seconds_bucket","instance":"127.0.0.1:40051",)"
      R"("job":"kube-proxy","le":"0.5"},"value":[1796058839.762,"8550"]}]}})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "NotScalar");
  EXPECT_THAT(r.error().message, HasSubstr("2 series"));
}

TEST(ParseQueryResponse, NaNAndInfinities) {
  // query=vector(0)/0 and vector(1)/0 give these.
  auto value = [](std::string v) {
    return R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},)"
           R"("value":[1796058839.811,")" +
           v + R"("]}]}})";
  };
  auto nan = parse_query_response(value("NaN"));
  ASSERT_FALSE(nan);
  EXPECT_EQ(nan.error().reason, "NotANumber");
  EXPECT_THAT(nan.error().message, HasSubstr("NaN"));
  auto inf = parse_query_response(value("+Inf"));
  ASSERT_FALSE(inf);
  EXPECT_EQ(inf.error().reason, "NotANumber");
  EXPECT_THAT(inf.error().message, HasSubstr("+Inf"));
  EXPECT_EQ(reason_of(value("-Inf")), "NotANumber");
  // from_chars would read these; they are not what Prometheus writes for a
  // number, but are still not finite.
  EXPECT_EQ(reason_of(value("inf")), "NotANumber");
  EXPECT_EQ(reason_of(value("nan")), "NotANumber");
}

TEST(ParseQueryResponse, NotANumberString) {
  auto r = parse_query_response(
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"abc"]}]}})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "BadResponse");
  EXPECT_THAT(r.error().message, HasSubstr("\"abc\" is not a number"));
  EXPECT_EQ(reason_of(R"({"status":"success","data":{"resultType":"scalar","result":[1,"3.5s"]}})"),
            "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"success","data":{"resultType":"scalar","result":[1,""]}})"),
            "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"success","data":{"resultType":"scalar","result":[1,true]}})"),
            "BadResponse");
}

TEST(ParseQueryResponse, Negative) {
  // query=vector(-1)
  auto r = parse_query_response(
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},)"
      R"("value":[1796058839.909,"-1"]}]}})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "Negative");
}

TEST(ParseQueryResponse, StatusError) {
  // HTTP 400 for query=histogram_quantile(0.99, sum by (le) (rate(x[1m]))
  auto r = parse_query_response(
      R"({"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": )"
      R"(1:51: parse error: unclosed left parenthesis"})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "QueryFailed");
  EXPECT_EQ(r.error().message,
            "bad_data: invalid parameter \"query\": 1:51: parse error: unclosed left parenthesis");
  // HTTP 422 for query=label_replace(up, "a", "b", "c", "(")
  r = parse_query_response(
      R"({"status":"error","errorType":"execution","error":"invalid regular expression in )"
      R"(label_replace(): ("})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "QueryFailed");
  EXPECT_THAT(r.error().message, HasSubstr("execution: invalid regular expression"));
}

TEST(ParseQueryResponse, MatrixAndString) {
  // query=up[3s]
  auto m = parse_query_response(
      R"({"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"up",)"
      R"("instance":"127.0.0.1:40051","job":"kube-proxy"},"values":[[1796058837.676,"1"],)"
      R"([1796058838.676,"1"]]}]}})");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().reason, "NotScalar");
  EXPECT_THAT(m.error().message, HasSubstr("matrix"));
  // query="abc"
  EXPECT_EQ(
      reason_of(
          R"({"status":"success","data":{"resultType":"string","result":[1796058839.713,"abc"]}})"),
      "NotScalar");
}

TEST(ParseQueryResponse, NativeHistogramIsNotScalar) {
  EXPECT_EQ(reason_of(R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},)"
                      R"("histogram":[1,{"count":"2","sum":"3"}]}]}})"),
            "NotScalar");
}

TEST(ParseQueryResponse, NotAPrometheusAnswer) {
  EXPECT_EQ(reason_of(""), "BadResponse");
  EXPECT_EQ(reason_of("<html><body>502 Bad Gateway</body></html>"), "BadResponse");
  EXPECT_EQ(reason_of("[1,2]"), "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"weird"})"), "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"success"})"), "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"success","data":[]})"), "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"success","data":{"resultType":"vector"}})"), "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"success","data":{"resultType":"vector","result":{}}})"),
            "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"success","data":{"resultType":"vector","result":[3]}})"),
            "BadResponse");
  EXPECT_EQ(
      reason_of(R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}})"),
      "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"success","data":{"resultType":"scalar","result":[1]}})"),
            "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"success","data":{"resultType":"scalar","result":"2"}})"),
            "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"success","data":{"resultType":"tensor","result":[]}})"),
            "BadResponse");
  EXPECT_EQ(reason_of(R"({"status":"error"})"), "QueryFailed");
  EXPECT_EQ(reason_of(std::string(1 << 20, '{')), "BadResponse");  // deep nesting: no crash
}

}  // namespace
}  // namespace gracekeeper::propagation
