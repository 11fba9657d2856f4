// The batchcheck CLI with the scan run in this process (no supervisor, no engine child): the
// harness times it beside the real binary so the supervisor's own cost shows on its own.
#include <iostream>
#include <string>
#include <vector>

#include "cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return batchcheck::run_cli(args, std::cout, std::cerr);
}
