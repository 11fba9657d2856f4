#pragma once
// `batchcheck scan` as a library call. In one process (tests): config, backend, replay,
// report. As the supervisor's engine child: the replay only, its events on a pipe.
#include <ostream>
#include <string>

#include "core/command/scan_setup.h"

namespace batchcheck {

// Throws InputError for unusable input (exit 2); a report is written in every other case.
ScanOutcome scan_command(const ScanCommand& cmd, std::ostream& out, std::ostream& err);

// The engine child's work: decodes the request, replays, and writes the journal to
// `event_fd`; an InputError becomes the journal's error line. Other exceptions escape.
void engine_child(const std::string& request, int event_fd, std::ostream& err);

}  // namespace batchcheck
