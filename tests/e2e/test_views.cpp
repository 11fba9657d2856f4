// The report's CI views (JUnit XML, markdown, GitHub workflow commands) on fixed reports, and
// `batchcheck render` / `scan --junit --markdown --github` writing them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "core/report/catalog.h"
#include "core/report/report.h"
#include "core/views/html_view.h"
#include "core/views/views.h"
#include "support/synthetic_report.h"
#include "support/test_helpers.h"

using namespace batchcheck;
using Json = nlohmann::ordered_json;

namespace {

Json finding(const std::string& id, const std::string& severity, Json rank, Json batch, const std::string& message) {
  Json f = {{"id", id}, {"severity", severity}, {"rank", rank}, {"batch", batch}, {"samples", Json::array({8, 9})},
            {"count", 2}, {"stage", "forward"}, {"message", message}, {"evidence", Json::object()},
            {"cuda_equivalent", nullptr}, {"fixes", Json::array()}};
  return f;
}

// Two ranks: an error on rank 1 (with characters XML and markdown must escape, and bytes that
// are not UTF-8), a warning on both ranks, a probe warning, an info.
Json two_rank_report() {
  Json forward = finding("forward-error", "error", 1, 3, "forward raised: a < b & \"c\" 'd' | e\x01 \xff");
  forward["root_cause"] = {{"op", "aten::view"}, {"line", "model.py:42"}};
  forward["fixes"] = Json::array({{{"id", "reproduce"}, {"title", "reproduce it"}, {"code", "out = model(x)"}, {"tradeoff", "t"}}});
  forward["occurrences"] = Json::array({{{"rank", 1}, {"batch", 3}, {"samples", {8, 9}}, {"count", 2}},
                                        {{"rank", 1}, {"batch", 5}, {"samples", {12}}, {"count", 1}, {"message", "another cause"}}});
  Json tail = finding("tail-batch-singleton", "warning", 0, 4, "the last batch holds 1 sample");
  tail["ranks"] = Json::array({0, 1});
  tail["stage"] = "geometry";
  Json probe = finding("batchnorm-single-value", "warning", nullptr, nullptr, "a probe of 1 sample");
  probe["probe"] = 1;
  Json info = finding("samples-dropped", "info", 0, nullptr, "3 samples dropped");
  return {{"schema_version", 1}, {"config", "cfg.json"}, {"verdict", "fail"}, {"fail_on", "error"}, {"device", "cpu"},
          {"mode", "train"}, {"complete", true}, {"geometry", {{"world_size", 2}}},
          {"batches", {{"checked", 10}, {"ranks", {0, 1}}}},
          {"findings", Json::array({forward, tail, probe, info})},
          {"summary", {{"errors", 1}, {"warnings", 2}, {"infos", 1}}}};
}

std::string xmllint_schema(const std::string& xml_path) {
  auto r = test_util::run_command("xmllint --noout --schema " BATCHCHECK_SOURCE_DIR "/tests/e2e/junit/junit.xsd " + xml_path + " 2>&1");
  return r.status == 0 ? "" : "xmllint: " + r.output;
}

}  // namespace

