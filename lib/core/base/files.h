#pragma once
// Inputs are regular files. A FIFO, a device (/dev/zero) or a directory is refused by
// stat() before any open: nothing waits on a writer that never comes or reads for ever.
// And one way to write a whole buffer to a descriptor.
#include <string>
#include <string_view>

namespace batchcheck {

// Throws InputError(display, "", ...) unless `path` is a regular file. `expected` names
// what should be there ("a JSON file", "a .npy file").
void require_regular_file(const std::string& display, const std::string& path, const std::string& expected);

// Writes all of `text` to `fd` (a short write or EINTR goes on); 0, or the errno that stopped it
// (ENOSPC where write() wrote nothing without one).
int write_all(int fd, std::string_view text);

}  // namespace batchcheck
