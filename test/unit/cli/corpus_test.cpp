// plan --in-place on a corpus of real-world styles (test/corpus/plan): each
// input's diff is the expected one, kept beside it; after the edit `check`
// passes, a second plan changes nothing, and PyYAML (a YAML 1.1 loader)
// reads the edited file as the same objects our reader does.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gracekeeper/cli/cli.h"

namespace gracekeeper::cli {
namespace {

namespace fs = std::filesystem;

struct Result {
  int code = 0;
  std::string out, err;
};

Result run(std::vector<std::string> args) {
  std::vector<std::string_view> views(args.begin(), args.end());
  std::istringstream in;
  std::ostringstream out, err;
  const int code = main(views, Streams{in, out, err});
  return {code, out.str(), err.str()};
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(Corpus, PlanInPlaceEditsOnlyWhatItMust) {
  ::setenv("SOURCE_DATE_EPOCH", "1790000000", 1);
  const fs::path corpus = fs::path(GK_SOURCE_DIR) / "test/corpus/plan";
  const fs::path work = fs::temp_directory_path() / ("gk-corpus-" + std::to_string(::getpid()));
  fs::create_directories(work);
  int inputs = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    const fs::path input = entry.path();
    if (input.extension() == ".diff") continue;
    ++inputs;
    SCOPED_TRACE(input.filename().string());
    const fs::path copy = work / input.filename();
    fs::copy_file(input, copy, fs::copy_options::overwrite_existing);
    // The expected diff names the corpus file as it is given here.
    const std::string name = "test/corpus/plan/" + input.filename().string();
    auto diff = run({"plan", "--diff", "-f", input.string()});
    ASSERT_EQ(diff.code, 0) << diff.err;
    std::string expected = slurp(fs::path(input).replace_extension(".diff"));
    std::string got = diff.out;
    for (std::string* text : {&got}) {
      for (auto at = text->find(input.string()); at != std::string::npos;
           at = text->find(input.string())) {
        text->replace(at, input.string().size(), name);
      }
    }
    EXPECT_EQ(got, expected);
    EXPECT_EQ(diff.err.find("written out whole"), std::string::npos) << diff.err;

    auto edited = run({"plan", "-w", "-f", copy.string()});
    ASSERT_EQ(edited.code, 0) << edited.err;
    EXPECT_EQ(edited.out, "");
    auto checked = run({"check", "-f", copy.string()});
    EXPECT_EQ(checked.code, 0) << checked.out << checked.err;
    auto again = run({"plan", "--diff", "-f", copy.string()});
    EXPECT_EQ(again.code, 0);
    EXPECT_EQ(again.out, "") << "a second plan changes something";
    EXPECT_NE(again.err.find("0 Deployment(s) changed"), std::string::npos) << again.err;

    // YAML 1.1 (PyYAML) reads what our reader reads (dates as text, as Kubernetes does).
    auto json = run({"plan", "-o", "json", "-f", copy.string()});
    ASSERT_EQ(json.code, 0);
    const fs::path ours = work / (input.filename().string() + ".ours.json");
    std::ofstream(ours) << json.out;
    const std::string script =
        "import json,sys,yaml\n"
        "docs=[d for d in yaml.safe_load_all(open(sys.argv[1],encoding='utf-8')) if d is not "
        "None]\n"
        "ours=json.load(open(sys.argv[2]))\n"
        "ours=ours['items'] if len(docs)!=1 else [ours]\n"
        "norm=lambda v: json.loads(json.dumps(v,default=str,sort_keys=True))\n"
        "sys.exit(0 if norm(docs)==norm(ours) else 1)\n";
    const fs::path py = work / "compare.py";
    std::ofstream(py) << script;
    const std::string command =
        "python3 " + py.string() + " " + copy.string() + " " + ours.string() + " 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << "PyYAML reads other objects";
  }
  EXPECT_GE(inputs, 15);
  fs::remove_all(work);
}

// A Deployment nested in Lists so deep that the planned object is deeper
// than the reader's limit (100 levels): the edit is made, but the edited
// file would not read. Planned without -w it reads (98 levels).
std::string too_deep_when_planned() {
  constexpr int kLists = 46;  // the Deployment at level 93, its containers' items at 98
  std::string text, indent;
  for (int i = 0; i < kLists; ++i) {
    text += indent + (i ? "- " : "") + "apiVersion: v1\n" + indent + (i ? "  " : "") +
            "kind: List\n" + indent + (i ? "  " : "") + "items:\n";
    if (i) indent += "  ";
  }
  const std::string d = indent + "  ";
  return text + indent + "- apiVersion: apps/v1\n" + d + "kind: Deployment\n" + d +
         "metadata: {name: deep, annotations: {gracekeeper.dev/enabled: \"true\"}}\n" + d +
         "spec:\n" + d + "  template:\n" + d + "    spec:\n" + d + "      containers:\n" + d +
         "      - {name: app, image: app:1}\n";
}

// Until the whole edited file reads back, `plan -w` writes nothing: it
// leaves the file as it was rather than write one that does not read back.
TEST(Corpus, PlanInPlaceNeverWritesWhatDoesNotReadBack) {
  const fs::path copy =
      fs::temp_directory_path() / ("gk-deep-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(copy) << too_deep_when_planned();
  const std::string before = slurp(copy);
  auto checked = run({"check", "-f", copy.string()});
  EXPECT_EQ(checked.code, 1) << checked.err;  // it reads, and has findings
  auto edited = run({"plan", "-w", "-f", copy.string()});
  const std::string after = slurp(copy);
  fs::remove(copy);
  EXPECT_EQ(edited.code, 2) << edited.err;
  EXPECT_NE(edited.err.find("would not read back"), std::string::npos) << edited.err;
  EXPECT_EQ(after, before);
}

// Every edited file is read back before any is written: with -w over two
// files, one that would not read back leaves both as they were.
TEST(Corpus, PlanInPlaceWritesNoFileWhenOneDoesNotReadBack) {
  const fs::path dir = fs::temp_directory_path() / ("gk-two-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(fs::path(GK_SOURCE_DIR) / "test/corpus/plan/01-comments.yaml", dir / "a.yaml",
                fs::copy_options::overwrite_existing);
  std::ofstream(dir / "b.yaml") << too_deep_when_planned();
  const std::string a = slurp(dir / "a.yaml"), b = slurp(dir / "b.yaml");
  auto edited =
      run({"plan", "-w", "-f", (dir / "a.yaml").string(), "-f", (dir / "b.yaml").string()});
  EXPECT_EQ(edited.code, 2) << edited.err;
  EXPECT_NE(edited.err.find("no file is written"), std::string::npos) << edited.err;
  EXPECT_EQ(slurp(dir / "a.yaml"), a);
  EXPECT_EQ(slurp(dir / "b.yaml"), b);
  EXPECT_FALSE(fs::exists(dir / "a.yaml.gracekeeper-tmp"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gracekeeper::cli
