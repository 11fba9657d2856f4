#include "core/base/json_input.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <sys/stat.h>

#include "core/base/errors.h"
#include "core/base/files.h"
#include "core/base/text.h"

namespace batchcheck {

using nlohmann::json;

namespace {

std::pair<std::size_t, std::size_t> line_column(const std::string& text, std::size_t byte) {
  // nlohmann reports the 1-based position of the last byte read.
  std::size_t line = 1, col = 0;
  std::size_t end = std::min(byte, text.size());
  for (std::size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 0;
    } else {
      ++col;
    }
  }
  return {line, std::max<std::size_t>(col, 1)};
}

// nlohmann's message minus its "[json.exception...] parse error at line L, column C: " prefix.
std::string strip_parse_prefix(const std::string& msg) {
  auto pos = msg.find("column ");
  if (pos != std::string::npos) {
    auto colon = msg.find(": ", pos);
    if (colon != std::string::npos) return msg.substr(colon + 2);
  }
  auto bracket = msg.find("] ");
  return bracket == std::string::npos ? msg : msg.substr(bracket + 2);
}

}  // namespace

namespace {

template <typename J>
J parse_text_as(const std::string& display_path, const std::string& text) {
  bool blank = text.find_first_not_of(" \t\r\n") == std::string::npos;
  if (blank) throw InputError(display_path, "1:1", "the file is empty; expected a JSON object");
  try {
    return J::parse(text);
  } catch (const json::exception& e) {
    throw_json_error(display_path, text, e);
  }
}

}  // namespace

void throw_json_error(const std::string& display_path, const std::string& text, const json::exception& e) {
  if (const auto* pe = dynamic_cast<const json::parse_error*>(&e)) {
    auto [line, col] = line_column(text, pe->byte);
    throw InputError(display_path, std::to_string(line) + ":" + std::to_string(col), strip_parse_prefix(e.what()));
  }
  // e.g. out_of_range 406, "number overflow parsing '1e99999'": no position is given,
  // so locate the quoted token in the text.
  std::string msg = strip_parse_prefix(e.what());
  std::string where;
  auto q1 = msg.find('\''), q2 = msg.rfind('\'');
  if (q1 != std::string::npos && q2 > q1) {
    auto pos = text.find(msg.substr(q1 + 1, q2 - q1 - 1));
    if (pos != std::string::npos) {
      auto [line, col] = line_column(text, pos + 1);
      where = std::to_string(line) + ":" + std::to_string(col);
    }
  }
  throw InputError(display_path, where, msg);
}

void throw_json_error(const std::string& display_path, std::istream& from_start, std::size_t position, const json::exception& e) {
  // line_column and the token search of the in-memory version, one byte at a time.
  const auto* pe = dynamic_cast<const json::parse_error*>(&e);
  const std::string msg = strip_parse_prefix(e.what());
  std::string token;
  if (!pe) {
    auto q1 = msg.find('\''), q2 = msg.rfind('\'');
    if (q1 != std::string::npos && q2 > q1) token = msg.substr(q1 + 1, q2 - q1 - 1);
  }
  const std::size_t end = pe ? pe->byte : position;
  std::size_t line = 1, col = 0, read = 0, token_line = 0, token_col = 0;
  bool blank = true;
  std::string recent;  // the last token.size() bytes
  char buf[1 << 16];
  while (read < end && from_start) {
    from_start.read(buf, static_cast<std::streamsize>(std::min(sizeof buf, end - read)));
    const auto got = static_cast<std::size_t>(std::max<std::streamsize>(from_start.gcount(), 0));
    for (std::size_t i = 0; i < got; ++i) {
      const char c = buf[i];
      blank = blank && (c == ' ' || c == '\t' || c == '\r' || c == '\n');
      if (c == '\n') {
        ++line;
        col = 0;
      } else {
        ++col;
      }
      if (token.empty()) continue;
      recent += c;
      if (recent.size() > token.size()) recent.erase(0, 1);
      if (recent == token) {
        token_line = line;
        token_col = col - token.size() + 1;
      }
    }
    read += got;
    if (got == 0) break;
  }
  if (blank) throw InputError(display_path, "1:1", "the file is empty; expected a JSON object");
  if (pe) throw InputError(display_path, std::to_string(line) + ":" + std::to_string(std::max<std::size_t>(col, 1)), msg);
  throw InputError(display_path, token_line ? std::to_string(token_line) + ":" + std::to_string(token_col) : "", msg);
}

std::string format_bytes(long double bytes) {
  if (!(bytes >= 1024)) return std::to_string(static_cast<uint64_t>(bytes < 0 ? 0 : bytes)) + " bytes";
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  std::size_t unit = 0;
  bytes /= 1024;
  while (bytes >= 1024 && unit + 1 < sizeof kUnits / sizeof kUnits[0]) {
    bytes /= 1024;
    ++unit;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, bytes >= 100 ? "%.0Lf" : bytes >= 10 ? "%.1Lf" : "%.2Lf", bytes);
  std::string out = buf;
  if (out.find('.') != std::string::npos) {
    while (out.back() == '0') out.pop_back();
    if (out.back() == '.') out.pop_back();
  }
  return out + " " + kUnits[unit];
}

