// core/base/log: the text line and the JSON line of each record, the level, the log file held
// until the run's inputs are known, and the engine child's records relayed with their source.
#include "core/base/log.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/errors.h"

using namespace batchcheck;
using Json = nlohmann::json;

namespace {

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("bc-log-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto p = dir / name;
  std::filesystem::remove(p);
  return p.string();
}

std::vector<Json> json_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<Json> out;
  for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line));
  return out;
}

}  // namespace

TEST(Log, LevelsByName) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::debug);
  EXPECT_EQ(parse_log_level("info"), LogLevel::info);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::warn);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::warn);
  EXPECT_EQ(parse_log_level("error"), LogLevel::error);
  EXPECT_EQ(parse_log_level("off"), std::nullopt);  // an error line always shows
  EXPECT_EQ(parse_log_level("DEBUG"), std::nullopt);
  EXPECT_STREQ(log_level_name(LogLevel::warn), "warn");
  EXPECT_STREQ(log_source_name(LogSource::model), "model");
}

TEST(Log, TextLinesKeepTodaysWordsAndAreEscaped) {
  EXPECT_EQ(log_text_line(LogLevel::error, LogSource::batchcheck, "cfg.json: model.path: no such file"),
            "batchcheck: error: cfg.json: model.path: no such file");
  EXPECT_EQ(log_text_line(LogLevel::warn, LogSource::batchcheck, "it\nwas\tso"), "batchcheck: warning: it was so");
  EXPECT_EQ(log_text_line(LogLevel::warn, LogSource::model, "bad \x1b[31mred"), "batchcheck: warning from the model: bad \\x1b[31mred");
  EXPECT_EQ(log_text_line(LogLevel::warn, LogSource::engine, "x"), "batchcheck: warning: x");
  // info and debug lines are said as they are, line breaks kept, each line guarded for a CI log.
  EXPECT_EQ(log_text_line(LogLevel::debug, LogSource::batchcheck, "rank 0 batch 3 (32 samples): ok"), "rank 0 batch 3 (32 samples): ok");
  EXPECT_EQ(log_text_line(LogLevel::info, LogSource::model, "a\n::error::b\n"), "a\n\\x3a:error::b");
  EXPECT_EQ(log_text_line(LogLevel::info, LogSource::engine, "\xff\r"), "\\xff\\r");
}

TEST(Log, JsonLineHasTimeLevelSourceMessage) {
  EXPECT_EQ(log_json_line("2026-12-04T10:00:00.000Z", LogLevel::warn, LogSource::model, "a \"b\"\n\x1b"),
            R"({"time":"2026-12-04T10:00:00.000Z","level":"warn","source":"model","message":"a \"b\"\n\u001b"})");
  // Bytes that are not UTF-8 are replaced: the line stays valid JSON.
  const Json j = Json::parse(log_json_line("t", LogLevel::info, LogSource::engine, "caf\xe9"));
  EXPECT_EQ(j["message"], "caf\xef\xbf\xbd");
}

TEST(Log, TheLevelDecidesWhatIsWritten) {
  std::ostringstream text;
  {
    LogScope scope(text);
    EXPECT_FALSE(log_enabled(LogLevel::debug));
    EXPECT_TRUE(log_enabled(LogLevel::info));
    log_debug("hidden");
    log_info("shown");
    set_log_level(LogLevel::warn);
    log_info("hidden too");
    log_warn("careful");
    log_error("broken");
    set_log_level(LogLevel::error);
    log_warn("hidden as well");
    log_error("still said");
    set_log_level(LogLevel::debug);
    EXPECT_TRUE(log_enabled(LogLevel::debug));
    log_debug("now said");
  }
  EXPECT_EQ(text.str(), "shown\nbatchcheck: warning: careful\nbatchcheck: error: broken\nbatchcheck: error: still said\nnow said\n");
  // The scope's end gives the previous destination back: nothing more reaches `text`.
  log_info("after the scope");
  EXPECT_EQ(text.str().find("after"), std::string::npos);
}