TEST(Views, JUnitHasASuitePerRankATestcasePerCheckAndValidates) {
  const Json report = two_rank_report();
  const std::string xml = junit_view(report);
  const std::size_t checks = finding_catalog().size();
  EXPECT_NE(xml.find("<testsuites name=\"batchcheck\" tests=\"" + std::to_string(2 * checks) + "\" failures=\"1\" errors=\"0\">"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<testsuite name=\"batchcheck cfg.json (rank 0)\" tests=\"" + std::to_string(checks) +
                     "\" failures=\"0\" errors=\"0\" skipped=\"0\">"),
            std::string::npos)
      << xml.substr(0, 400);
  EXPECT_NE(xml.find("<testsuite name=\"batchcheck cfg.json (rank 1)\" tests=\"" + std::to_string(checks) +
                     "\" failures=\"1\" errors=\"0\" skipped=\"0\">"),
            std::string::npos);
  // The error fails its testcase, escaped; the bytes that are not UTF-8 are replaced.
  EXPECT_NE(xml.find("<testcase classname=\"batchcheck.forward\" name=\"forward-error\">\n      <failure message=\"forward raised: "
                     "a &lt; b &amp; &quot;c&quot; &apos;d&apos; | e? \xEF\xBF\xBD\" type=\"forward-error\">"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("  batch 5 of rank 1: 1 sample: another cause\nroot cause: op=aten::view; line=model.py:42;\n"
                     "fix reproduce: out = model(x)\n</failure>"),
            std::string::npos)
      << xml;
  // Below --fail-on: passing testcases that carry their text; every other check passes empty.
  EXPECT_NE(xml.find("<testcase classname=\"batchcheck.geometry\" name=\"tail-batch-singleton\">\n      <system-out>warning: the "
                     "last batch holds 1 sample\n</system-out>"),
            std::string::npos);
  EXPECT_NE(xml.find("<testcase classname=\"batchcheck.backward\" name=\"gradient-nonfinite\"/>"), std::string::npos);

  test_util::TempDir dir("views");
  std::ofstream(dir.file("junit.xml")) << xml;
  EXPECT_EQ(xmllint_schema(dir.file("junit.xml")), "");

  // --fail-on warning: the warnings fail too; one rank.
  Json strict = report;
  strict["fail_on"] = "warning";
  strict["geometry"]["world_size"] = 1;
  strict["batches"]["ranks"] = Json::array({0});
  const std::string one = junit_view(strict);
  EXPECT_NE(one.find("<testsuite name=\"batchcheck cfg.json\" tests=\"" + std::to_string(checks) + "\" failures=\"3\""),
            std::string::npos)
      << one;
  std::ofstream(dir.file("strict.xml")) << one;
  EXPECT_EQ(xmllint_schema(dir.file("strict.xml")), "");
}

TEST(Views, MarkdownStaysUnderItsLimitAndSaysWhatItLeftOut) {
  const Json report = two_rank_report();
  const std::string md = markdown_view(report);
  EXPECT_EQ(md.rfind("## batchcheck: FAIL — `cfg.json`\n\n1 error, 2 warnings, 1 info; 10 batches checked on cpu (train mode); "
                     "fails on error\n\n| severity | id | where | samples | message |\n",
                     0),
            0u)
      << md;
  // Raw HTML shown as text, the control character as an escape (issue 29).
  EXPECT_NE(md.find("| error | `forward-error` | batch 3 (rank 1) | 8, 9 | forward raised: a &lt; b &amp; \"c\" 'd' \\| "
                    "e\\\\x01 \xEF\xBF\xBD |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| warning | `batchnorm-single-value` | probe batch of 1 | 8, 9 | a probe of 1 sample |"), std::string::npos);
  EXPECT_NE(md.find("- **reproduce**: reproduce it\n\n  <pre><code>out = model(x)</code></pre>\n"), std::string::npos) << md;

  Json big = report;
  for (int i = 0; i < 5000; ++i) big["findings"].push_back(finding("output-nonfinite", "error", 0, i, std::string(200, 'x')));
  const std::string cut = markdown_view(big, 100000);
  EXPECT_LE(cut.size(), 100000u);
  EXPECT_NE(cut.find(" more findings left out to keep this summary small: see the JSON report.\n"), std::string::npos);

  Json clean = report;
  clean["findings"] = Json::array();
  clean["verdict"] = "pass";
  EXPECT_NE(markdown_view(clean).find("## batchcheck: pass — `cfg.json`"), std::string::npos);
  EXPECT_NE(markdown_view(clean).find("No findings.\n"), std::string::npos);
}

TEST(Views, GitHubCommandsAreEscapedAndCappedAsGitHubShowsThem) {
  const Json report = two_rank_report();
  auto lines = github_commands(report);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "::error file=cfg.json,title=batchcheck forward-error at batch 3 (rank 1)::forward raised: a < b & \"c\" "
                      "'d' | e\\x01 \xEF\xBF\xBD");
  EXPECT_EQ(lines[3], "::notice file=cfg.json,title=batchcheck samples-dropped at rank 0::3 samples dropped");

  Json many = report;
  many["config"] = "a,b:c.json";
  for (int i = 0; i < 12; ++i) many["findings"].push_back(finding("output-nonfinite", "error", 0, i, "50% NaN\nsecond line"));
  lines = github_commands(many);
  std::size_t errors = 0;
  for (const auto& l : lines) errors += l.rfind("::error ", 0) == 0;
  EXPECT_EQ(errors, 10u);
  EXPECT_EQ(lines[1], "::error file=a%2Cb%3Ac.json,title=batchcheck output-nonfinite at batch 0 (rank 0)::50%25 NaN%0Asecond line");
  EXPECT_EQ(lines.back(), "::notice title=batchcheck::3 errors more than GitHub shows: see the report");
}

