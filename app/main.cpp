#include <iostream>
#include <string>

#include "cli.h"
#include "scan_entry.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == batchcheck::kEngineChildArg) return batchcheck::run_engine_child();
  std::vector<std::string> args(argv + 1, argv + argc);
  return batchcheck::run_cli(args, std::cout, std::cerr);
}
