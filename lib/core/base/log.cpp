// The diagnostics facade over spdlog: one spdlog logger per source, sharing the run's sinks (the
// text lines, the JSON file, or the pipe to the supervisor). spdlog stays in this translation
// unit; the rest of the code sees log.h.
#include "core/base/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <ctime>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

#include "core/base/errors.h"
#include "core/base/escape.h"
#include "core/base/files.h"
#include "core/base/text.h"

namespace batchcheck {

namespace {

constexpr char kRecordMark = '\x1e';  // starts a record the engine child sends (ASCII record separator)
constexpr LogSource kSources[] = {LogSource::batchcheck, LogSource::engine, LogSource::model};

spdlog::level::level_enum to_spdlog(LogLevel l) {
  switch (l) {
    case LogLevel::debug: return spdlog::level::debug;
    case LogLevel::info: return spdlog::level::info;
    case LogLevel::warn: return spdlog::level::warn;
    case LogLevel::error: return spdlog::level::err;
  }
  return spdlog::level::info;
}

LogLevel from_spdlog(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
    case spdlog::level::debug: return LogLevel::debug;
    case spdlog::level::info: return LogLevel::info;
    case spdlog::level::warn: return LogLevel::warn;
    default: return LogLevel::error;
  }
}

// The logger's name is the source.
LogSource source_of(spdlog::string_view_t name) {
  const std::string_view n(name.data(), name.size());
  for (LogSource s : kSources) {
    if (n == log_source_name(s)) return s;
  }
  return LogSource::batchcheck;
}

std::string_view payload(const spdlog::details::log_msg& msg) { return {msg.payload.data(), msg.payload.size()}; }

std::string utc_time(spdlog::log_clock::time_point t) {
  const auto since = t.time_since_epoch();
  const std::time_t secs = std::chrono::duration_cast<std::chrono::seconds>(since).count();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[40];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

// The human lines, on the stream the CLI was given (std::cerr, or a test's).
class TextSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit TextSink(std::ostream& os) : os_(os) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    os_ << log_text_line(from_spdlog(msg.level), source_of(msg.logger_name), payload(msg)) << '\n' << std::flush;
  }
  void flush_() override { os_.flush(); }

 private:
  std::ostream& os_;
};

// --log-file: JSON lines, appended, one write() each (lines of several processes appending to
// one file stay whole). Held in memory until the run knows its inputs (open()). A write that
// fails (a full disk) is said once on stderr, and the log stops there: the scan goes on.
class JsonFileSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  JsonFileSink(std::string path, std::ostream* text) : path_(std::move(path)), text_(text) {}
  ~JsonFileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }
  JsonFileSink(const JsonFileSink&) = delete;
  JsonFileSink& operator=(const JsonFileSink&) = delete;

  void open(bool only_if_new) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fd_ >= 0 || failed_) return;
    const int flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | (only_if_new ? O_EXCL : 0);
    fd_ = ::open(path_.c_str(), flags, 0644);
    if (fd_ < 0) {
      const int err = errno;
      if (only_if_new) return;
      throw InputError(path_, "--log-file", std::string("cannot write the log: ") + std::strerror(err));
    }
    for (const auto& line : held_) write_line(line);
    held_.clear();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::string line = log_json_line(utc_time(msg.time), from_spdlog(msg.level), source_of(msg.logger_name), payload(msg));
    line += '\n';
    if (fd_ >= 0) {
      write_line(line);
    } else if (!failed_) {
      held_.push_back(std::move(line));
    }
  }
  void flush_() override {}

 private:
  void write_line(const std::string& line) {
    if (failed_) return;
    if (const int err = write_all(fd_, line)) {
      failed_ = true;
      if (text_) {
        *text_ << log_text_line(LogLevel::warn, LogSource::batchcheck,
                                path_ + ": --log-file: cannot write the log: " + std::strerror(err) +
                                    "; it stops here, the scan goes on")
               << '\n' << std::flush;
      }
    }
  }

  std::string path_;
  std::ostream* text_;
  int fd_ = -1;
  bool failed_ = false;
  std::vector<std::string> held_;
};

// The engine child's records, to the supervisor on its stderr: one write() a line, so that
// lines from several threads never mix. A copy of fd 2 taken at the start, so that a step that
// silences stderr for a while (pt2_runner's QuietStderr) silences LibTorch's lines, not ours.
class ParentSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  ParentSink() : fd_(::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3)) {}
  ~ParentSink() override {
    if (fd_ >= 0) ::close(fd_);
  }
  ParentSink(const ParentSink&) = delete;
  ParentSink& operator=(const ParentSink&) = delete;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string line = kRecordMark +
                             log_json_line(utc_time(msg.time), from_spdlog(msg.level), source_of(msg.logger_name), payload(msg)) +
                             '\n';
    write_all(fd_ >= 0 ? fd_ : STDERR_FILENO, line);  // a failure: the supervisor is gone, nobody to tell
  }
  void flush_() override {}

 private:
  int fd_;
};

// What the loggers write to now. Replaced whole (never changed in place), so that a relay
// thread holding the old one finishes its line safely.
struct LogState {
  LogLevel level = LogLevel::info;
  std::vector<spdlog::sink_ptr> sinks;
  std::shared_ptr<JsonFileSink> file;
  std::shared_ptr<spdlog::logger> loggers[3];
};

