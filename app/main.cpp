#include <iostream>

#include "cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return batchcheck::run_cli(args, std::cout, std::cerr);
}
