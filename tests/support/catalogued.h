#pragma once
// Every finding a scan reports is in the catalog `batchcheck explain` prints, with the
// catalog's severity (a probe at a size the loader never delivers is downgraded to a warning,
// BatchNorm's on a batch of one to information, and a last batch of one that ran clean too).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/report/catalog.h"

namespace batchcheck::test_util {

inline void expect_catalogued(const nlohmann::json& report) {
  if (!report.contains("findings")) return;
  for (const auto& f : report["findings"]) {
    const std::string id = f["id"].get<std::string>();
    const FindingInfo* info = find_finding(id);
    ASSERT_NE(info, nullptr) << "finding id " << id << " is not in core/report/catalog.cpp";
    const std::string severity = f["severity"].get<std::string>();
    const bool downgraded_probe =
        f.contains("probe") && (severity == "warning" || (id == "batchnorm-single-value" && severity == "info"));
    const bool ran_clean = id == "tail-batch-singleton" && severity == "info" && f["evidence"].value("ran_clean", false);
    EXPECT_TRUE(severity == to_string(info->severity) || downgraded_probe || ran_clean) << id << " is " << severity;
  }
}

}  // namespace batchcheck::test_util