std::shared_ptr<LogState> make_state(LogLevel level, std::vector<spdlog::sink_ptr> sinks, std::shared_ptr<JsonFileSink> file) {
  auto s = std::make_shared<LogState>();
  s->level = level;
  s->sinks = std::move(sinks);
  s->file = std::move(file);
  if (s->file) s->sinks.push_back(s->file);
  for (LogSource src : kSources) {
    auto lg = std::make_shared<spdlog::logger>(log_source_name(src), s->sinks.begin(), s->sinks.end());
    lg->set_level(to_spdlog(level));
    lg->flush_on(spdlog::level::trace);  // every line at once: it interleaves with the summary and the progress line
    s->loggers[static_cast<int>(src)] = std::move(lg);
  }
  return s;
}

std::shared_ptr<LogState> default_state() {
  static const std::shared_ptr<LogState> s = make_state(LogLevel::info, {std::make_shared<TextSink>(std::cerr)}, nullptr);
  return s;
}

std::shared_ptr<LogState> g_state;         // null: default_state()
std::atomic<int> g_level{static_cast<int>(LogLevel::info)};
std::ostream* g_text = nullptr;            // the scope's text stream
std::mutex g_seen_mutex;
std::set<std::string> g_seen_model_warnings;  // relayed this run (relay_child_line)
// The enclosing scopes' states and text streams.
std::vector<std::pair<std::shared_ptr<LogState>, std::ostream*>> g_saved;

std::shared_ptr<LogState> current() {
  auto s = std::atomic_load(&g_state);
  return s ? s : default_state();
}

void install(std::shared_ptr<LogState> s) {
  g_level = static_cast<int>(s ? s->level : LogLevel::info);
  std::atomic_store(&g_state, std::move(s));
}

// The scope's sinks again, at `level`, with `file`.
void rebuild(LogLevel level, std::shared_ptr<JsonFileSink> file) {
  std::vector<spdlog::sink_ptr> sinks;
  if (g_text) sinks.push_back(std::make_shared<TextSink>(*g_text));
  install(make_state(level, std::move(sinks), std::move(file)));
}

}  // namespace

std::optional<LogLevel> parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::debug;
  if (name == "info") return LogLevel::info;
  if (name == "warn" || name == "warning") return LogLevel::warn;
  if (name == "error") return LogLevel::error;
  return std::nullopt;
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warn: return "warn";
    case LogLevel::error: return "error";
  }
  return "info";
}

const char* log_source_name(LogSource source) {
  switch (source) {
    case LogSource::batchcheck: return "batchcheck";
    case LogSource::engine: return "engine";
    case LogSource::model: return "model";
  }
  return "batchcheck";
}

LogScope::LogScope(std::ostream& text) {
  {
    std::lock_guard<std::mutex> lock(g_seen_mutex);
    g_seen_model_warnings.clear();
  }
  g_saved.emplace_back(std::atomic_load(&g_state), g_text);
  g_text = &text;
  rebuild(LogLevel::info, nullptr);
}

LogScope::~LogScope() {
  auto s = current();
  // A run that stopped before its inputs were known (a bad config) writes its log only where
  // no file is yet: it cannot tell whether that file is one of them.
  if (s->file) {
    try {
      s->file->open(true);
    } catch (const InputError&) {
    }
  }
  s.reset();
  install(g_saved.back().first);
  g_text = g_saved.back().second;
  g_saved.pop_back();
}

void set_log_level(LogLevel level) { rebuild(level, current()->file); }

void set_log_file(const std::string& path) {
  rebuild(current()->level, path.empty() ? nullptr : std::make_shared<JsonFileSink>(path, g_text));
}

void drop_log_file() {
  if (current()->file) rebuild(current()->level, nullptr);
}

void open_log_file() {
  if (auto f = current()->file) f->open(false);
}

void log_to_parent(LogLevel level) { install(make_state(level, {std::make_shared<ParentSink>()}, nullptr)); }

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed); }

void log(LogLevel level, LogSource source, std::string_view message) {
  if (!log_enabled(level)) return;
  const auto s = current();
  s->loggers[static_cast<int>(source)]->log(to_spdlog(level), spdlog::string_view_t(message.data(), message.size()));
}

void relay_child_line(std::string_view line) {
  if (!line.empty() && line.front() == kRecordMark) {
    const auto j = nlohmann::json::parse(line.substr(1), nullptr, false);
    if (j.is_object() && j.contains("level") && j["level"].is_string() && j.contains("source") && j["source"].is_string() &&
        j.contains("message") && j["message"].is_string()) {
      const auto level = parse_log_level(j["level"].get<std::string>());
      const std::string source = j["source"].get<std::string>();
      if (level) {
        const std::string message = j["message"].get<std::string>();
        // A model's warning once a run, however many engine children (--jobs, a resume) saw it.
        if (source == "model" && *level == LogLevel::warn) {
          std::lock_guard<std::mutex> lock(g_seen_mutex);
          if (!g_seen_model_warnings.insert(message).second) return;
        }
        log(*level, source == "model" ? LogSource::model : LogSource::engine, message);
        return;
      }
    }
  }
  log(LogLevel::info, LogSource::engine, line);
}

std::string log_text_line(LogLevel level, LogSource source, std::string_view message) {
  switch (level) {
    case LogLevel::error: return "batchcheck: error: " + terminal_text(single_line(message));
    case LogLevel::warn:
      return std::string(source == LogSource::model ? "batchcheck: warning from the model: " : "batchcheck: warning: ") +
             terminal_text(single_line(message));
    default: {
      std::string text = log_lines(message);
      while (!text.empty() && text.back() == '\n') text.pop_back();
      return text;
    }
  }
}

std::string log_json_line(const std::string& time, LogLevel level, LogSource source, std::string_view message) {
  nlohmann::ordered_json j{{"time", time}, {"level", log_level_name(level)}, {"source", log_source_name(source)},
                           {"message", std::string(message)}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace batchcheck
