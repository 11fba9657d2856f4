#pragma once
// Escaping untrusted text for the place it goes. Every string that came from a model (its
// error text, its recorded stack), a data file, a file name or the environment may hold
// anything: terminal escapes, line breaks that start a CI log command, shell or Python syntax.
// Each function here makes such a string inert in one place; the views and the summary call
// them at the point where the text is written.
#include <string>
#include <string_view>

namespace batchcheck {

// One line, safe for a terminal and a CI log parser: every control character (C0 including
// CR, LF and TAB, DEL, C1), the bidirectional overrides and isolates, and each byte that is not
// valid UTF-8 become visible escapes (\n, \r, \t, \x1b, \xNN, \u{202E}), and "##[" (a command to
// GitHub's runner wherever it stands) becomes "#\x23["; everything else is kept.
std::string terminal_text(std::string_view s);

// The same, but a line break is kept as a line break (an indented continuation of a
// multi-line fix); CR and every other control character are escaped.
std::string terminal_lines(std::string_view s);

// terminal_text for text that starts a line of a log a CI runner reads: also a leading "::"
// (after spaces, Unicode ones included, which GitHub's runner trims) is made "\x3a:", so the line cannot be read as a
// workflow command (::stop-commands::, ::add-mask::, ::error::).
std::string log_text(std::string_view s);

// terminal_lines with each line guarded as log_text guards one.
std::string log_lines(std::string_view s);

// A log line put together from pieces already made visible (terminal_text), guarded as
// log_text guards one: "x" + ": " + "y" may begin with "::" where no piece does (x = ":").
std::string guard_log_line(std::string line);

// A POSIX shell word that stands for exactly `s`: 'it'\''s' (single quotes; nothing inside
// is expanded by sh, bash, zsh or dash).
std::string shell_quote(std::string_view s);

// A Python string literal that evaluates to exactly `s` (double quotes; backslash, quote and
// every non-printable character escaped; bytes that are not valid UTF-8 as \udcXX, the
// surrogateescape form os.fsdecode gives a file name).
std::string python_literal(std::string_view s);

// The length of the valid UTF-8 sequence at s[i] (1-4), or 0 where s[i] starts none
// (overlong forms, surrogates and code points past U+10FFFF are not valid). `cp` gets it.
std::size_t utf8_sequence(std::string_view s, std::size_t i, char32_t& cp);

}  // namespace batchcheck
