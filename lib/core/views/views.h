#pragma once
// Report views for where CI and people look: JUnit XML, a markdown summary (GitHub's step
// summary, a merge request comment), GitHub Actions workflow commands. Pure functions of the
// JSON report, the source of truth: `scan` and `render` print the same views of one report.
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace batchcheck {

// A testsuite per rank checked (one when world_size is 1), a testcase per finding id of the
// catalog (classname "batchcheck.<stage>", name the id). A finding at or above the report's
// fail_on is a <failure> (message: its one-line summary; body: batches, samples, fixes); one
// below it passes with its text in <system-out>.
std::string junit_view(const nlohmann::ordered_json& report);

// The verdict, counts and a table of findings, then each finding's fixes; cut to stay within
// `max_bytes` (GitHub's step summary takes 1 MiB), saying how many findings were left out.
std::string markdown_view(const nlohmann::ordered_json& report, std::size_t max_bytes = 1000 * 1000);

// GitHub Actions workflow commands (::error / ::warning / ::notice), pointing at the config
// file, at most 10 per severity as GitHub shows them; a notice counts the rest.
std::vector<std::string> github_commands(const nlohmann::ordered_json& report);

// Throws InputError unless `report` is a batchcheck report (for `render`).
void require_report(const nlohmann::ordered_json& report, const std::string& file);

}  // namespace batchcheck
