#include "core/views/view_text.h"

#include <algorithm>

#include "core/base/escape.h"

namespace batchcheck {

int severity_rank(const std::string& s) { return s == "error" ? 2 : s == "warning" ? 1 : s == "info" ? 0 : -1; }

int fail_rank(const nlohmann::ordered_json& report) {
  const std::string f = report.value("fail_on", std::string("error"));
  return f == "never" ? 3 : std::max(0, severity_rank(f));
}

std::string scan_name(const nlohmann::ordered_json& report) {
  if (report.is_object() && report.contains("source") && report["source"].is_string()) return field_text(report, "source");
  return field_text(report, "config");
}

std::string field_text(const nlohmann::ordered_json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

std::string json_text(const nlohmann::ordered_json& v, int indent) {
  return v.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string utf8_clean(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const std::size_t n = utf8_sequence(s, i, cp);
    if (n > 0) {
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
  const std::string s = utf8_clean(raw);
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const std::size_t n = utf8_sequence(s, i, cp);  // never 0: the text is clean
    switch (cp) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0's Char: no control characters but tab, newline and carriage return, and
        // not the non-characters U+FFFE and U+FFFF (a parser refuses the whole document).
        if (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') out += '?';
        else if (cp == 0xFFFE || cp == 0xFFFF) out += "\xEF\xBF\xBD";
        else out.append(s, i, n);
    }
    i += n;
  }
  return out;
}

std::string where_text(const nlohmann::ordered_json& f) {
  std::string w;
  if (f.contains("probe")) w = "probe batch of " + json_text(f["probe"]);
  else if (f.contains("batch") && f["batch"].is_number()) w = "batch " + json_text(f["batch"]);
  if (f.contains("rank") && f["rank"].is_number() && !f.contains("probe")) {
    w = w.empty() ? "rank " + json_text(f["rank"]) : w + " (rank " + json_text(f["rank"]) + ")";
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
    s += (s.empty() ? "" : ", ") + json_text(v);
  }
  return s;
}

}  // namespace batchcheck
