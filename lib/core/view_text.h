#pragma once
// Text helpers shared by the report views (core/views.cpp, core/html_view.cpp): reading a
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
// Valid UTF-8, bad bytes as U+FFFD: a model's error text or a file name may hold anything.
std::string utf8_clean(const std::string& s);
// Escaped for XML and HTML text and attributes; control characters XML refuses become '?'.
std::string xml_escape(const std::string& raw);
// "batch 130 (rank 0)", "probe batch of 1", "-".
std::string where_text(const nlohmann::ordered_json& finding);
// The finding's first `most` samples, "1040, 7, ..." ("-" for none).
std::string samples_text(const nlohmann::ordered_json& finding, std::size_t most);

}  // namespace batchcheck
