// The report views against hostile strings (issue 29): a model's error text, a data file's
// field or a hand-edited report may hold HTML, markdown, workflow commands, terminal escapes,
// characters XML refuses and bytes that are not UTF-8. Each view must show them as text in its
// own format. The properties are fuzz_views's (tests/fuzz/view_checks.h), here on a fixed
// corpus, with the regressions each fix closed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/views/html_view.h"
#include "core/views/view_text.h"
#include "core/views/views.h"
#include "fuzz/view_checks.h"

using namespace batchcheck;
using Json = nlohmann::ordered_json;
namespace vc = batchcheck::view_checks;

namespace {

const std::vector<std::string>& hostile() {
  static const std::vector<std::string> corpus = {
      "<img src=x onerror=alert(1)>",
      "<svg onload=alert(1)>",
      "\" onmouseover=\"alert(1)",
      "' onfocus='alert(1)",
      "\xef\xbf\xbe",                 // U+FFFE: XML refuses it
      "\xef\xbf\xbf",                 // U+FFFF
      "\x1b]0;title\x07\x1b[31mred",  // OSC and CSI terminal escapes
      "a\n::stop-commands::tok\nz",
      "::error file=x::injected",
      ":",  // with the ": " a line puts after it, a workflow command's "::"
      " :",
      "%0A%25",
      "```",
      "```python\nimport os\n```",
      "|",
      "\\|",
      "\\",
      "]]>",
      "<![CDATA[x]]>",
      "<!-- x -->",
      "\"'&",
      "&lt;script&gt;",
      "&#60;script&#62;",
      "![t](https://example.com/t.png)",
      "[click](javascript:alert(1))",
      "*_~`",
      "</code></pre></details>",
      "  <pre><code>",
      "\n\n# heading\n\n- item",
      "a\r\nb\rc",
      "\t",
      std::string("nul\0byte", 8),
      "\xc2\x85\xc2\x9b",  // NEL and CSI as C1 controls
      "\xe2\x80\xae"
      "evil\xe2\x80\xac",  // a bidirectional override
      "\xe2\x80\xa8",      // LINE SEPARATOR
      "\xff\xfe",          // not UTF-8
      "\xc0\xaf",          // an overlong '/'
      "\xed\xa0\x80",      // a surrogate
      "\xf4\x90\x80\x80",  // past U+10FFFF
      "\xe2\x82",          // truncated
  };
  return corpus;
}

const vc::detail::Shape& benign_page() {
  static const vc::detail::Shape shape = vc::benign_html_shape([](const Json& r) { return html_view(r); });
  return shape;
}

// Every view's properties for `report`: "" or what broke, with the view's name.
std::string problems(const Json& report) {
  const std::size_t findings = report["findings"].size();
  std::string p = vc::junit_problems(junit_view(report));
  if (p.empty()) p = vc::markdown_problems(markdown_view(report), findings);
  if (p.empty()) p = vc::markdown_problems(markdown_view(report, 1500), findings);
  if (p.empty()) p = vc::github_problems(github_commands(report));
  if (p.empty()) p = vc::html_problems(html_view(report), benign_page());
  if (p.empty()) p = vc::summary_problems(format_summary(vc::summary_input(report)));
  return p;
}

Json with_message(const std::string& message) {
  Json r = vc::template_report();
  r["findings"][0]["message"] = message;
  return r;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

// The checks themselves see what the old views wrote: they are not vacuous.
TEST(ViewEscaping, ChecksRejectWhatTheOldViewsWrote) {
  EXPECT_NE(vc::markdown_problems("## batchcheck: FAIL\n\nx\n\n<img src=x onerror=alert(1)>\n", 0), "");
  EXPECT_NE(vc::markdown_problems("## batchcheck: FAIL\n\nx\n\n- **a**: b\n\n  ```python\n  x\n  ```\n", 0), "");
  EXPECT_NE(vc::markdown_problems("## batchcheck: FAIL\n\nx\n\n| a | b |\n", 0), "");
  EXPECT_NE(vc::junit_problems("<?xml version=\"1.0\"?>\n<testsuites name=\"\xef\xbf\xbe\"/>\n"), "");
  EXPECT_NE(vc::junit_problems("<testsuites><script/></testsuites>"), "");
  EXPECT_NE(vc::github_problems({"::error title=t::a\x1b[31m"}), "");
  EXPECT_NE(vc::github_problems({"::error title=a,b=c::m"}), "");
  const std::string page = html_view(vc::template_report());
  EXPECT_EQ(vc::html_problems(page, benign_page()), "");
  std::string injected = page;
  injected.insert(injected.find("</footer>"), "<img src=x onerror=alert(1)>");
  EXPECT_NE(vc::html_problems(injected, benign_page()), "");
}

TEST(ViewEscaping, MarkdownShowsHtmlAsText) {
  const std::string md = markdown_view(with_message("<img src=x onerror=alert(1)>"));
  EXPECT_EQ(md.find("<img"), std::string::npos) << md;
  EXPECT_NE(md.find(" | &lt;img src=x onerror=alert(1)&gt; |\n"), std::string::npos) << md;
  EXPECT_EQ(vc::markdown_problems(md, 6), "");

  // Ids, config, fix titles and text built from hand-edited fields (a probe that is a string).
  Json r = vc::template_report();
  r["config"] = "<b>cfg</b>.json";
  r["findings"][0]["id"] = "<i>id</i>";
  r["findings"][0]["fixes"][0]["title"] = "<a href=x>t</a>";
  r["findings"][3]["probe"] = "<script>";
  const std::string md2 = markdown_view(r);
  EXPECT_EQ(vc::markdown_problems(md2, 6), "") << md2;
  EXPECT_NE(md2.find("## batchcheck: FAIL — <code>&lt;b&gt;cfg&lt;/b&gt;.json</code>\n"), std::string::npos) << md2;
  EXPECT_NE(md2.find("| error | <code>&lt;i&gt;id&lt;/i&gt;</code> | batch 65 (rank 0) |"), std::string::npos) << md2;
  EXPECT_NE(md2.find("<details><summary><code>&lt;i&gt;id&lt;/i&gt;</code> at batch 65 (rank 0): fixes</summary>"),
            std::string::npos);
  EXPECT_NE(md2.find("- **drop-last**: &lt;a href=x&gt;t&lt;/a&gt;\n"), std::string::npos);
  EXPECT_NE(md2.find("| probe batch of \"&lt;script&gt;\" |"), std::string::npos) << md2;
}

// A table row stays one row of five cells; links, images and code spans stay text.
TEST(ViewEscaping, MarkdownTextCannotBreakTheTable) {
  Json r = with_message("a | b \\| c\nd ![t](https://e.x/t.png) `x` \x1b[31m");
  r["findings"][0]["id"] = "x`y|z";
  const std::string md = markdown_view(r);
  EXPECT_EQ(vc::markdown_problems(md, 6), "") << md;
  EXPECT_NE(md.find("| error | <code>x\\`y\\|z</code> | batch 65 (rank 0) | 1040 | a \\| b \\\\\\| c d "
                    "!\\[t\\](https://e.x/t.png) "
                    "\\`x\\` \\\\x1b\\[31m |\n"),
            std::string::npos)
      << md;
}

// A fix's code is a <pre><code> block inside its list item: a ``` in it closes nothing, its
// lines (CR ones too) all stay in the item, and HTML in it is text.
TEST(ViewEscaping, MarkdownFixCodeCannotLeaveItsBlock) {
  Json r = vc::template_report();
  r["findings"][0]["fixes"][0]["code"] = "x = 1\n```\n# heading\r<script>alert(1)</script>\r\n\tindented &";
  const std::string md = markdown_view(r);
  EXPECT_EQ(vc::markdown_problems(md, 6), "") << md;
  EXPECT_NE(md.find("- **drop-last**: drop the incomplete last batch\n\n  <pre><code>x = 1\n  ```\n  # heading\n"
                    "  &lt;script&gt;alert(1)&lt;/script&gt;\n  \tindented &amp;</code></pre>\n"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("```python"), std::string::npos);
}

// Reports with ordinary strings look as they did: code spans for ids and paths, a code block
// per fix.
TEST(ViewEscaping, MarkdownOfOrdinaryTextKeepsItsLook) {
  const std::string md = markdown_view(vc::template_report());
  EXPECT_EQ(md.rfind("## batchcheck: FAIL — `sample_configs/segmentation_tail.json`\n\n", 0), 0u) << md;
  EXPECT_NE(md.find("| error | `output-nonfinite` | batch 65 (rank 0) | 1040 | predictions hold 4096 NaNs in 1 sample "
                    "of a batch of 1 |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| warning | `batchnorm-single-value` | probe batch of \"1\" | 0 | a probe of 1 sample |\n"),
            std::string::npos);
  EXPECT_NE(md.find("<details><summary><code>output-nonfinite</code> at batch 65 (rank 0): fixes</summary>\n\n"
                    "- **drop-last**: drop the incomplete last batch\n\n  <pre><code>DataLoader(..., "
                    "drop_last=True)</code></pre>\n"),
            std::string::npos)
      << md;
}

TEST(ViewEscaping, Utf8CleanRefusesWhatIsNotUtf8) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_clean("ok é €  \xf0\x9f\x98\x80"), "ok é €  \xf0\x9f\x98\x80");
  EXPECT_EQ(utf8_clean("\xc0\xaf"), r + r);                  // overlong
  EXPECT_EQ(utf8_clean("\xe0\x80\xaf"), r + r + r);          // overlong, 3 bytes
  EXPECT_EQ(utf8_clean("\xed\xa0\x80"), r + r + r);          // surrogate U+D800
  EXPECT_EQ(utf8_clean("\xf4\x90\x80\x80"), r + r + r + r);  // U+110000
  EXPECT_EQ(utf8_clean("a\xe2\x82"), "a" + r + r);           // truncated
  EXPECT_EQ(xml_escape("\xef\xbf\xbe|\xef\xbf\xbf|\x01|\t\n\r|<&>\"'"),
            r + "|" + r + "|?|\t\n\r|&lt;&amp;&gt;&quot;&apos;");
}

// U+FFFE, U+FFFF, surrogates and overlong forms made the whole JUnit file unreadable.
TEST(ViewEscaping, JUnitParsesWhateverTheStrings) {
  for (const char* s : {"\xef\xbf\xbe", "\xef\xbf\xbf", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "\x01\x1b"}) {
    SCOPED_TRACE(testing::PrintToString(std::string(s)));
    Json r = with_message(std::string("m ") + s);
    r["config"] = std::string("c ") + s;
    r["findings"][0]["fixes"][0]["code"] = s;
    const std::string xml = junit_view(r);
    EXPECT_EQ(vc::junit_problems(xml), "");
  }
  const std::string xml =
      junit_view(with_message("a\xef\xbf\xbe"
                              "b"));
  EXPECT_NE(xml.find("<failure message=\"a\xEF\xBF\xBD"
                     "b\" type=\"output-nonfinite\">"),
            std::string::npos)
      << xml;
}

// Each command is one line with no control character: ESC and the other controls are shown
// as escapes; %, CR and LF as GitHub decodes them.
TEST(ViewEscaping, GitHubCommandsAreOnePlainLine) {
  const auto lines = github_commands(with_message("\x1b]0;t\x07 a\n::stop-commands::tok\nz\t\xc2\x9b\xe2\x80\xae%"));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(
      lines[0],
      "::error file=sample_configs/segmentation_tail.json,title=batchcheck output-nonfinite at batch 65 (rank 0)::"
      "\\x1b]0;t\\x07 a%0A::stop-commands::tok%0Az\\t\\u{9B}\\u{202E}%25");
  EXPECT_EQ(vc::github_problems(lines), "");
  Json r = vc::template_report();
  r["config"] = "a,b:c\x1b.json";
  r["findings"][0]["id"] = "x::error";
  const auto more = github_commands(r);
  EXPECT_EQ(more[0].rfind("::error file=a%2Cb%3Ac\\x1b.json,title=batchcheck x%3A%3Aerror at batch 65 (rank 0)::", 0),
            0u)
      << more[0];
  EXPECT_EQ(vc::github_problems(more), "");
}

// A severity is a class name on the page: only the known ones get there.
TEST(ViewEscaping, HtmlClassesAreThePagesOwn) {
  Json r = vc::template_report();
  r["findings"][0]["severity"] = "error copy";
  r["findings"][1]["severity"] = "x\" onclick=\"alert(1)";
  const std::string page = html_view(r);
  EXPECT_EQ(vc::html_problems(page, benign_page()), "");
  EXPECT_EQ(page.find("error copy\""), std::string::npos);
  EXPECT_NE(
      page.find(
          "<article class=\"finding unknown\" id=\"finding-0\"><h3><span class=\"sev unknown\">error copy</span>"),
      std::string::npos);
  EXPECT_NE(page.find("<span class=\"sev unknown\">x&quot; onclick=&quot;alert(1)</span>"), std::string::npos);
}

// A report built in-process may hold bytes that are not UTF-8 anywhere (a file name in the
// evidence, a model's text in the root cause); the views showed them by dump(), which throws.
TEST(ViewEscaping, ViewsRenderBytesThatAreNotUtf8InEveryField) {
  Json r = vc::template_report();
  r["findings"][0]["evidence"]["file"] = "x\xff.npy";
  r["findings"][0]["root_cause"]["inputs"]["name"] = "\xc0\xaf";
  r["findings"][0]["batches"][1] = "\xfe";
  r["findings"][0]["occurrences"][1]["batch"] = "\xff";
  r["findings"][3]["probe"] = "\xff";
  r["findings"][1]["samples"][1] = "\xff";
  r["notes"].push_back(Json::array({"\xff"}));
  std::string xml, md, page;
  std::vector<std::string> gh;
  ASSERT_NO_THROW(xml = junit_view(r));
  ASSERT_NO_THROW(md = markdown_view(r));
  ASSERT_NO_THROW(gh = github_commands(r));
  ASSERT_NO_THROW(page = html_view(r));
  EXPECT_EQ(problems(r), "");
  EXPECT_NE(page.find("&quot;file&quot;: &quot;x\xEF\xBF\xBD.npy&quot;"), std::string::npos);
  EXPECT_NE(md.find("| probe batch of \"\xEF\xBF\xBD\" |"), std::string::npos) << md;
}

// The fixed corpus in every string of the report at once, and spread over its strings.
TEST(ViewEscaping, HostileCorpusKeepsEveryViewsProperties) {
  for (const std::string& s : hostile()) {
    SCOPED_TRACE(testing::PrintToString(s));
    Json all = vc::template_report();
    vc::for_each_string(all, [&](std::string& field) { field = s; });
    EXPECT_EQ(problems(all), "");
    Json wrapped = vc::template_report();
    vc::for_each_string(wrapped, [&](std::string& field) { field = field + s + field; });
    EXPECT_EQ(problems(wrapped), "");
  }
  for (std::size_t shift = 0; shift < hostile().size(); ++shift) {
    Json spread = vc::template_report();
    std::size_t k = shift;
    vc::for_each_string(spread, [&](std::string& field) { field = hostile()[k++ % hostile().size()]; });
    EXPECT_EQ(problems(spread), "") << "shift " << shift;
  }
}

// The HTML page shows every hostile string as text: only its own script, escaped text
// where the string was.
TEST(ViewEscaping, HtmlShowsTheCorpusAsText) {
  for (const std::string& s : hostile()) {
    SCOPED_TRACE(testing::PrintToString(s));
    Json r = vc::template_report();
    vc::for_each_string(r, [&](std::string& field) { field = s; });
    const std::string page = html_view(r);
    EXPECT_EQ(count(page, "<script"), 1u);
    EXPECT_NE(page.find(xml_escape(s)), std::string::npos);
  }
}

// The summary's check refuses what the summary wrote before it escaped: a model's line break
// starting a workflow command, a terminal escape.
TEST(ViewEscaping, SummaryCheckRefusesWhatTheOldSummaryWrote) {
  EXPECT_NE(vc::summary_problems("error: forward-error at batch 0\n    boom\n::stop-commands::tok\n"), "");
  EXPECT_NE(vc::summary_problems("    \x1b]0;title\x07\n"), "");
  EXPECT_EQ(vc::summary_problems("    boom\\n\\x3a:stop-commands::tok\n"), "");
}
