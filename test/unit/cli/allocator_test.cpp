// The binary runs with the allocator the build chose (GRACEKEEPER_ALLOCATOR):
// mimalloc says so on stderr when MIMALLOC_VERBOSE is set, and is silent
// when it is not the process's allocator.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

std::string run_verbose_version() {
  const std::string command = std::string("MIMALLOC_VERBOSE=1 '") + GK_BINARY + "' version 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  std::string out;
  std::array<char, 4096> chunk{};
  while (std::size_t n = std::fread(chunk.data(), 1, chunk.size(), pipe))
    out.append(chunk.data(), n);
  ::pclose(pipe);
  return out;
}

TEST(Allocator, TheBinaryRunsWithTheAllocatorTheBuildChose) {
  const std::string out = run_verbose_version();
  ASSERT_NE(out.find("gracekeeper "), std::string::npos) << out;
  const bool mimalloc = out.find("mimalloc: process init") != std::string::npos;
  EXPECT_EQ(mimalloc, std::string(GK_ALLOCATOR) == "mimalloc")
      << "built with GRACEKEEPER_ALLOCATOR=" << GK_ALLOCATOR << "; the binary printed:\n"
      << out;
}

}  // namespace
