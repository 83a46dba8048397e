#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class Inputs : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("manifest-inputs-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path write(const std::string& relative, const std::string& text = "kind: X\n") {
    fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  std::vector<std::string> names(const std::vector<std::string>& args) {
    auto sources = expand_inputs(args);
    EXPECT_TRUE(sources) << sources.error().format();
    std::vector<std::string> out;
    if (!sources) return out;
    for (const Source& s : *sources) {
      out.push_back(s.path.empty() ? s.name : fs::relative(s.path, root_).string());
    }
    return out;
  }

  fs::path root_;
};

TEST_F(Inputs, DirectoriesAreWalkedSortedAndFiltered) {
  write("b.yaml");
  write("a.yml");
  write("a-c.yaml");
  write("a/z.yaml");
  write("sub/deeper/c.json");
  write("sub/notes.txt");
  write("sub/README.md");
  write("UPPER.YAML");
  write(".hidden/d.yaml");
  write(".e.yaml");
  write("sub/.git/config.yaml");
  EXPECT_EQ(names({root_.string()}),
            (std::vector<std::string>{"UPPER.YAML", "a/z.yaml", "a-c.yaml", "a.yml", "b.yaml",
                                      "sub/deeper/c.json"}));
}

TEST_F(Inputs, NamesAreThePathsAsGiven) {
  fs::path file = write("dir/x.yaml");
  auto sources = expand_inputs({(root_ / "dir").string(), file.string(), "-"});
  ASSERT_TRUE(sources) << sources.error().format();
  ASSERT_EQ(sources->size(), 3u);
  EXPECT_EQ((*sources)[0].name, (root_ / "dir" / "x.yaml").string());
  EXPECT_EQ((*sources)[1].name, file.string());
  EXPECT_EQ((*sources)[1].path, file);
  EXPECT_EQ((*sources)[2].name, "-");
  EXPECT_TRUE((*sources)[2].path.empty());
}

TEST_F(Inputs, FilesAreTakenWhateverTheirExtension) {
  fs::path file = write("manifest.txt");
  EXPECT_EQ(names({file.string()}), (std::vector<std::string>{"manifest.txt"}));
}

TEST_F(Inputs, MissingPathIsAnError) {
  const std::string missing = (root_ / "nope.yaml").string();
  auto sources = expand_inputs({missing});
  ASSERT_FALSE(sources);
  EXPECT_EQ(sources.error().format(), missing + ": no such file or directory");
}

TEST_F(Inputs, DirectoryWithoutManifestsIsAnError) {
  write("empty/notes.txt");
  write("empty/.hidden/x.yaml");
  auto sources = expand_inputs({(root_ / "empty").string()});
  ASSERT_FALSE(sources);
  EXPECT_THAT(sources.error().format(), HasSubstr("empty: no manifests"));
}

TEST_F(Inputs, ReadSourceFromAFile) {
  fs::path file = write("x.yaml", "apiVersion: v1\nkind: A\n");
  std::istringstream unused;
  auto text = read_source(Source{file.string(), file}, unused);
  ASSERT_TRUE(text) << text.error().format();
  EXPECT_EQ(*text, "apiVersion: v1\nkind: A\n");
}

TEST_F(Inputs, ReadSourceErrorsCarryTheReason) {
  std::istringstream unused;
  fs::path missing = root_ / "gone.yaml";
  auto text = read_source(Source{"gone.yaml", missing}, unused);
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error().format(), "gone.yaml: cannot read: no such file or directory");

  fs::create_directories(root_ / "dir.yaml");
  auto directory = read_source(Source{"dir.yaml", root_ / "dir.yaml"}, unused);
  ASSERT_FALSE(directory);
  EXPECT_EQ(directory.error().format(), "dir.yaml: cannot read: is a directory");
}

TEST_F(Inputs, ReadSourceIsBounded) {
  Limits limits;
  limits.max_input_bytes = 100000;
  fs::path big = write("big.yaml", std::string(100001, 'a'));
  std::istringstream unused;
  auto text = read_source(Source{"big.yaml", big}, unused, limits);
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error().format(), "big.yaml: input is larger than the limit of 100000 bytes");
  fs::path fits = write("fits.yaml", std::string(100000, 'a'));
  EXPECT_TRUE(read_source(Source{"fits.yaml", fits}, unused, limits));
}

TEST(ReadSource, StandardInput) {
  std::istringstream in("kind: A\n---\nkind: B\n");
  auto text = read_source(Source{"-", {}}, in);
  ASSERT_TRUE(text) << text.error().format();
  auto docs = read_text(*text, "-");
  ASSERT_TRUE(docs);
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1].position.format(), "-:3:1");

  std::istringstream empty("");
  auto nothing = read_source(Source{"-", {}}, empty);
  ASSERT_TRUE(nothing);
  EXPECT_EQ(*nothing, "");

  Limits limits;
  limits.max_input_bytes = 4;
  std::istringstream large("12345");
  auto too_big = read_source(Source{"-", {}}, large, limits);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().format(), "-: input is larger than the limit of 4 bytes");
}

}  // namespace
}  // namespace gracekeeper::manifest
