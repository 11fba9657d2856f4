// The finding catalog behind `batchcheck explain` and the report's severities, against the
// documentation users read.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "cli.h"
#include "core/base/errors.h"
#include "core/report/catalog.h"

using namespace batchcheck;

TEST(Catalog, DocsListEveryIdWithTheCatalogsSeverityAndStage) {
  std::ifstream in(BATCHCHECK_SOURCE_DIR "/docs/findings.md");
  ASSERT_TRUE(in);
  // Rows of the table: | `id` | severity | stage | ... (no std::regex: GCC 12 warns inside it under ASan).
  std::set<std::string> documented;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::size_t at = 1;
    while (cells.size() < 3) {
      const std::size_t bar = line.find(" |", at);
      if (bar == std::string::npos) break;
      std::string cell = line.substr(at, bar - at);
      cell.erase(0, cell.find_first_not_of(' '));
      cells.push_back(cell);
      at = bar + 2;
    }
    if (cells.size() < 3 || cells[0].size() < 3 || cells[0].back() != '`') continue;
    const std::string id = cells[0].substr(1, cells[0].size() - 2);
    documented.insert(id);
    const FindingInfo* f = find_finding(id);
    ASSERT_NE(f, nullptr) << "docs/findings.md lists " << id << ", which the catalog does not";
    EXPECT_EQ(cells[1], to_string(f->severity)) << id;
    EXPECT_EQ(cells[2], f->stage) << id;
  }
  EXPECT_EQ(documented.size(), finding_catalog().size());
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
