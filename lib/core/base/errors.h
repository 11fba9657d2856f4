#pragma once
// Typed errors. Everything the user can fix (flags, config, model or data files)
// is an InputError and maps to exit 2; InternalError is a bug (exit 3).
#include <stdexcept>
#include <string>

namespace batchcheck {

class InputError : public std::runtime_error {
 public:
  // file: the path as the user wrote it ("" when no file is involved, e.g. a flag);
  // where: a key path, "line:column", a flag name... ("" when the whole file is meant);
  // what: what is wrong, in the user's terms.
  InputError(std::string file, std::string where, std::string what);

  const std::string& file() const { return file_; }
  const std::string& where() const { return where_; }
  const std::string& detail() const { return what_; }

 private:
  std::string file_, where_, what_;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// "batchcheck: error: <file>: <where>: <what>" (empty parts left out), one line.
std::string format_error(const InputError& e);

}  // namespace batchcheck
