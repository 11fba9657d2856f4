// The finding catalog behind `batchcheck explain` and the report's severities, against the
// documentation users read.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "cli.h"
#include "core/catalog.h"
#include "core/errors.h"

using namespace batchcheck;

TEST(Catalog, DocsListEveryIdWithTheCatalogsSeverityAndStage) {
  std::ifstream in(BATCHCHECK_SOURCE_DIR "/docs/findings.md");
  ASSERT_TRUE(in);
  const std::regex row(R"(^\| `([a-z0-9-]+)` \| ([a-z]+) \| ([a-z/]+) \|)");
  std::set<std::string> documented;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    documented.insert(m[1]);
    const FindingInfo* f = find_finding(m[1]);
    ASSERT_NE(f, nullptr) << "docs/findings.md lists " << m[1] << ", which the catalog does not";
    EXPECT_EQ(m[2], to_string(f->severity)) << m[1];
    EXPECT_EQ(m[3], f->stage) << m[1];
  }
  for (const auto& f : finding_catalog()) EXPECT_EQ(documented.count(f.id), 1u) << f.id << " is not in docs/findings.md";
}

TEST(Catalog, ExplainPrintsOneIdOrAll) {
  std::ostringstream out, err;
  ASSERT_EQ(run_cli({"explain", "batchnorm-single-value"}, out, err), 0) << err.str();
  EXPECT_EQ(out.str().rfind("batchnorm-single-value (error, stage forward)\n  BatchNorm saw one value per channel in train mode\n"
                            "In PyTorch:\n  ValueError: Expected more than 1 value per channel when training",
                            0),
            0u)
      << out.str();
  EXPECT_NE(out.str().find("Fixes the report offers:\n  drop-last, batch-size-divisor, groupnorm-instead-of-batchnorm\n"),
            std::string::npos);

  std::ostringstream all, err2;
  ASSERT_EQ(run_cli({"explain"}, all, err2), 0);
  for (const auto& f : finding_catalog()) EXPECT_NE(all.str().find(std::string(f.id) + " "), std::string::npos) << f.id;
  EXPECT_NE(all.str().find("tail-batch-singleton         warning  the last batch holds exactly one sample\n"), std::string::npos)
      << all.str();

  std::ostringstream out3, err3;
  EXPECT_EQ(run_cli({"explain", "output-nonfinit"}, out3, err3), 2);
  EXPECT_EQ(err3.str(), "batchcheck: error: explain: unknown finding id \"output-nonfinit\"; did you mean \"output-nonfinite\"?\n");
  std::ostringstream out4, err4;
  EXPECT_EQ(run_cli({"explain", "zzz"}, out4, err4), 2);
  EXPECT_EQ(err4.str(), "batchcheck: error: explain: unknown finding id \"zzz\" (run 'batchcheck explain' for the list)\n");
}
