// Escaping untrusted text (core/base/escape.h): each form is checked against what its reader does
// with it — a POSIX shell and Python run the quoted text and must get the bytes back.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <filesystem>
#include <iterator>
#include <sys/wait.h>
#include <unistd.h>

#include "core/base/escape.h"

using namespace batchcheck;

namespace {

namespace fs = std::filesystem;

struct Dir {
  explicit Dir(const std::string& tag) : path(fs::temp_directory_path() / (tag + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  fs::path path;
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// sh -c COMMAND's exit status.
int sh(const std::string& command) {
  const int st = std::system(command.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Hostile names: command substitution, quotes of both kinds, backslashes, controls, a
// newline that starts a workflow command, terminal escapes, invalid UTF-8, bidi override.
const std::vector<std::string> kHostile = {
    "$(touch PWNED)x.png",
    "it's `touch PWNED` \"q\" \\n \\",
    "bad\n::stop-commands::tok\nz.png",
    "\x1b]0;title\x07\x1b[2J\x1b[31mred",
    "caf\xc3\xa9 \xff\xfe \xed\xa0\x80 \xc0\xaf",
    "\xe2\x80\xaegnp.exe",
    "tab\there\rcr\x7f\xc2\x85",
    "",
    "-n",
};

bool has_control(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return s.find("\xc2\x85") != std::string::npos || s.find("\xe2\x80\xae") != std::string::npos;
}

}  // namespace

TEST(Escape, TerminalTextIsOneLineWithEveryControlVisible) {
  EXPECT_EQ(terminal_text("a\nb\r\tc"), "a\\nb\\r\\tc");
  EXPECT_EQ(terminal_text("\x1b[2J"), "\\x1b[2J");
  EXPECT_EQ(terminal_text("\xe2\x80\xae" "abc"), "\\u{202E}abc");
  EXPECT_EQ(terminal_text("\xc2\x9b"), "\\u{9B}");  // C1 CSI
  EXPECT_EQ(terminal_text("\xff" "ok"), "\\xffok");
  EXPECT_EQ(terminal_text("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a UTF-16 surrogate, not UTF-8
  EXPECT_EQ(terminal_text("caf\xc3\xa9 \xe4\xb8\xad"), "caf\xc3\xa9 \xe4\xb8\xad");  // text stays text
  for (const auto& s : kHostile) {
    SCOPED_TRACE(s);
    EXPECT_FALSE(has_control(terminal_text(s))) << terminal_text(s);
  }
}

TEST(Escape, LogTextCannotStartAWorkflowCommand) {
  EXPECT_EQ(log_text("::stop-commands::tok"), "\\x3a:stop-commands::tok");
  EXPECT_EQ(log_text("  ::error::x"), "  \\x3a:error::x");
  EXPECT_EQ(log_text("a ::error::x"), "a ::error::x");  // not at the line's start: plain text
  EXPECT_EQ(log_lines("fix\n::add-mask::x\n  ok\x1b"), "fix\n\\x3a:add-mask::x\n  ok\\x1b");
  // The runner trims Unicode spaces too (.NET's TrimStart), and reads "##[cmd]" anywhere.
  EXPECT_EQ(log_text("\xc2\xa0::add-mask::x"), "\xc2\xa0\\x3a:add-mask::x");
  // A line of pieces: ":" then ": " makes the "::" no piece has.
  EXPECT_EQ(guard_log_line(log_text(":") + ": " + terminal_text("x")), "\\x3a: x");
  EXPECT_EQ(guard_log_line(" :: y"), " \\x3a: y");
  EXPECT_EQ(guard_log_line("a :: b"), "a :: b");
  EXPECT_EQ(log_text("\xe3\x80\x80 ::stop-commands::t"), "\xe3\x80\x80 \\x3a:stop-commands::t");
  EXPECT_EQ(terminal_text("boom ##[error]x ##[set-output name=a]b"), "boom #\\x23[error]x #\\x23[set-output name=a]b");
  EXPECT_EQ(terminal_text("# heading ## two #["), "# heading ## two #[");
}

TEST(Escape, ShellQuoteIsReadBackByAShellAsTheSameBytes) {
  EXPECT_EQ(shell_quote("plain/path-1.png"), "plain/path-1.png");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  Dir dir("batchcheck_escape_shell_");
  for (const auto& s : kHostile) {
    SCOPED_TRACE(s);
    // printf %s of the quoted word: the shell must hand over exactly the bytes, running nothing.
    EXPECT_EQ(sh("cd " + shell_quote(dir.path.string()) + " && printf %s " + shell_quote(s) + " > out"), 0);
    EXPECT_EQ(slurp(dir.file("out")), s);
    EXPECT_FALSE(fs::exists(dir.file("PWNED")));
  }
}

TEST(Escape, PythonLiteralEvaluatesToTheSameBytes) {
  EXPECT_EQ(python_literal("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
  EXPECT_EQ(python_literal("\xff"), "\"\\udcff\"");
  EXPECT_EQ(python_literal("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
  if (sh("command -v python3 >/dev/null") != 0) GTEST_SKIP() << "no python3 on PATH to evaluate the literals";
  Dir dir("batchcheck_escape_python_");
  for (const auto& s : kHostile) {
    SCOPED_TRACE(s);
    // The literal, encoded back with surrogateescape (how os.fsencode turns a name into bytes).
    std::ofstream(dir.file("p.py")) << "import sys\nsys.stdout.buffer.write(" << python_literal(s)
                                    << ".encode('utf-8', 'surrogateescape'))\n";
    EXPECT_EQ(sh("python3 " + dir.file("p.py") + " > " + dir.file("out")), 0);
    EXPECT_EQ(slurp(dir.file("out")), s);
  }
}

TEST(Escape, Utf8SequenceRefusesOverlongsSurrogatesAndPastTheLastCodePoint) {
  char32_t cp = 0;
  EXPECT_EQ(utf8_sequence("\xc0\xaf", 0, cp), 0u);          // overlong '/'
  EXPECT_EQ(utf8_sequence("\xe0\x80\xaf", 0, cp), 0u);      // overlong, 3 bytes
  EXPECT_EQ(utf8_sequence("\xed\xa0\x80", 0, cp), 0u);      // U+D800
  EXPECT_EQ(utf8_sequence("\xf4\x90\x80\x80", 0, cp), 0u);  // U+110000
  EXPECT_EQ(utf8_sequence("\xef\xbf\xbe", 0, cp), 3u);      // U+FFFE is UTF-8 (XML refuses it: views)
  EXPECT_EQ(cp, 0xFFFEu);
  EXPECT_EQ(utf8_sequence("\xf0\x9f\x98\x80", 0, cp), 4u);
  EXPECT_EQ(cp, 0x1F600u);
  EXPECT_EQ(utf8_sequence("\xe2\x82", 0, cp), 0u);  // cut short
}
