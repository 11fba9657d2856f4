// Build step: writes the bundled samples' models and data (deterministic, no Python).
#include <exception>
#include <iostream>

#include "engine/fixtures.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_samples OUTPUT_DIR\n";
    return 2;
  }
  try {
    batchcheck::generate_samples(argv[1]);
  } catch (const std::exception& e) {
    std::cerr << "make_samples: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