TEST(Views, RenderWritesTheViewsOfASavedReport) {
  test_util::TempDir dir("render");
  const Json report = two_rank_report();
  std::ofstream(dir.file("report.json")) << report.dump(2, ' ', false, Json::error_handler_t::replace);
  std::ostringstream out, err;
  ASSERT_EQ(run_cli({"render", dir.file("report.json"), "--junit", dir.file("r.xml"), "--markdown", dir.file("r.md"), "--html",
                     dir.file("r.html")},
                    out, err),
            0)
      << err.str();
  std::ifstream x(dir.file("r.xml")), m(dir.file("r.md"));
  std::stringstream xs, ms;
  xs << x.rdbuf();
  ms << m.rdbuf();
  const Json reread = Json::parse(report.dump(-1, ' ', false, Json::error_handler_t::replace));
  EXPECT_EQ(xs.str(), junit_view(reread));
  EXPECT_EQ(ms.str(), markdown_view(reread));
  EXPECT_EQ(xmllint_schema(dir.file("r.xml")), "");
  std::ifstream hf(dir.file("r.html"));
  std::stringstream hs;
  hs << hf.rdbuf();
  EXPECT_EQ(hs.str(), html_view(reread));

  // A view written over the report it renders: refused, the report intact.
  std::ostringstream out5, err5;
  EXPECT_EQ(run_cli({"render", dir.file("report.json"), "--html", dir.file("report.json")}, out5, err5), 2);
  EXPECT_EQ(err5.str(), "batchcheck: error: " + dir.file("report.json") +
                            ": --html: is the report being rendered, an input of this run: refusing to overwrite it\n");
  std::ifstream again(dir.file("report.json"));
  EXPECT_EQ(Json::parse(again), reread);

  // Without a view option: the markdown on stdout. On GitHub Actions: the annotations on stderr
  // and the summary appended to $GITHUB_STEP_SUMMARY.
  std::ostringstream out2, err2;
  ASSERT_EQ(run_cli({"render", dir.file("report.json")}, out2, err2), 0);
  EXPECT_EQ(out2.str(), ms.str());
  std::ofstream(dir.file("summary.md")) << "earlier step output\n";
  ::setenv("GITHUB_ACTIONS", "true", 1);
  ::setenv("GITHUB_STEP_SUMMARY", dir.file("summary.md").c_str(), 1);
  std::ostringstream out3, err3;
  const int code = run_cli({"render", dir.file("report.json"), "--junit", dir.file("r2.xml")}, out3, err3);
  ::unsetenv("GITHUB_ACTIONS");
  ::unsetenv("GITHUB_STEP_SUMMARY");
  ASSERT_EQ(code, 0) << err3.str();
  EXPECT_EQ(err3.str().rfind("::error file=cfg.json,title=batchcheck forward-error at batch 3 (rank 1)::", 0), 0u) << err3.str();
  std::ifstream s(dir.file("summary.md"));
  std::stringstream ss;
  ss << s.rdbuf();
  EXPECT_EQ(ss.str(), "earlier step output\n" + ms.str() + "\n");

  // Not a report: one line.
  std::ofstream(dir.file("other.json")) << "{\"model\": {}}";
  std::ostringstream out4, err4;
  EXPECT_EQ(run_cli({"render", dir.file("other.json")}, out4, err4), 2);
  EXPECT_EQ(err4.str(), "batchcheck: error: " + dir.file("other.json") + ": not a batchcheck report (the JSON `batchcheck scan -o` writes)\n");
}

