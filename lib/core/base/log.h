#pragma once
// The diagnostics of a run (spdlog behind this facade): a line on stderr for people, each
// escaped as it is written, and with --log-file a JSON line for machines (time, level, source,
// message). Sources: "batchcheck" (this process), "engine" (the engine child, relayed by the
// supervisor, its own lines and whatever LibTorch or the model printed), "model" (the model's
// warnings and TorchScript print()s). The report and the summary are not diagnostics: they
// keep their streams.
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace batchcheck {

enum class LogLevel { debug, info, warn, error };  // error lines always show
enum class LogSource { batchcheck, engine, model };

// "debug", "info", "warn" (or "warning"), "error"; nullopt for anything else.
std::optional<LogLevel> parse_log_level(std::string_view name);
const char* log_level_name(LogLevel level);
const char* log_source_name(LogSource source);

// Where the diagnostics go while it lives: the human lines on `text` (stderr), at info and
// above until set_log_level(); the previous destination comes back after it. One at a time (the
// CLI's run, a test). Without one, lines at info and above go to std::cerr.
class LogScope {
 public:
  explicit LogScope(std::ostream& text);
  ~LogScope();
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;
};

void set_log_level(LogLevel level);

// --log-file: JSON lines appended to `path`, held in memory until open_log_file() (called once
// the run's inputs are known, so that none is written over). A run that ends before writes its
// held lines only where no file exists yet.
void set_log_file(const std::string& path);

// Opens the log file and writes what was held. Throws InputError where it cannot be opened.
void open_log_file();
// The run refused its log file (another output's, or an input's): nothing is written there.
void drop_log_file();

// The engine child: every record at `level` and above goes to the supervisor on fd 2 as one
// line ("\x1e" and its JSON), for relay_child_line() to log with its level and source.
void log_to_parent(LogLevel level);

// Whether a record at `level` would be written anywhere: a line nobody reads is not built.
bool log_enabled(LogLevel level);

// One record. `message` is raw: the text line escapes it (terminal_text), the JSON line
// encodes it. A multi-line message is one record; on stderr each line is escaped and kept.
void log(LogLevel level, LogSource source, std::string_view message);
inline void log_debug(std::string_view message) { log(LogLevel::debug, LogSource::batchcheck, message); }
inline void log_info(std::string_view message) { log(LogLevel::info, LogSource::batchcheck, message); }
inline void log_warn(std::string_view message) { log(LogLevel::warn, LogSource::batchcheck, message); }
inline void log_error(std::string_view message) { log(LogLevel::error, LogSource::batchcheck, message); }

// The supervisor: one line the engine child wrote on its stderr. A record log_to_parent() sent
// is logged with its level and source ("batchcheck" there is "engine" here; the model's
// warning once a run, whichever child saw it); anything else (LibTorch's own lines, a print())
// is the engine's, at info.
void relay_child_line(std::string_view line);

// The human line of a record, as the text sink writes it (without its newline):
// "batchcheck: warning: ...", "batchcheck: warning from the model: ...", "batchcheck: error: ...";
// info and debug lines as they are. Escaped.
std::string log_text_line(LogLevel level, LogSource source, std::string_view message);

// The JSON line of a record (without its newline): {"time", "level", "source", "message"};
// time in UTC with milliseconds; bytes that are not UTF-8 replaced.
std::string log_json_line(const std::string& time, LogLevel level, LogSource source, std::string_view message);

}  // namespace batchcheck
