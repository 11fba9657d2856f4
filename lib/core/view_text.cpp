#include "core/view_text.h"

#include <algorithm>

namespace batchcheck {

int severity_rank(const std::string& s) { return s == "error" ? 2 : s == "warning" ? 1 : s == "info" ? 0 : -1; }

int fail_rank(const nlohmann::ordered_json& report) {
  const std::string f = report.value("fail_on", std::string("error"));
  return f == "never" ? 3 : std::max(0, severity_rank(f));
}

std::string field_text(const nlohmann::ordered_json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

std::string utf8_clean(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string xml_escape(const std::string& raw) {
  std::string out;
  for (char ch : utf8_clean(raw)) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters but tab, newline and carriage return.
        if (c < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') out += '?';
        else out += ch;
    }
  }
  return out;
}

std::string where_text(const nlohmann::ordered_json& f) {
  std::string w;
  if (f.contains("probe")) w = "probe batch of " + f["probe"].dump();
  else if (f.contains("batch") && f["batch"].is_number()) w = "batch " + f["batch"].dump();
  if (f.contains("rank") && f["rank"].is_number() && !f.contains("probe")) {
    w = w.empty() ? "rank " + f["rank"].dump() : w + " (rank " + f["rank"].dump() + ")";
  }
  return w.empty() ? "-" : w;
}

std::string samples_text(const nlohmann::ordered_json& f, std::size_t most) {
  if (!f.contains("samples") || !f["samples"].is_array() || f["samples"].empty()) return "-";
  std::string s;
  std::size_t k = 0;
  for (const auto& v : f["samples"]) {
    if (k++ == most) {
      s += ", ...";
      break;
    }
    s += (s.empty() ? "" : ", ") + v.dump();
  }
  return s;
}

}  // namespace batchcheck
