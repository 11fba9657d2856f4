#include "core/base/escape.h"

#include <cstdio>
#include <utility>

namespace batchcheck {

std::size_t utf8_sequence(std::string_view s, std::size_t i, char32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  std::size_t n = 0;
  char32_t min = 0;
  if ((c >> 5) == 0x6) n = 2, cp = c & 0x1F, min = 0x80;
  else if ((c >> 4) == 0xE) n = 3, cp = c & 0x0F, min = 0x800;
  else if ((c >> 3) == 0x1E) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b >> 6) != 0x2) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

namespace {

// Code points a terminal or a log parser acts on rather than shows: controls, the line and
// paragraph separators, and the bidirectional embeddings, overrides and isolates (text that
// displays in another order than it reads).
bool acts_on_display(char32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F ||
         cp == 0x061C || cp == 0xFEFF;
}

std::string hex(const char* format, unsigned value) {
  char buf[16];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string visible(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const std::size_t n = utf8_sequence(s, i, cp);
    if (n == 0) {
      out += hex("\\x%02x", static_cast<unsigned char>(s[i]));
      ++i;
      continue;
    }
    if (cp == '#' && s.compare(i, 3, "##[") == 0) {
      // GitHub's runner reads "##[command]data" anywhere in a line (its older form).
      out += "#\\x23[";
      i += 3;
      continue;
    }
    if (!acts_on_display(cp) || (keep_newlines && cp == '\n')) {
      out.append(s.substr(i, n));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x80) {
      out += hex("\\x%02x", static_cast<unsigned>(cp));
    } else {
      out += hex("\\u{%X}", static_cast<unsigned>(cp));
    }
    i += n;
  }
  return out;
}

}  // namespace

std::string terminal_text(std::string_view s) { return visible(s, false); }

std::string terminal_lines(std::string_view s) { return visible(s, true); }

namespace {

// What .NET's String.TrimStart() skips (GitHub's runner trims a line so before it looks for
// "::"): spaces and, once controls are escaped, the Unicode space characters.
bool runner_space(char32_t cp) {
  return cp == ' ' || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// A line's leading "::" (after what the runner trims) as "\x3a:".
std::string guard_command(std::string line) {
  std::size_t b = 0;
  for (char32_t cp = 0; b < line.size();) {
    const std::size_t n = utf8_sequence(line, b, cp);
    if (n == 0 || !runner_space(cp)) break;
    b += n;
  }
  if (line.compare(b, 2, "::") == 0) line.replace(b, 1, "\\x3a");
  return line;
}

}  // namespace

std::string log_text(std::string_view s) { return guard_command(terminal_text(s)); }

std::string guard_log_line(std::string line) { return guard_command(std::move(line)); }

std::string log_lines(std::string_view s) {
  const std::string text = terminal_lines(s);
  std::string out;
  std::size_t start = 0;
  while (true) {
    const std::size_t nl = text.find('\n', start);
    out += guard_command(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
  }
  return out;
}

std::string shell_quote(std::string_view s) {
  // Words made of these alone mean themselves to every POSIX shell (shlex.quote's set).
  bool plain = !s.empty();
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("@%+=:,./-_").find(c) != std::string_view::npos;
    plain = plain && ok;
  }
  if (plain) return std::string(s);
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string python_literal(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const std::size_t n = utf8_sequence(s, i, cp);
    if (n == 0) {
      out += hex("\\udc%02x", static_cast<unsigned char>(s[i]));
      ++i;
      continue;
    }
    if (cp == '\\') out += "\\\\";
    else if (cp == '"') out += "\\\"";
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (cp < 0x80 && acts_on_display(cp)) out += hex("\\x%02x", static_cast<unsigned>(cp));
    else if (acts_on_display(cp)) out += hex("\\u%04x", static_cast<unsigned>(cp));
    else out.append(s.substr(i, n));
    i += n;
  }
  return out + "\"";
}

}  // namespace batchcheck