TEST(Log, TheFileIsWrittenOnceTheInputsAreKnown) {
  const std::string path = temp_path("run.jsonl");
  std::ostringstream text;
  {
    LogScope scope(text);
    set_log_level(LogLevel::debug);
    set_log_file(path);
    log_debug("before the check");
    EXPECT_FALSE(std::filesystem::exists(path)) << "written before the run knew its inputs";
    open_log_file();
    log(LogLevel::warn, LogSource::model, "after it");
  }
  const auto lines = json_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["level"], "debug");
  EXPECT_EQ(lines[0]["source"], "batchcheck");
  EXPECT_EQ(lines[0]["message"], "before the check");
  EXPECT_EQ(lines[1]["source"], "model");
  EXPECT_EQ(lines[1]["message"], "after it");
  EXPECT_EQ(lines[1]["time"].get<std::string>().size(), std::string("2026-12-04T10:00:00.000Z").size());
  // A second run appends.
  {
    LogScope scope(text);
    set_log_file(path);
    open_log_file();
    log_error("second run");
  }
  EXPECT_EQ(json_lines(path).size(), 3u);
}

TEST(Log, ARunThatStoppedEarlyWritesOnlyANewFile) {
  const std::string fresh = temp_path("early.jsonl"), existing = temp_path("someone-elses.txt");
  { std::ofstream(existing) << "not ours\n"; }
  std::ostringstream text;
  for (const std::string& path : {fresh, existing}) {
    LogScope scope(text);
    set_log_file(path);
    log_error("cfg.json: not JSON");  // the run ends before open_log_file()
  }
  ASSERT_EQ(json_lines(fresh).size(), 1u);
  EXPECT_EQ(json_lines(fresh)[0]["level"], "error");
  std::ifstream in(existing);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "not ours\n");
}

TEST(Log, AFileThatCannotBeOpenedIsAnInputError) {
  std::ostringstream text;
  LogScope scope(text);
  set_log_file("/proc/batchcheck-no/such.jsonl");
  try {
    open_log_file();
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "/proc/batchcheck-no/such.jsonl");
    EXPECT_EQ(e.where(), "--log-file");
    EXPECT_EQ(e.detail().rfind("cannot write the log: ", 0), 0u) << e.detail();
  }
  set_log_file("");
}

TEST(Log, TheEngineChildsRecordsKeepTheirLevelAndSource) {
  // What log_to_parent() writes on fd 2, read back through a pipe.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const int saved = ::dup(2);
  std::ostringstream text;
  {
    LogScope scope(text);
    ::dup2(p[1], 2);
    log_to_parent(LogLevel::info);
    ::dup2(saved, 2);  // the sink holds its own copy of fd 2
    log_debug("below the child's level");
    log(LogLevel::warn, LogSource::model, "from the model");
    log_info("rank 0 batch 0 (2 samples): ok");
  }
  ::close(saved);
  ::close(p[1]);
  std::string wire;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) wire.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  std::vector<std::string> lines;
  for (std::size_t start = 0, nl; (nl = wire.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(wire.substr(start, nl - start));
  }
  ASSERT_EQ(lines.size(), 2u) << wire;
  EXPECT_EQ(lines[0][0], '\x1e');
  EXPECT_TRUE(text.str().empty()) << "the child's lines are the parent's to write";

  // The supervisor's side: the records, a line LibTorch printed, and a record that is not one.
  const std::string path = temp_path("relay.jsonl");
  std::ostringstream parent;
  {
    LogScope scope(parent);
    set_log_file(path);
    open_log_file();
    for (const auto& l : lines) relay_child_line(l);
    relay_child_line("[W something.cpp:12] LibTorch's own \x1b]0;line");
    relay_child_line("\x1e{\"level\":\"loud\",\"source\":\"model\",\"message\":\"x\"}");
    relay_child_line("\x1e{\"level\":\"debug\",\"source\":\"model\",\"message\":\"below the parent's level\"}");
  }
  EXPECT_EQ(parent.str(),
            "batchcheck: warning from the model: from the model\n"
            "rank 0 batch 0 (2 samples): ok\n"
            "[W something.cpp:12] LibTorch's own \\x1b]0;line\n"
            "\\x1e{\"level\":\"loud\",\"source\":\"model\",\"message\":\"x\"}\n");
  const auto records = json_lines(path);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0]["source"], "model");
  EXPECT_EQ(records[0]["level"], "warn");
  EXPECT_EQ(records[1]["source"], "engine");  // the child's own lines are the engine's
  EXPECT_EQ(records[1]["level"], "info");
  EXPECT_EQ(records[2]["source"], "engine");
  EXPECT_EQ(records[2]["message"], "[W something.cpp:12] LibTorch's own \x1b]0;line");
  EXPECT_EQ(records[3]["level"], "info");  // not a record: a line like any other
}
