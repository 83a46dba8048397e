#include <span>
#include <string_view>
#include <vector>

#include "gracekeeper/cli/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  return gracekeeper::cli::main(args);
}
