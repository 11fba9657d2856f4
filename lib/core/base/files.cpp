#include "core/base/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/base/errors.h"

namespace batchcheck {

void require_regular_file(const std::string& display, const std::string& path, const std::string& expected) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw InputError(display, "", std::string("cannot read: ") + std::strerror(errno));
  if (S_ISREG(st.st_mode)) return;
  if (S_ISDIR(st.st_mode)) throw InputError(display, "", "is a directory, expected " + expected);
  const char* kind = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : "a device";
  throw InputError(display, "", std::string("is ") + kind + ", not a regular file: expected " + expected);
}

int write_all(int fd, std::string_view text) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : ENOSPC;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace batchcheck
