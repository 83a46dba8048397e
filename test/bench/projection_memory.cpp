// Heap bytes per opted-in Deployment in the operator's informer cache: the
// projection (src/controller/cache.h) of the benchmark's Deployment
// (operator_bench_common.h), keyed as the informer keys it. Measured with
// glibc's mallinfo2 around building N entries. Usage: projection_memory [N]
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "../../src/controller/cache.h"  // private: the projection measured
#include "operator_bench_common.h"

namespace {

std::size_t heap_in_use() {
  return mallinfo2().uordblks;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 10000;
  if (n <= 0) {
    std::fprintf(stderr, "usage: %s [N > 0]\n", argv[0]);
    return 2;
  }
  std::size_t json_bytes = 0;
  const std::size_t before = heap_in_use();
  std::unordered_map<std::string, gracekeeper::controller::CachedDeployment> cache;
  for (int i = 0; i < n; ++i) {
    auto object = gk_bench::deployment("on", i);
    object["metadata"]["uid"] = "0c9a3f52-6f0e-4d2b-9d7e-" + std::to_string(100000000000 + i);
    object["metadata"]["generation"] = 1;
    json_bytes += object.dump().size();
    auto projected = gracekeeper::controller::project_deployment(object);
    if (!projected || !projected->deployment) {
      std::fprintf(stderr, "projection_memory: Deployment %d was not projected\n", i);
      return 1;
    }
    cache.emplace(object["metadata"]["namespace"].get<std::string>() + "/" +
                      object["metadata"]["name"].get<std::string>(),
                  std::move(*projected));
  }
  const std::size_t after = heap_in_use();
  std::printf(
      "projection_memory: %d Deployments (%.0f B of JSON each): %.0f heap bytes per cached "
      "projection, %.1f MiB in all\n",
      n, double(json_bytes) / n, double(after - before) / n,
      double(after - before) / (1024.0 * 1024.0));
  return 0;
}
