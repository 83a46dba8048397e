// Issue 45 item 2: `plan` and `check` agree. One engine run gives both the
// plan and the findings `check` prints; over every manifest of the test
// corpora, wherever the plan adds or lengthens a preStop wait or raises the
// grace, the findings hold at least a warning for that workload: `check`
// never passes in silence what `plan` would change to make the budget hold.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "gracekeeper/offline/offline.h"

namespace gracekeeper::offline {
namespace {

namespace fs = std::filesystem;

// The manifests of the corpora, each read on its own (a file that does not
// load alone, such as one that needs another's policy, is left out).
std::vector<fs::path> corpus_files() {
  std::vector<fs::path> files;
  for (const char* dir :
       {"test/corpus/check", "test/corpus/plan", "test/fuzz/corpus", "config/samples"}) {
    for (const auto& entry : fs::directory_iterator(fs::path(GK_SOURCE_DIR) / dir)) {
      const auto ext = entry.path().extension();
      if (ext == ".yaml" || ext == ".json") files.push_back(entry.path());
    }
  }
  std::ranges::sort(files);
  return files;
}

// What the plan would change to make the budget hold: a wait added or
// lengthened on a container, or a longer grace.
std::vector<std::string> raises(const Evaluated& e) {
  std::vector<std::string> out;
  const budget::Plan& p = e.plan;
  if (!p.changed()) return out;
  if (p.grace_seconds > e.deployment.grace_seconds) out.push_back("terminationGracePeriodSeconds");
  for (const auto& cp : p.containers) {
    if (cp.action != budget::ContainerPlan::Action::SetSleep &&
        cp.action != budget::ContainerPlan::Action::SetExecSleep) {
      continue;
    }
    const auto c = std::ranges::find(e.deployment.containers, cp.name, &budget::Container::name);
    const auto before = c == e.deployment.containers.end() ? std::nullopt : c->pre_stop.wait_ms;
    if (!before || *before < budget::milliseconds_of(cp.pre_stop_seconds)) {
      out.push_back("containers[" + cp.name + "].preStop");
    }
  }
  return out;
}

TEST(PlanCheckAgree, CheckWarnsWhereverPlanRaisesAWaitOrAGrace) {
  std::size_t workloads = 0, raised = 0;
  for (const fs::path& file : corpus_files()) {
    SCOPED_TRACE(file.string());
    Options options;
    options.files = {file.string()};
    options.all = true;
    std::istringstream in;
    auto loaded = load_and_evaluate(options, in, /*keep_sources=*/false);
    if (!loaded) continue;
    for (const Evaluated& e : loaded->deployments) {
      ++workloads;
      const auto changed = raises(e);
      if (changed.empty()) continue;
      ++raised;
      const bool warned = std::ranges::any_of(e.plan.findings, [](const budget::Finding& f) {
        return f.severity != budget::Severity::Info;
      });
      EXPECT_TRUE(warned) << e.deployment.kind << " " << e.deployment.name << ": plan changes "
                          << changed.front() << " but check reports no warning";
    }
  }
  std::printf("[ figure ] %zu workloads read, %zu with a wait or grace plan raises\n", workloads,
              raised);
  EXPECT_GE(workloads, 20u);
  EXPECT_GE(raised, 10u);
}

}  // namespace
}  // namespace gracekeeper::offline
