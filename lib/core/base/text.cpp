#include "core/base/text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace batchcheck {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + cost});
      diag = up;
    }
  }
  return row[b.size()];
}

namespace {
bool is_subsequence(std::string_view needle, std::string_view hay) {
  std::size_t i = 0;
  for (char ch : hay) {
    if (i < needle.size() && needle[i] == ch) ++i;
  }
  return i == needle.size();
}
}  // namespace

std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    // A shortened spelling ("batch" for "batch_size", "bce_logits" for
    // "bce_with_logits") keeps the letters in order: count it as close.
    if (word.size() >= 3 && is_subsequence(word, c)) d = std::min<std::size_t>(d, 1);
    // A longer spelling of a key ("training" for "train") is close, but less so.
    if (c.size() >= 3 && word.substr(0, c.size()) == c) d = std::min<std::size_t>(d, 2);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // Allow roughly one typo per three characters, as ninja and git do.
  std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  if (best && best_d <= limit) return best;
  return std::nullopt;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  auto m = closest_match(word, candidates);
  return m ? "; did you mean \"" + *m + "\"?" : std::string();
}

std::string single_line(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool space = false;
  for (char ch : s) {
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
    if (ch == ' ') {
      if (!space && !out.empty()) out += ' ';
      space = true;
      continue;
    }
    space = false;
    out += ch;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;  // every byte but a continuation starts one
  return n;
}

std::string excerpt(std::string_view s, std::size_t max_chars) {
  // A bounded prefix only: enough bytes for max_chars + 1 code points of up to 4 bytes each.
  const std::size_t prefix = std::min<std::size_t>(s.size(), (max_chars + 1) * 4);
  const std::string line = single_line(s.substr(0, prefix));
  std::size_t chars = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if ((static_cast<unsigned char>(line[i]) & 0xC0) == 0x80) continue;
    if (chars == max_chars) return line.substr(0, i) + "...";
    ++chars;
  }
  return prefix < s.size() ? line + "..." : line;
}

bool python_keyword(std::string_view name) {
  static const char* const kKeywords[] = {
      "False", "None",   "True",    "and",      "as",     "assert", "async", "await",  "break",
      "class", "continue", "def",   "del",      "elif",   "else",   "except", "finally", "for",
      "from",  "global", "if",      "import",   "in",     "is",     "lambda", "nonlocal", "not",
      "or",    "pass",   "raise",   "return",   "try",    "while",  "with",  "yield"};
  for (const char* k : kKeywords) {
    if (name == k) return true;
  }
  return false;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

std::string join_ints(const std::vector<int64_t>& items, std::string_view sep) {
  std::vector<std::string> s;
  s.reserve(items.size());
  for (auto v : items) s.push_back(std::to_string(v));
  return join(s, sep);
}

std::string join_uints(const std::vector<uint64_t>& items, std::string_view sep) {
  std::vector<std::string> s;
  s.reserve(items.size());
  for (auto v : items) s.push_back(std::to_string(v));
  return join(s, sep);
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return std::nullopt;
    uint64_t d = static_cast<uint64_t>(ch - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string plural(uint64_t n, std::string_view singular, std::string_view plural_form) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out + std::string(singular);
  return out + (plural_form.empty() ? std::string(singular) + "s" : std::string(plural_form));
}

std::string nonfinite_text(uint64_t nan, uint64_t inf, std::string_view sep) {
  std::vector<std::string> parts;
  if (nan) parts.push_back(plural(nan, "NaN", "NaNs"));
  if (inf) parts.push_back(plural(inf, "Inf", "Infs"));
  return join(parts, sep);
}

}  // namespace batchcheck
