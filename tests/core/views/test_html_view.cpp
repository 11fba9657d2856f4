// The HTML report as a pure view of the JSON report: what it shows, that it fetches nothing,
// that it escapes what it quotes, and that it stays small however long the scan.
#include <gtest/gtest.h>

#include <string>

#include "core/views/html_view.h"
#include "support/synthetic_report.h"

using namespace batchcheck;
using Json = nlohmann::ordered_json;

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The seed sample's report, cut to what the page reads: 131 batches, NaN in the tail batch.
Json seed_report() {
  Json r = Json::parse(R"J({
    "schema_version": 1, "tool": {"name": "batchcheck", "version": "0.9.0", "libtorch": "2.15.0"},
    "config": "sample_configs/segmentation_tail.json", "complete": true, "verdict": "fail", "fail_on": "error",
    "device": "cpu", "mode": "train", "backward": true, "dataset": {"samples": 1041},
    "geometry": {"batch_size": 8, "drop_last": false, "sampler": "sequential", "world_size": 1, "samples_per_rank": 1041,
                 "batches_per_rank": 131, "last_batch_size": 1, "padded_samples": 0, "dropped_samples": 0,
                 "pytorch_equivalent": "DataLoader(ds, batch_size=8)"},
    "batches": {"checked": 131, "ranks": [0]},
    "findings": [{"id": "output-nonfinite", "severity": "error", "rank": 0, "batch": 130, "batches": [130],
                  "samples": [1040], "count": 1, "stage": "output",
                  "message": "predictions hold 4096 NaNs in 1 sample of a batch of 1",
                  "evidence": {"nan": 4096}, "cuda_equivalent": "Assertion `input_val >= zero && input_val <= one` failed.",
                  "fixes": [{"id": "drop-last", "title": "drop the incomplete last batch",
                             "code": "DataLoader(..., drop_last=True)", "tradeoff": "drops 1 of 1041 samples per epoch"}],
                  "occurrences": [{"rank": 0, "batch": 130, "samples": [1040], "count": 1}], "occurrences_total": 1}],
    "suggestions": {"batch_sizes": [{"batch_size": 6, "tail": 3, "batches": 174, "dropped_with_drop_last": 3}]},
    "notes": [], "summary": {"errors": 1, "warnings": 0, "infos": 0}})J");
  Series s;
  s.reset(1, 131);
  for (uint64_t b = 0; b < 131; ++b) {
    BatchStats st;
    st.band_lo = 0;
    st.band_hi = 1;
    if (b < 130) {
      st.pred_min = 0.08;
      st.pred_max = 0.92;
      st.loss = 0.79;
    } else {
      st.pred_nonfinite = 4096;
    }
    s.add(b, b, b < 130 ? 8 : 1, st, b == 130 ? std::optional<Severity>(Severity::Error) : std::nullopt);
  }
  r["series"] = s.to_json({0});
  return r;
}

}  // namespace

TEST(HtmlView, ShowsVerdictStripPlotsAndFindings) {
  const std::string page = html_view(seed_report());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("<header id=\"verdict\" class=\"verdict fail\"><h1>batchcheck: FAIL</h1>"), std::string::npos);
  EXPECT_NE(page.find("<span id=\"count-errors\">1 error</span>"), std::string::npos);
  EXPECT_NE(page.find("<svg id=\"strip\""), std::string::npos);
  // The tail batch is marked and labelled; the failing batch is red in the strip.
  EXPECT_EQ(count(page, "class=\"tail\""), 1u);
  EXPECT_NE(page.find("tail: batch 130 holds 1 sample"), std::string::npos);
  EXPECT_EQ(count(page, "class=\"b-error\""), 1u);
  EXPECT_EQ(count(page, "class=\"b-ok\""), 130u);
  for (const char* id : {"plot-size", "plot-prediction", "plot-nonfinite", "plot-loss"}) {
    EXPECT_NE(page.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  }
  // The contract's band is drawn, the failing batch shaded in every plot, and its prediction
  // (no finite value) marked.
  EXPECT_NE(page.find("against the loss contract [0, 1]"), std::string::npos);
  EXPECT_EQ(count(page, "class=\"band\""), 1u);
  EXPECT_EQ(count(page, "class=\"hl-error\""), 4u);
  EXPECT_EQ(count(page, "class=\"no-value\""), 1u);
  // The finding: message, samples, CUDA equivalent (escaped), fixes with a copy button.
  EXPECT_NE(page.find("<article class=\"finding error\" id=\"finding-0\">"), std::string::npos);
  EXPECT_NE(page.find("<dt>samples</dt><dd>1040 (1 sample concerned)</dd>"), std::string::npos);
  EXPECT_NE(page.find("Assertion `input_val &gt;= zero &amp;&amp; input_val &lt;= one` failed."), std::string::npos);
  EXPECT_NE(page.find("<pre><code>DataLoader(..., drop_last=True)</code></pre><button class=\"copy\""), std::string::npos);
  EXPECT_NE(page.find("<dt>meaning</dt>"), std::string::npos);  // from the catalog `explain` prints
}