namespace {

// Debian's chromium-headless-shell (scripts/setup.sh installs it), or a chromium on PATH.
std::string headless_browser() {
  for (const char* name : {"chromium-headless-shell", "chromium", "chromium-browser"}) {
    if (test_util::run_command(std::string("command -v ") + name + " >/dev/null 2>&1").status == 0) return name;
  }
  return "";
}

struct BrowserRun {
  int status = -1;
  std::string dom, console;  // the DOM after the page's scripts ran; its console messages
};

// Opens `page` from file:// with every host unresolvable: a page that fetched anything
// would log a failed load on its console.
BrowserRun open_in_browser(const std::string& browser, const std::string& page, const std::string& profile,
                           const std::string& extra = "--dump-dom") {
  const std::string log = profile + ".log";
  const std::string cmd = "timeout 120 " + browser + " --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run " +
                          "--user-data-dir=" + profile + " --host-resolver-rules='MAP * ~NOTFOUND' --enable-logging=stderr " +
                          "--v=0 --hide-scrollbars " + extra + " file://" + page + " 2>" + log;
  auto r = test_util::run_command(cmd);
  BrowserRun out;
  out.status = r.status;
  out.dom = r.output;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find(":CONSOLE") != std::string::npos) out.console += line + "\n";
  }
  return out;
}

}  // namespace

