// The operator's own user, from a SelfSubjectReview's answer.
#include "gracekeeper/admission/identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gracekeeper::webhook {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(SelfSubjectUser, ReadsTheUserNameTheAPIServerAnswers) {
  // As kube-apiserver v1.37 answers `kubectl auth whoami` for a ServiceAccount.
  const json review = json::parse(R"({
    "kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
    "metadata": {"creationTimestamp": null},
    "status": {"userInfo": {
      "username": "system:serviceaccount:gracekeeper-system:gracekeeper",
      "uid": "0d6c2b1e-6f3a-4a9e-9a51-3c1f7b7f2f10",
      "groups": ["system:serviceaccounts", "system:serviceaccounts:gracekeeper-system",
                 "system:authenticated"]}}})");
  auto user = self_subject_user(review);
  ASSERT_TRUE(user) << user.error();
  EXPECT_EQ(*user, "system:serviceaccount:gracekeeper-system:gracekeeper");
}

TEST(SelfSubjectUser, AnAnswerWithoutAUserNameIsAnErrorThatSaysSo) {
  for (const json& bad :
       {json(nullptr), json::object(), json{{"status", "x"}}, json{{"status", {{"userInfo", 1}}}},
        json{{"status", {{"userInfo", {{"username", 7}}}}}}}) {
    auto user = self_subject_user(bad);
    ASSERT_FALSE(user) << bad.dump();
    EXPECT_THAT(user.error(), HasSubstr("status.userInfo.username")) << bad.dump();
  }
  auto empty = self_subject_user(json{{"status", {{"userInfo", {{"username", ""}}}}}});
  ASSERT_FALSE(empty);
  EXPECT_THAT(empty.error(), HasSubstr("empty"));
}

}  // namespace
}  // namespace gracekeeper::webhook
