#pragma once
// Small string helpers shared by the core modules.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace batchcheck {

// Levenshtein edit distance (used for "did you mean").
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if it is close enough to be a plausible typo.
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);

// `; did you mean "x"?` or "" when nothing is close.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// Folds newlines and trims, so a message stays one line.
std::string single_line(std::string_view s);

// The characters (UTF-8 code points) of s: the unit of the limits the docs state.
std::size_t utf8_length(std::string_view s);

// A value echoed in an error line: one line, at most `max_chars` characters, cut with "..."
// (a 7 MiB value is named, not repeated).
std::string excerpt(std::string_view s, std::size_t max_chars = 40);

// Whether `name` is a Python keyword (a dotted name of identifiers must hold none to be code).
bool python_keyword(std::string_view name);

// "a, b, c"
std::string join(const std::vector<std::string>& items, std::string_view sep = ", ");
std::string join_ints(const std::vector<int64_t>& items, std::string_view sep = ", ");
std::string join_uints(const std::vector<uint64_t>& items, std::string_view sep = ", ");

// Strict parse of a decimal unsigned 64-bit integer: digits only, no sign, no overflow.
std::optional<uint64_t> parse_u64(std::string_view s);

// Shortest faithful text for a double: "1", "0.5", "1e+30", "nan", "inf".
std::string format_number(double v);

// "1 sample" / "3 samples"
std::string plural(uint64_t n, std::string_view singular, std::string_view plural_form = {});

// "3 NaNs and 1 Inf" (sep between the two; a zero count is left out).
std::string nonfinite_text(uint64_t nan, uint64_t inf, std::string_view sep = " and ");

}  // namespace batchcheck
