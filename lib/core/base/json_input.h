#pragma once
// Reading user-written JSON with errors in the user's terms: the file, the key path
// ("loader.batch_size", "checks.output_range[1]") and, for syntax errors, line:column.
#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace batchcheck {

// A file's bytes (InputError when it is missing, not a regular file or unreadable).
std::string read_text_file(const std::string& display_path, const std::string& fs_path);
// Reads and parses a JSON file. display_path is how errors name the file.
nlohmann::json read_json_file(const std::string& display_path, const std::string& fs_path);
// Parses text; syntax errors become InputError(display_path, "line:column", ...).
nlohmann::json parse_json_text(const std::string& display_path, const std::string& text);
// parse_json_text and read_json_file keeping the keys' order (a report or a partial report, printed again as written).
nlohmann::ordered_json parse_ordered_json_text(const std::string& display_path, const std::string& text);
nlohmann::ordered_json read_ordered_json_file(const std::string& display_path, const std::string& fs_path);

// `"8"`, `8.5`, `true`, `null`, `an array`, `an object`: for "expected X, got Y".
std::string describe_json(const nlohmann::json& v);

// A nlohmann error while reading `display` (a syntax error, or a number that overflows) as
// InputError(display, "line:column", ...). `text` is the input up to the error, at least: the
// position is counted in it. For the SAX readers, which see the error in their handler.
[[noreturn]] void throw_json_error(const std::string& display, const std::string& text, const nlohmann::json::exception& e);
// The same for input streamed from a file: `from_start` is the input again from its first byte,
// read up to `position` (where the parser stopped) in O(1) memory, however large the file.
// Whitespace only up to there is "the file is empty".
[[noreturn]] void throw_json_error(const std::string& display, std::istream& from_start, std::size_t position,
                                   const nlohmann::json::exception& e);

// How much memory a size from a user's file asks for, as an error message says it:
// "512 bytes", "8 MiB", "1.5 GiB", "16 EiB" (binary units, 3 significant digits).
std::string format_bytes(long double bytes);

// One JSON object at a key path. Typed getters throw InputError naming the key path;
// reject_unknown() turns keys nobody asked about into "did you mean" errors.
class JsonObject {
 public:
  JsonObject(std::string file, std::string path, const nlohmann::json& value);

  const std::string& path() const { return path_; }
  std::string key_path(const std::string& key) const;
  bool has(const std::string& key) const;
  const nlohmann::json* find(const std::string& key) const;

  JsonObject object(const std::string& key) const;  // required
  std::optional<JsonObject> optional_object(const std::string& key) const;

  std::optional<std::string> string(const std::string& key) const;
  std::string required_string(const std::string& key) const;
  // One of `choices`; the error suggests the closest.
  std::optional<std::string> choice(const std::string& key, const std::vector<std::string>& choices) const;
  std::optional<bool> boolean(const std::string& key) const;
  std::optional<uint64_t> uint(const std::string& key, uint64_t min_value = 0) const;
  uint64_t required_uint(const std::string& key, uint64_t min_value) const;
  std::optional<int64_t> integer(const std::string& key) const;
  std::optional<double> number(const std::string& key) const;
  std::optional<std::vector<double>> number_list(const std::string& key) const;
  std::optional<std::vector<uint64_t>> uint_list(const std::string& key, uint64_t min_value) const;

  // Throws for the first key of this object that is not in `known`.
  void reject_unknown(const std::vector<std::string>& known) const;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json& require(const std::string& key) const;
  std::string file_, path_;
  const nlohmann::json* value_;
};

}  // namespace batchcheck
