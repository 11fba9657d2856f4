#pragma once
// The whole command line, callable in-process: main() and the CLI tests both use it.
#include <ostream>
#include <string>
#include <vector>

namespace batchcheck {

// args excludes the program name. Returns the exit code (SPEC.md: 0 pass, 1 fail,
// 2 unusable input, 3 internal error).
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace batchcheck
