#pragma once
// Text helpers shared by the report views (core/views/views.cpp, core/views/html_view.cpp): reading a
// report's fields defensively (a saved report may be old or hand-edited) and escaping.
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace batchcheck {

// "error" 2, "warning" 1, "info" 0, anything else -1.
int severity_rank(const std::string& s);
// The lowest severity rank that fails the report's gate; "never": 3.
int fail_rank(const nlohmann::ordered_json& report);
// `j[key]` when it is a string, else "".
std::string field_text(const nlohmann::ordered_json& j, const char* key);
// What a report is of: its "source" (batchcheck.scan()'s "Net on your DataLoader"), else its
// config's path.
std::string scan_name(const nlohmann::ordered_json& report);
// `v` as compact JSON (`indent` as dump's); bytes that are not UTF-8 in its strings become
// U+FFFD instead of the exception dump() throws (a report built in-process may hold them).
std::string json_text(const nlohmann::ordered_json& v, int indent = -1);
// Valid UTF-8, each byte that starts no valid sequence (stray, truncated, overlong,
// surrogate, past U+10FFFF) as U+FFFD: a model's error text or a file name may hold anything.
std::string utf8_clean(const std::string& s);
// Escaped for XML and HTML text and attributes; the characters XML 1.0 forbids become '?'
// (control characters but tab, newline and carriage return) or U+FFFD (U+FFFE, U+FFFF).
std::string xml_escape(const std::string& raw);
// "batch 130 (rank 0)", "probe batch of 1", "-".
std::string where_text(const nlohmann::ordered_json& finding);
// The finding's first `most` samples, "1040, 7, ..." ("-" for none).
std::string samples_text(const nlohmann::ordered_json& finding, std::size_t most);

}  // namespace batchcheck
