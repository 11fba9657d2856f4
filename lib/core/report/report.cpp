#include "core/report/report.h"

#include <algorithm>

namespace batchcheck {

const char* to_string(Severity s) {
  switch (s) {
    case Severity::Info: return "info";
    case Severity::Warning: return "warning";
    case Severity::Error: return "error";
  }
  return "info";
}

const char* to_string(FailOn f) {
  switch (f) {
    case FailOn::Info: return "info";
    case FailOn::Warning: return "warning";
    case FailOn::Error: return "error";
    case FailOn::Never: return "never";
  }
  return "error";
}

std::optional<FailOn> parse_fail_on(const std::string& s) {
  if (s == "info") return FailOn::Info;
  if (s == "warning") return FailOn::Warning;
  if (s == "error") return FailOn::Error;
  if (s == "never") return FailOn::Never;
  return std::nullopt;
}

bool fails(Severity s, FailOn level) {
  switch (level) {
    case FailOn::Never: return false;
    case FailOn::Info: return true;
    case FailOn::Warning: return s != Severity::Info;
    case FailOn::Error: return s == Severity::Error;
  }
  return false;
}

nlohmann::ordered_json to_json(const Fix& f) {
  nlohmann::ordered_json j = {{"id", f.id}, {"title", f.title}, {"code", f.code}, {"tradeoff", f.tradeoff}};
  if (!f.batch_sizes.empty()) j["batch_sizes"] = f.batch_sizes;
  if (!f.indices.empty()) j["indices"] = f.indices;
  return j;
}

nlohmann::ordered_json to_json(const Finding& f) {
  nlohmann::ordered_json j;
  j["id"] = f.id;
  j["severity"] = to_string(f.severity);
  j["rank"] = f.rank ? nlohmann::ordered_json(*f.rank) : nlohmann::ordered_json();
  if (!f.ranks.empty()) j["ranks"] = f.ranks;
  j["batch"] = f.batch ? nlohmann::ordered_json(*f.batch) : nlohmann::ordered_json();
  j["batches"] = f.batches;
  j["samples"] = f.samples;
  j["count"] = f.count;
  j["stage"] = f.stage;
  if (f.probe) j["probe"] = f.probe_size;
  j["message"] = f.message;
  j["evidence"] = f.evidence;
  j["cuda_equivalent"] = f.cuda_equivalent.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(f.cuda_equivalent);
  if (!f.root_cause.is_null()) j["root_cause"] = f.root_cause;
  j["fixes"] = nlohmann::ordered_json::array();
  for (const auto& fix : f.fixes) j["fixes"].push_back(to_json(fix));
  if (!f.occurrences.empty()) {
    nlohmann::ordered_json occ = nlohmann::ordered_json::array();
    for (const auto& o : f.occurrences) {
      occ.push_back({{"rank", o.rank ? nlohmann::ordered_json(*o.rank) : nlohmann::ordered_json()},
                     {"batch", o.batch ? nlohmann::ordered_json(*o.batch) : nlohmann::ordered_json()},
                     {"samples", o.samples},
                     {"count", o.count}});
      if (!o.files.is_null()) occ.back()["files"] = o.files;
      if (!o.message.empty()) occ.back()["message"] = o.message;
      if (!o.root_cause.is_null()) occ.back()["root_cause"] = o.root_cause;
    }
    j["occurrences"] = occ;
    j["occurrences_total"] = std::max<uint64_t>(f.occurrences_total, f.occurrences.size());
  }
  return j;
}

SeverityCounts count_severities(const std::vector<Finding>& findings) {
  SeverityCounts c;
  for (const auto& f : findings) {
    if (f.severity == Severity::Error) ++c.errors;
    if (f.severity == Severity::Warning) ++c.warnings;
    if (f.severity == Severity::Info) ++c.infos;
  }
  return c;
}

bool verdict_fails(const std::vector<Finding>& findings, FailOn level) {
  for (const auto& f : findings) {
    if (fails(f.severity, level)) return true;
  }
  return false;
}

}  // namespace batchcheck
