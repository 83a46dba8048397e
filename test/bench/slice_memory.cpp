// Heap bytes per cached EndpointSlice of the operator (source Observed and
// the termination audit), measured with glibc's mallinfo2 around caching N
// of them as the informer does: a kube::StoreCore entry (key,
// resourceVersion, shared projection) of CachedSlice
// (include/gracekeeper/audit/endpoints.h). Each slice is what the EndpointSlice controller writes
// for a Service of one 3-replica Deployment; the FieldSet the informer uses (endpoint_slice_fields)
// is applied first, as the informer's parser does. Usage: slice_memory [N] [ENDPOINTS]
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gracekeeper/audit/endpoints.h"  // the projection measured
#include "gracekeeper/kube/fields.h"
#include "gracekeeper/kube/store.h"

namespace {

std::size_t heap_in_use() {
  return mallinfo2().uordblks;
}

nlohmann::json slice(int i, int endpoints) {
  const std::string name = "app-" + std::to_string(i);
  nlohmann::json s = {
      {"apiVersion", "discovery.k8s.io/v1"},
      {"kind", "EndpointSlice"},
      {"metadata",
       {{"name", name + "-x7k2p"},
        {"generateName", name + "-"},
        {"namespace", "bench-" + std::to_string(i % 10)},
        {"uid", "0c9a3f52-6f0e-4d2b-9d7e-" + std::to_string(100000000000 + i)},
        {"resourceVersion", std::to_string(5000000 + i)},
        {"generation", 4},
        {"creationTimestamp", "2026-12-01T18:00:00Z"},
        {"labels",
         {{"endpointslice.kubernetes.io/managed-by", "endpointslice-controller.k8s.io"},
          {"kubernetes.io/service-name", name}}},
        {"annotations",
         {{"endpoints.kubernetes.io/last-change-trigger-time", "2026-12-01T18:00:00Z"}}},
        {"ownerReferences",
         {{{"apiVersion", "v1"},
           {"kind", "Service"},
           {"name", name},
           {"uid", "1c9a3f52-6f0e-4d2b-9d7e-" + std::to_string(100000000000 + i)},
           {"controller", true},
           {"blockOwnerDeletion", true}}}}}},
      {"addressType", "IPv4"},
      {"ports", {{{"name", "http"}, {"port", 8080}, {"protocol", "TCP"}}}},
      {"endpoints", nlohmann::json::array()}};
  for (int e = 0; e < endpoints; ++e) {
    s["endpoints"].push_back(
        {{"addresses", {"10.1." + std::to_string(i % 250) + "." + std::to_string(e + 2)}},
         {"conditions", {{"ready", true}, {"serving", true}, {"terminating", false}}},
         {"nodeName", "node-" + std::to_string(e)},
         {"zone", "zone-a"},
         {"targetRef",
          {{"kind", "Pod"},
           {"namespace", "bench-" + std::to_string(i % 10)},
           {"name",
            name + "-7d9f8b6c5-x2x4" + std::string(1, "bcdfghjklmnpqrstvwxz2456789"[e % 27])},
           {"uid", "2c9a3f52-6f0e-4d2b-9d7e-" + std::to_string(100000000000 + i * 10 + e)}}}});
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 10000;
  const int endpoints = argc > 2 ? std::atoi(argv[2]) : 3;
  if (n <= 0 || endpoints <= 0) {
    std::fprintf(stderr, "usage: %s [N > 0] [ENDPOINTS > 0]\n", argv[0]);
    return 2;
  }
  const gracekeeper::kube::FieldSet fields(gracekeeper::controller::endpoint_slice_fields());
  std::size_t json_bytes = 0;
  gracekeeper::kube::StoreCore store;
  const std::size_t before = heap_in_use();
  for (int i = 0; i < n; ++i) {
    const nlohmann::json object = slice(i, endpoints);
    json_bytes += object.dump().size();
    auto change = gracekeeper::controller::read_slice(fields.filter(object));
    gracekeeper::kube::store_value(store,
                                   object["metadata"]["namespace"].get<std::string>() + "/" +
                                       object["metadata"]["name"].get<std::string>(),
                                   object["metadata"]["resourceVersion"].get<std::string>(),
                                   gracekeeper::controller::cache_slice(change.endpoints));
  }
  const std::size_t after = heap_in_use();
  std::printf(
      "%d EndpointSlices of %d endpoints: %.0f bytes of JSON each, %.0f heap bytes cached each\n",
      n, endpoints, static_cast<double>(json_bytes) / n, static_cast<double>(after - before) / n);
  return store.size() == static_cast<std::size_t>(n) ? 0 : 1;
}