std::string read_text_file(const std::string& display_path, const std::string& fs_path) {
  require_regular_file(display_path, fs_path, "a JSON file");
  std::ifstream in(fs_path, std::ios::binary);
  if (!in) throw InputError(display_path, "", std::string("cannot read: ") + std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw InputError(display_path, "", "read error");
  return std::move(buf).str();
}

json parse_json_text(const std::string& display_path, const std::string& text) {
  return parse_text_as<json>(display_path, text);
}

json read_json_file(const std::string& display_path, const std::string& fs_path) {
  return parse_json_text(display_path, read_text_file(display_path, fs_path));
}

nlohmann::ordered_json parse_ordered_json_text(const std::string& display_path, const std::string& text) {
  return parse_text_as<nlohmann::ordered_json>(display_path, text);
}

nlohmann::ordered_json read_ordered_json_file(const std::string& display_path, const std::string& fs_path) {
  return parse_ordered_json_text(display_path, read_text_file(display_path, fs_path));
}

std::string describe_json(const json& v) {
  switch (v.type()) {
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::null: return "null";
    default: {
      std::string s = v.dump();
      if (s.size() > 40) s = s.substr(0, 37) + "...";
      return s;
    }
  }
}

JsonObject::JsonObject(std::string file, std::string path, const json& value)
    : file_(std::move(file)), path_(std::move(path)), value_(&value) {
  if (!value.is_object()) {
    throw InputError(file_, path_.empty() ? "1:1" : path_, "expected an object, got " + describe_json(value));
  }
}

std::string JsonObject::key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

bool JsonObject::has(const std::string& key) const { return value_->contains(key); }

const json* JsonObject::find(const std::string& key) const {
  auto it = value_->find(key);
  return it == value_->end() ? nullptr : &*it;
}

void JsonObject::fail(const std::string& key, const std::string& what) const {
  throw InputError(file_, key.empty() ? path_ : key_path(key), what);
}

const json& JsonObject::require(const std::string& key) const {
  const json* v = find(key);
  if (!v) fail(key, "missing required key");
  return *v;
}

JsonObject JsonObject::object(const std::string& key) const {
  return JsonObject(file_, key_path(key), require(key));
}

std::optional<JsonObject> JsonObject::optional_object(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  return JsonObject(file_, key_path(key), *v);
}

std::optional<std::string> JsonObject::string(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail(key, "expected a string, got " + describe_json(*v));
  std::string out = v->get<std::string>();
  // "\u0000" would silently cut a path short at the operating system.
  if (out.find('\0') != std::string::npos) fail(key, "contains a NUL character (\\u0000)");
  return out;
}

std::string JsonObject::required_string(const std::string& key) const {
  require(key);
  auto s = string(key);
  if (s->empty()) fail(key, "expected a non-empty string");
  return *s;
}

std::optional<std::string> JsonObject::choice(const std::string& key, const std::vector<std::string>& choices) const {
  auto s = string(key);
  if (!s) return s;
  for (const auto& c : choices) {
    if (c == *s) return s;
  }
  std::string hint = did_you_mean(*s, choices);
  if (hint.empty()) hint = " (expected one of: " + join(choices) + ")";
  fail(key, "unknown value \"" + *s + "\"" + hint);
}

std::optional<bool> JsonObject::boolean(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail(key, "expected true or false, got " + describe_json(*v));
  return v->get<bool>();
}

namespace {
std::string positive_word(uint64_t min_value) {
  if (min_value == 0) return "a non-negative integer";
  if (min_value == 1) return "a positive integer";
  return "an integer >= " + std::to_string(min_value);
}
}  // namespace

std::optional<uint64_t> JsonObject::uint(const std::string& key, uint64_t min_value) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  uint64_t out = 0;
  if (v->is_number_unsigned()) {
    out = v->get<uint64_t>();
  } else if (v->is_number_integer() && v->get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v->get<int64_t>());
  } else {
    fail(key, "expected " + positive_word(min_value) + ", got " + describe_json(*v));
  }
  if (out < min_value) fail(key, "expected " + positive_word(min_value) + ", got " + describe_json(*v));
  return out;
}

uint64_t JsonObject::required_uint(const std::string& key, uint64_t min_value) const {
  require(key);
  return *uint(key, min_value);
}

std::optional<int64_t> JsonObject::integer(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_number_integer() && !v->is_number_unsigned()) return v->get<int64_t>();
  if (v->is_number_unsigned() && v->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(v->get<uint64_t>());
  }
  fail(key, "expected an integer, got " + describe_json(*v));
}

std::optional<double> JsonObject::number(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail(key, "expected a number, got " + describe_json(*v));
  return v->get<double>();
}

std::optional<std::vector<double>> JsonObject::number_list(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_array()) fail(key, "expected an array of numbers, got " + describe_json(*v));
  std::vector<double> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_number()) fail(key + "[" + std::to_string(i) + "]", "expected a number, got " + describe_json(e));
    out.push_back(e.get<double>());
  }
  return out;
}

std::optional<std::vector<uint64_t>> JsonObject::uint_list(const std::string& key, uint64_t min_value) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_array()) fail(key, "expected an array of integers, got " + describe_json(*v));
  std::vector<uint64_t> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    bool ok = e.is_number_unsigned() || (e.is_number_integer() && e.get<int64_t>() >= 0);
    uint64_t u = ok ? e.get<uint64_t>() : 0;
    if (!ok || u < min_value) {
      fail(key + "[" + std::to_string(i) + "]", "expected " + positive_word(min_value) + ", got " + describe_json(e));
    }
    out.push_back(u);
  }
  return out;
}

void JsonObject::reject_unknown(const std::vector<std::string>& known) const {
  for (const auto& item : value_->items()) {
    bool ok = false;
    for (const auto& k : known) ok = ok || k == item.key();
    if (ok) continue;
    std::string hint = did_you_mean(item.key(), known);
    if (hint.empty()) hint = " (known keys: " + join(known) + ")";
    fail(item.key(), "unknown key" + hint);
  }
}

}  // namespace batchcheck
