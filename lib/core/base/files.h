#pragma once
// Inputs are regular files. A FIFO, a device (/dev/zero) or a directory is refused by
// stat() before any open: nothing waits on a writer that never comes or reads for ever.
#include <string>

namespace batchcheck {

// Throws InputError(display, "", ...) unless `path` is a regular file. `expected` names
// what should be there ("a JSON file", "a .npy file").
void require_regular_file(const std::string& display, const std::string& path, const std::string& expected);

}  // namespace batchcheck
