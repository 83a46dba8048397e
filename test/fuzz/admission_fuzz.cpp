// libFuzzer target for the admission webhook's decision
// (include/gracekeeper/admission/admission.h): arbitrary bytes as the body of POST
// /mutate-deployments, against stores holding one Enforce policy (with a measured figure in its
// status) and one Service in namespace "shop".
//
// Besides the sanitizers' findings (crash, leak, overflow, UB), it aborts when
// one of these properties breaks:
//  - admit() never throws, and answers 200, 400 or 413;
//  - a 200 is an AdmissionReview v1 whose response allows the object, echoes
//    the request's uid, and carries a patch only with patchType JSONPatch;
//  - a patch is base64 of a JSON array of operations that applies to the
//    request's object;
//  - the patch is the whole plan: admitting the patched object again gives no
//    patch (otherwise the reconciler, and the next admission, would change it
//    again).
//
// Build and run: FUZZ_TARGET=admission_fuzz hack/fuzz [SECONDS].
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "gracekeeper/admission/admission.h"

namespace {

namespace controller = gracekeeper::controller;
namespace kube = gracekeeper::kube;
using nlohmann::json;

[[noreturn]] void violation(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "\n==== admission_fuzz: PROPERTY VIOLATED: %s\n%s\n====\n", what,
               detail.c_str());
  std::abort();
}

struct World {
  kube::StoreCore policies;
  kube::StoreCore services;
  controller::PropagationBook book;  // empty: the figure comes from the status
  World() {
    auto policy = controller::project_policy(json::parse(R"({
      "metadata": {"name": "default", "namespace": "shop", "uid": "p", "generation": 1,
                   "resourceVersion": "1"},
      "spec": {"propagation": {"source": "Static", "staticSeconds": 4}},
      "status": {"observedGeneration": 1, "propagation": {"seconds": 4, "source": "Static"},
                 "conditions": [{"type": "MetricsAvailable", "status": "True"}]}})"));
    kube::store_value(policies, "shop/default", "1", std::move(*policy));
    kube::store_value(services, "shop/web", "1", controller::CachedService{{{"tier", "web"}}});
  }
  controller::AdmissionInputs inputs() const {
    controller::AdmissionInputs in{kube::Store<controller::CachedPolicy>(policies),
                                   kube::Store<controller::CachedService>(services),
                                   &book,
                                   {},
                                   std::chrono::system_clock::time_point(
                                       std::chrono::sys_days(std::chrono::year{2026} / 12 / 1))};
    in.capabilities.native_sleep = true;
    return in;
  }
};

std::string decode_base64(const std::string& in) {
  static const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t bits = 0;
  int count = 0;
  for (char c : in) {
    if (c == '=') break;
    const auto at = alphabet.find(c);
    if (at == std::string::npos) violation("the patch is not base64", in);
    bits = (bits << 6) | static_cast<std::uint32_t>(at);
    if ((count += 6) >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xff);
    }
  }
  return out;
}

// The answer's checked response; the patched object when there is a patch.
std::optional<json> check(const controller::AdmissionAnswer& a, const json* request) {
  if (a.status == 400 || a.status == 413) {
    if (a.outcome != controller::AdmissionAnswer::Outcome::BadRequest || a.error.empty()) {
      violation("a 4xx without BadRequest and a reason", a.body);
    }
    return std::nullopt;
  }
  if (a.status != 200) violation("an answer that is not 200, 400 or 413", a.body);
  const json review = json::parse(a.body, nullptr, false);
  if (!review.is_object() || review.value("apiVersion", "") != "admission.k8s.io/v1" ||
      review.value("kind", "") != "AdmissionReview" || !review.contains("response")) {
    violation("a 200 that is not an AdmissionReview v1", a.body);
  }
  const json& response = review["response"];
  if (response.value("allowed", false) != true) violation("an object refused", a.body);
  if (!request || response.value("uid", "") != request->value("uid", std::string("?"))) {
    violation("the uid is not the request's", a.body);
  }
  if (!response.contains("patch")) return std::nullopt;
  if (response.value("patchType", "") != "JSONPatch")
    violation("a patch without JSONPatch", a.body);
  const json patch =
      json::parse(decode_base64(response["patch"].get<std::string>()), nullptr, false);
  if (!patch.is_array() || patch.empty()) violation("the patch is no list of operations", a.body);
  try {
    return (*request)["object"].patch(patch);
  } catch (const std::exception& e) {
    violation("the patch does not apply to the object", std::string(e.what()) + "\n" + a.body);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const World world;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  controller::AdmissionAnswer first;
  try {
    first = controller::admit(body, world.inputs());
  } catch (const std::exception& e) {
    violation("admit threw", e.what());
  }
  if (first.status != 200) {
    check(first, nullptr);
    return 0;
  }
  json review = json::parse(body, nullptr, false);
  if (review.is_discarded() || !review.contains("request"))
    violation("200 for no review", first.body);
  json& request = review["request"];
  request.erase("oldObject");
  const auto patched = check(first, &request);
  if (!patched) return 0;

  request["object"] = *patched;
  const std::string again_body = review.dump();
  controller::AdmissionAnswer again;
  try {
    again = controller::admit(again_body, world.inputs());
  } catch (const std::exception& e) {
    violation("admit threw on the patched object", e.what());
  }
  if (again.status == 200 && check(again, &request)) {
    violation("the patched object is patched again", again_body + "\n" + again.body);
  }
  return 0;
}