TEST(HtmlView, IsSelfContained) {
  const std::string page = html_view(seed_report());
  // Nothing fetched: no external scripts, styles, images or fonts; links stay in the page.
  for (const char* outside : {"http://", "https://", "src=", "<link", "@import", "url(http"}) {
    EXPECT_EQ(page.find(outside), std::string::npos) << outside;
  }
  for (std::size_t at = page.find("href=\""); at != std::string::npos; at = page.find("href=\"", at + 1)) {
    EXPECT_EQ(page.compare(at + 6, 1, "#"), 0) << page.substr(at, 40);
  }
}

TEST(HtmlView, EscapesWhatItQuotesAndReadsOddReports) {
  Json r = seed_report();
  r["config"] = "cfg<script>.json";
  r["findings"][0]["message"] = "</pre><script>alert(1)</script>\xff";
  r["findings"][0]["root_cause"] = {{"op", "aten::log"}, {"line", "model.py:42"}, {"inputs", {{"negative", 12}}}};
  const std::string page = html_view(r);
  EXPECT_EQ(count(page, "<script>"), 1u);  // the page's own
  EXPECT_NE(page.find("&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;\xEF\xBF\xBD"), std::string::npos);
  // A root cause (issue 13's) is shown field by field.
  EXPECT_NE(page.find("<dt>op</dt><dd>aten::log</dd><dt>line</dt><dd>model.py:42</dd><dt>inputs</dt><dd>{&quot;negative&quot;:12}</dd>"),
            std::string::npos);
  // An older report without series or geometry, with odd types, still renders.
  Json old = Json::parse(R"({"schema_version": 1, "verdict": "pass", "complete": "yes", "fail_on": 3,
                             "findings": [], "summary": {"errors": -1}})");
  const std::string page2 = html_view(old);
  EXPECT_NE(page2.find("This report has no per-batch statistics"), std::string::npos);
  EXPECT_NE(page2.find("No findings: every batch passed."), std::string::npos);
}

TEST(HtmlView, AMillionBatchReportStaysSmall) {
  const Json report = test_util::synthetic_report(500000);  // 2 ranks: 1,000,000 batches
  EXPECT_EQ(report["batches"]["checked"], 1000000);
  EXPECT_EQ(report["series"]["bucket"], 500);
  EXPECT_EQ(report["series"]["ranks"][1]["batch"].size(), 1000u);
  const std::string json = report.dump();
  const std::string page = html_view(report);
  std::cout << "1,000,000 batches: JSON report " << json.size() << " bytes, HTML " << page.size() << " bytes\n";
  EXPECT_LE(page.size(), 5u * 1000 * 1000);
  // Buckets of 500 batches, a NaN batch every 997: about half the points of each rank are red.
  const std::size_t red = count(page, "class=\"b-error\"");
  EXPECT_GT(red, 2 * 480u);
  EXPECT_LT(red, 2 * 560u);
  EXPECT_NE(page.find("… and "), std::string::npos);  // the finding's batches are listed in part
  EXPECT_NE(page.find("Each point summarizes 500 consecutive batches"), std::string::npos);
}

// A long text is cut at a character, not inside one (the cut half showed as U+FFFD).
TEST(HtmlView, CutsLongTextBetweenCharacters) {
  Json r = seed_report();
  r["findings"][0]["message"] = std::string(3999, 'a') + "\xC3\xA9" + std::string(100, 'b');
  const std::string page = html_view(r);
  EXPECT_EQ(page.find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_NE(page.find("<p>" + std::string(3999, 'a') + " … (102 more bytes in the JSON report)</p>"), std::string::npos);
  // The table's cell: the first 300 bytes of the message, which end inside no character here.
  EXPECT_NE(page.find("<td>" + std::string(300, 'a') + "</td>"), std::string::npos);
}
