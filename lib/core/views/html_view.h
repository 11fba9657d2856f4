#pragma once
// The HTML report: one self-contained page (inline CSS and SVG, a few lines of script for
// the copy buttons; nothing fetched, so it works from file:// and as a CI artifact). Verdict
// and counts, the batch strip, the per-batch plots, then each finding with its samples, root
// cause, CUDA equivalent and fixes. A pure function of the JSON report, bounded in size: a
// report of a million batches stays a few hundred kilobytes.
#include <string>

#include <nlohmann/json.hpp>

namespace batchcheck {

std::string html_view(const nlohmann::ordered_json& report);

}  // namespace batchcheck
