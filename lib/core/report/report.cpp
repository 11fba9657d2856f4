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
  if (!f.verified.empty()) j["verified"] = f.verified;
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

namespace {
std::optional<uint64_t> optional_uint(const nlohmann::ordered_json& j, const char* key) {
  return j.contains(key) && !j[key].is_null() ? std::optional<uint64_t>(j[key].get<uint64_t>()) : std::nullopt;
}
}  // namespace

Finding finding_from_json(const nlohmann::ordered_json& j) {
  Finding f;
  f.id = j.at("id").get<std::string>();
  const std::string severity = j.at("severity").get<std::string>();
  f.severity = severity == "error" ? Severity::Error : severity == "warning" ? Severity::Warning : Severity::Info;
  f.rank = optional_uint(j, "rank");
  f.ranks = j.value("ranks", std::vector<uint64_t>{});
  f.batch = optional_uint(j, "batch");
  f.batches = j.value("batches", std::vector<uint64_t>{});
  f.samples = j.value("samples", std::vector<int64_t>{});
  f.count = j.value("count", uint64_t{0});
  f.stage = j.value("stage", std::string());
  if (j.contains("probe")) {
    f.probe = true;
    f.probe_size = j["probe"].get<uint64_t>();
  }
  f.message = j.value("message", std::string());
  f.evidence = j.value("evidence", nlohmann::ordered_json::object());
  if (j.contains("cuda_equivalent") && j["cuda_equivalent"].is_string()) f.cuda_equivalent = j["cuda_equivalent"].get<std::string>();
  if (j.contains("root_cause")) f.root_cause = j["root_cause"];
  for (const auto& x : j.value("fixes", nlohmann::ordered_json::array())) {
    Fix fix{x.at("id").get<std::string>(), x.value("title", std::string()), x.value("code", std::string()),
            x.value("tradeoff", std::string()), x.value("batch_sizes", std::vector<uint64_t>{}), x.value("indices", std::vector<int64_t>{})};
    fix.verified = x.value("verified", std::string());
    f.fixes.push_back(std::move(fix));
  }
  for (const auto& o : j.value("occurrences", nlohmann::ordered_json::array())) {
    Occurrence occ;
    occ.rank = optional_uint(o, "rank");
    occ.batch = optional_uint(o, "batch");
    occ.samples = o.value("samples", std::vector<int64_t>{});
    occ.count = o.value("count", uint64_t{0});
    if (o.contains("files")) occ.files = o["files"];
    occ.message = o.value("message", std::string());
    if (o.contains("root_cause")) occ.root_cause = o["root_cause"];
    f.occurrences.push_back(std::move(occ));
  }
  f.occurrences_total = j.value("occurrences_total", static_cast<uint64_t>(f.occurrences.size()));
  return f;
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