// The HTML report of the seed sample (a real scan) and of a million-batch report, opened in a
// real headless browser: the page's script runs without a console message, every part is there,
// and a screenshot is saved (the README's, by scripts/screenshot.sh).
// `render --text` prints the summary `scan` prints, from the report alone: batchcheck.scan()
// prints it again after it tried the fixes, each tried one with what ran ("verified").
TEST(Views, RenderTextIsTheScansSummaryWithTheFixesTried) {
  test_util::TempDir dir("render-text");
  Json report = two_rank_report();
  report["findings"][0]["fixes"].push_back({{"id", "batch-size-divisor"}, {"title", "t"}, {"code", "DataLoader(..., batch_size=8)"},
                                            {"tradeoff", "x"}, {"batch_sizes", {8}},
                                            {"verified", "ran with batch_size=8: batch 0 \x1b[31m passes"}});
  std::ofstream(dir.file("report.json")) << report.dump(2, ' ', false, Json::error_handler_t::replace);
  std::ostringstream out, err;
  ASSERT_EQ(run_cli({"render", dir.file("report.json"), "--text"}, out, err), 0) << err.str();
  const std::string text = out.str();
  EXPECT_EQ(text.rfind("batchcheck: ", 0), 0u) << text;
  EXPECT_NE(text.find("error: forward-error at batch 3 of rank 1, samples [8, 9]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("    fix batch-size-divisor: DataLoader(..., batch_size=8)  (x)\n        verified: ran with batch_size=8: batch 0 "),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << "a terminal escape from the report is not passed through";
  EXPECT_NE(text.find("verdict: fail (1 error, 2 warnings, 1 info; --fail-on error)\n"), std::string::npos) << text;
  // The finding read back is the one written: every field of it.
  const Json reread = Json::parse(report.dump(-1, ' ', false, Json::error_handler_t::replace));
  for (const auto& f : reread["findings"]) {
    const Json once = to_json(finding_from_json(f));  // in the order and form scan writes
    EXPECT_EQ(to_json(finding_from_json(once)), once);
    for (const auto& [key, value] : f.items()) EXPECT_EQ(once[key], value) << key;
  }
  EXPECT_NE(markdown_view(report).find("verified: ran with batch\\_size=8"), std::string::npos) << markdown_view(report);
  EXPECT_NE(html_view(report).find("verified: ran with batch_size=8"), std::string::npos);
}

TEST(Views, HtmlReportsRenderInAHeadlessBrowser) {
  const std::string browser = headless_browser();
  if (browser.empty()) GTEST_SKIP() << "no headless chromium (scripts/setup.sh installs chromium-headless-shell)";
  test_util::TempDir dir("html");
  std::ostringstream out, err;
  ASSERT_EQ(run_cli({"scan", BATCHCHECK_SOURCE_DIR "/sample_configs/segmentation_tail.json", "-q", "-o", dir.file("seed.json"),
                     "--html", dir.file("seed.html")},
                    out, err),
            1)
      << err.str();
  const std::string large = html_view(test_util::synthetic_report(500000));
  ASSERT_LE(large.size(), 5u * 1000 * 1000);
  std::ofstream(dir.file("large.html")) << large;

  for (const char* name : {"seed", "large"}) {
    SCOPED_TRACE(name);
    const BrowserRun run = open_in_browser(browser, dir.file(std::string(name) + ".html"), dir.file(std::string(name) + "-profile"));
    ASSERT_EQ(run.status, 0);
    EXPECT_EQ(run.console, "");
    EXPECT_NE(run.dom.find("data-rendered=\"ok\""), std::string::npos) << "the page's script did not finish";
    for (const char* part : {"id=\"verdict\"", "id=\"strip\"", "id=\"plot-size\"", "id=\"plot-prediction\"",
                             "id=\"plot-nonfinite\"", "id=\"plot-loss\"", "class=\"finding error\"", "class=\"copy\""}) {
      EXPECT_NE(run.dom.find(part), std::string::npos) << part;
    }
  }
  const std::string shot = BATCHCHECK_BINARY_DIR "/html-report.png";
  std::remove(shot.c_str());
  const BrowserRun run = open_in_browser(browser, dir.file("seed.html"), dir.file("shot-profile"),
                                         "--window-size=1200,1900 --screenshot=" + shot);
  ASSERT_EQ(run.status, 0);
  EXPECT_EQ(run.console, "");
  std::ifstream png(shot, std::ios::binary);
  std::string head(8, '\0');
  png.read(head.data(), 8);
  EXPECT_EQ(head, "\x89PNG\r\n\x1a\n") << shot;
}

// A saved report edited by hand or by another tool: any field of another type or missing is
// rendered or refused (exit 2), never a crash or an internal error.
TEST(Views, RenderSurvivesReportsOfOtherShapes) {
  test_util::TempDir dir("render-odd");
  Json base = two_rank_report();
  base["series"] = Json::parse(R"({"bucket": 1, "band": [0, 1], "ranks": [{"rank": 0, "batch": [0, 1], "batches": [1, 1],
      "size_min": [4, 2], "size_max": [4, 2], "pred_min": [0.1, null], "pred_max": [0.9, null], "nonfinite": [0, 8],
      "loss_min": [0.5, null], "loss_max": [0.5, null], "loss_nonfinite": [0, 0], "errors": [0, 1], "warnings": [0, 0]}]})");
  base["geometry"] = {{"batch_size", 4}, {"batches_per_rank", 2}, {"last_batch_size", 2}, {"world_size", 2},
                      {"samples_per_rank", 6}, {"padded_samples", 1}};
  const std::vector<Json> odd = {nullptr, "x", -3, 1.5, Json::array({1, "a"}), Json::object({{"k", 1}})};
  std::vector<std::pair<std::string, std::string>> paths;  // (top-level key, finding or series key or "")
  for (const auto& [key, v] : base.items()) paths.push_back({key, ""});
  for (const auto& [key, v] : base["findings"][0].items()) paths.push_back({"findings", key});
  for (const auto& [key, v] : base["series"]["ranks"][0].items()) paths.push_back({"series", key});
  for (const auto& [key, v] : base["geometry"].items()) paths.push_back({"geometry", key});
  int rendered = 0, refused = 0;
  for (const auto& [top, inner] : paths) {
    for (int variant = 0; variant <= static_cast<int>(odd.size()); ++variant) {
      Json r = base;
      Json* slot = &r[top];
      if (top == "findings" && !inner.empty()) slot = &r["findings"][0][inner];
      if (top == "series" && !inner.empty()) slot = &r["series"]["ranks"][0][inner];
      if (top == "geometry" && !inner.empty()) slot = &r["geometry"][inner];
      if (variant == static_cast<int>(odd.size())) {
        // Missing altogether.
        if (inner.empty()) r.erase(top);
        else if (top == "findings") r["findings"][0].erase(inner);
        else if (top == "series") r["series"]["ranks"][0].erase(inner);
        else r["geometry"].erase(inner);
      } else {
        *slot = odd[static_cast<std::size_t>(variant)];
      }
      std::ofstream(dir.file("r.json")) << r.dump(-1, ' ', false, Json::error_handler_t::replace);
      std::ostringstream out, err;
      const int code = run_cli({"render", dir.file("r.json"), "--junit", dir.file("r.xml"), "--markdown", dir.file("r.md"), "--html",
                                dir.file("r.html")},
                               out, err);
      ASSERT_TRUE(code == 0 || code == 2) << top << "." << inner << " = variant " << variant << ": exit " << code << "\n" << err.str();
      if (code == 2) {
        EXPECT_EQ(err.str().rfind("batchcheck: error: " + dir.file("r.json") + ": ", 0), 0u) << err.str();
        ++refused;
      } else {
        ++rendered;
      }
    }
  }
  EXPECT_GT(rendered, refused);  // most odd fields are simply shown or left out
}
