#pragma once
// What every report view keeps, whatever strings a report holds (issue 29): the JUnit parses
// as XML; the HTML page holds no element, attribute, class, script or link that the page of
// benign strings does not; every GitHub workflow command is one line without a control
// character; the markdown has no raw HTML but its own tags, and its lines are the view's own;
// the human summary on stderr (format_summary) has no control character and no line a CI
// runner would read as a workflow command.
// Shared by the libFuzzer target fuzz_views.cpp and the core test test_view_escaping.cpp. Each
// check returns "" or what is wrong.
#include <libxml/HTMLparser.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlerror.h>

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/escape.h"
#include "core/report/report.h"
#include "core/views/summary.h"

namespace batchcheck::view_checks {

using Json = nlohmann::ordered_json;

// A report with every part the views show: two ranks, findings of each severity and one of
// none the views know, root cause, CUDA equivalent, fixes with code, occurrences with their own
// message, evidence, a probe, suggestions, notes, geometry with a tail, padding and dropped
// samples, and a series. Fields that are numbers in a real report but shown as text hold
// strings here (a hand-edited report: `probe`, a sample, a batch).
inline Json template_report() {
  return Json::parse(R"J({
    "schema_version": 1, "tool": {"name": "batchcheck", "version": "0.9.0", "libtorch": "2.15.0"},
    "config": "sample_configs/segmentation_tail.json", "complete": false, "verdict": "fail", "fail_on": "warning",
    "device": "cpu", "mode": "train", "backward": true, "dataset": {"samples": 1041},
    "geometry": {"batch_size": 8, "drop_last": false, "sampler": "distributed", "world_size": 2, "samples_per_rank": 522,
                 "batches_per_rank": 66, "last_batch_size": 1, "padded_samples": 1, "dropped_samples": 0,
                 "pytorch_equivalent": "DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))"},
    "batches": {"checked": 132, "ranks": [0, 1]},
    "findings": [
      {"id": "output-nonfinite", "severity": "error", "rank": 0, "batch": 65, "batches": [65, "66"], "samples": [1040], "count": 1,
       "stage": "output", "message": "predictions hold 4096 NaNs in 1 sample of a batch of 1",
       "evidence": {"nan": 4096, "file": "x.npy"}, "cuda_equivalent": "Assertion `input_val >= zero` failed.",
       "root_cause": {"kind": "op", "op": "aten::log", "line": "model.py:42", "inputs": {"negative": 12, "name": "x"}},
       "fixes": [{"id": "drop-last", "title": "drop the incomplete last batch", "code": "DataLoader(..., drop_last=True)",
                  "tradeoff": "drops 1 of 1041 samples per epoch"},
                 {"id": "clamp", "title": "clamp the input", "code": "x = x.clamp(min=1e-6)\nout = model(x)", "tradeoff": ""}],
       "occurrences": [{"rank": 0, "batch": 65, "samples": [1040], "count": 1},
                       {"rank": 1, "batch": "65", "samples": [1041], "count": 1, "message": "another cause",
                        "root_cause": {"summary": "from the input"}}],
       "occurrences_total": 2},
      {"id": "forward-error", "severity": "error", "rank": 1, "batch": 3, "batches": [3], "samples": [8, "9"], "count": 2,
       "stage": "forward", "message": "forward raised: shape mismatch", "evidence": {}, "cuda_equivalent": null,
       "fixes": [{"id": "reproduce", "title": "reproduce it", "code": "out = model(x)", "tradeoff": "t"}]},
      {"id": "tail-batch-singleton", "severity": "warning", "rank": 0, "ranks": [0, 1], "batch": 65, "batches": [65],
       "samples": [], "count": 1, "stage": "geometry", "message": "the last batch holds 1 sample", "fixes": []},
      {"id": "batchnorm-single-value", "severity": "warning", "rank": null, "batch": null, "probe": "1", "samples": [0],
       "count": 1, "stage": "forward", "message": "a probe of 1 sample",
       "fixes": [{"id": "eval", "title": "use eval mode", "code": "", "tradeoff": ""}]},
      {"id": "samples-dropped", "severity": "info", "rank": 0, "batch": null, "samples": [], "count": 3, "stage": "geometry",
       "message": "3 samples dropped"},
      {"id": "custom-check", "severity": "note", "rank": 0, "batch": 1, "samples": [2], "count": 1, "stage": "data",
       "message": "a finding of another tool", "fixes": [{"id": "other", "title": "look", "code": "print(1)", "tradeoff": ""}]}],
    "suggestions": {"batch_sizes": [{"batch_size": 6, "tail": 3, "batches": 174, "dropped_with_drop_last": 3}]},
    "notes": ["interrupted after 132 batches", "a note"],
    "series": {"bucket": 1, "band": [0, 1], "ranks": [
      {"rank": 0, "batch": [0, 1, 65], "batches": [1, 1, 1], "size_min": [8, 8, 1], "size_max": [8, 8, 1],
       "pred_min": [0.1, 0.2, null], "pred_max": [0.9, 0.8, null], "nonfinite": [0, 0, 4096], "loss_min": [0.5, 0.4, null],
       "loss_max": [0.5, 0.4, null], "loss_nonfinite": [0, 0, 0], "errors": [0, 0, 1], "warnings": [0, 1, 0]},
      {"rank": 1, "batch": [0, 3, 65], "batches": [1, 1, 1], "size_min": [8, 8, 1], "size_max": [8, 8, 1],
       "pred_min": [0.1, 0.3, 0.2], "pred_max": [0.9, 0.7, 0.6], "nonfinite": [0, 0, 0], "loss_min": [0.5, 0.4, 0.3],
       "loss_max": [0.5, 0.4, 0.3], "loss_nonfinite": [0, 0, 0], "errors": [0, 1, 0], "warnings": [0, 0, 0]}]},
    "summary": {"errors": 2, "warnings": 2, "infos": 1}})J");
}

// Calls `fill` on every string of `j` in document order: values, and the keys of the objects
// whose keys a view shows (root_cause, evidence and what they hold).
inline void for_each_string(Json& j, const std::function<void(std::string&)>& fill, bool keys_shown = false) {
  if (j.is_string()) {
    fill(j.get_ref<std::string&>());
  } else if (j.is_array()) {
    for (auto& v : j) for_each_string(v, fill);
  } else if (j.is_object()) {
    Json out = Json::object();
    for (auto& [key, v] : j.items()) {
      std::string k = key;
      if (keys_shown) fill(k);
      Json value = v;
      for_each_string(value, fill, keys_shown || key == "root_cause" || key == "evidence");
      out[k] = std::move(value);
    }
    j = std::move(out);
  }
}

// The first character of `s` that is not valid UTF-8 or that a terminal or log parser acts
// on (C0 but `allowed`, DEL, C1, the line and paragraph separators, the bidirectional
// controls), as "byte N: ..."; "" when there is none.
inline std::string control_in(std::string_view s, std::string_view allowed = "") {
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const std::size_t n = batchcheck::utf8_sequence(s, i, cp);
    if (n == 0) return "byte " + std::to_string(i) + ": not UTF-8";
    const bool control = (cp < 0x20 && allowed.find(static_cast<char>(cp)) == std::string_view::npos) || cp == 0x7F ||
                         (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202A && cp <= 0x202E) ||
                         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F || cp == 0x061C;
    if (control)
      return "byte " + std::to_string(i) + ": control character U+" + std::to_string(static_cast<unsigned>(cp));
    i += n;
  }
  return "";
}

namespace detail {

inline void parser_init() {
  static const bool ready = [] {
    xmlInitParser();
    return true;
  }();
  (void)ready;
}

inline std::string last_xml_error() {
  const xmlError* e = xmlGetLastError();
  return e && e->message ? std::string(e->message) + " (line " + std::to_string(e->line) + ")" : "unknown error";
}

// Each element's name, each (element, attribute) pair, each class attribute's value, each
// href, and each script's text, of a parsed document; comments and processing instructions as
// elements "#comment" and "#pi".
struct Shape {
  std::set<std::string> elements, attributes, classes, hrefs, scripts;
};

inline void collect(xmlNode* node, Shape& s) {
  for (xmlNode* n = node; n; n = n->next) {
    if (n->type == XML_COMMENT_NODE) s.elements.insert("#comment");
    if (n->type == XML_PI_NODE) s.elements.insert("#pi");
    if (n->type == XML_CDATA_SECTION_NODE) s.elements.insert("#cdata");
    if (n->type != XML_ELEMENT_NODE) continue;
    const std::string name = reinterpret_cast<const char*>(n->name);
    s.elements.insert(name);
    for (xmlAttr* a = n->properties; a; a = a->next) {
      const std::string attr = reinterpret_cast<const char*>(a->name);
      s.attributes.insert(name + " " + attr);
      xmlChar* value = xmlNodeListGetString(n->doc, a->children, 1);
      const std::string v = value ? reinterpret_cast<const char*>(value) : "";
      xmlFree(value);
      if (attr == "class") s.classes.insert(v);
      if (attr == "href") s.hrefs.insert(v);
    }
    if (name == "script") {
      xmlChar* text = xmlNodeGetContent(n);
      s.scripts.insert(text ? reinterpret_cast<const char*>(text) : "");
      xmlFree(text);
    }
    collect(n->children, s);
  }
}

inline std::string not_in(const std::set<std::string>& seen, const std::set<std::string>& allowed, const char* what) {
  for (const auto& x : seen) {
    if (!allowed.count(x)) return std::string(what) + " that the page of benign strings has not: " + x;
  }
  return "";
}

// Whether the backslashes just before md[i] leave it unescaped (an even number of them).
inline bool unescaped(const std::string& md, std::size_t i) {
  std::size_t n = 0;
  while (n < i && md[i - 1 - n] == '\\') ++n;
  return n % 2 == 0;
}

inline bool starts(const std::string& s, std::string_view p) {
  return s.compare(0, p.size(), p) == 0;
}
inline bool ends(const std::string& s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

}  // namespace detail

// The JUnit XML: well-formed to a real XML parser (no recovery), with only the view's own
// elements and attributes.
inline std::string junit_problems(const std::string& xml) {
  detail::parser_init();
  xmlResetLastError();
  xmlDoc* doc = xmlReadMemory(xml.data(), static_cast<int>(xml.size()), "junit.xml", nullptr,
                              XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (!doc) return "junit: not well-formed XML: " + detail::last_xml_error();
  detail::Shape s;
  detail::collect(xmlDocGetRootElement(doc), s);
  xmlFreeDoc(doc);
  const std::set<std::string> elements = {"testsuites", "testsuite", "testcase", "failure", "system-out"};
  const std::set<std::string> attributes = {
      "testsuites name", "testsuites tests",   "testsuites failures", "testsuites errors", "testsuite name",
      "testsuite tests", "testsuite failures", "testsuite errors",    "testsuite skipped", "testcase classname",
      "testcase name",   "failure message",    "failure type"};
  std::string p = detail::not_in(s.elements, elements, "junit: an element");
  if (p.empty()) p = detail::not_in(s.attributes, attributes, "junit: an attribute");
  return p;
}

// The HTML page's shape (see detail::Shape), as libxml2's HTML parser reads it.
inline detail::Shape html_shape(const std::string& page) {
  detail::parser_init();
  detail::Shape s;
  htmlDocPtr doc = htmlReadMemory(page.data(), static_cast<int>(page.size()), "report.html", "UTF-8",
                                  HTML_PARSE_NONET | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING);
  if (!doc) {
    s.elements.insert("#unparsed");
    return s;
  }
  detail::collect(xmlDocGetRootElement(doc), s);
  xmlFreeDoc(doc);
  return s;
}

// The shape of the template report's pages with benign strings: as it is, and with the
// verdict a string that is not "fail" (the header's other class).
inline detail::Shape benign_html_shape(const std::function<std::string(const Json&)>& html_view) {
  Json report = template_report();
  detail::Shape all = html_shape(html_view(report));
  report["verdict"] = "pass";
  const detail::Shape pass = html_shape(html_view(report));
  for (auto [to, from] : {std::pair{&all.elements, &pass.elements}, std::pair{&all.attributes, &pass.attributes},
                          std::pair{&all.classes, &pass.classes}, std::pair{&all.hrefs, &pass.hrefs},
                          std::pair{&all.scripts, &pass.scripts}}) {
    to->insert(from->begin(), from->end());
  }
  return all;
}

// The page holds nothing that `benign` (the page of the same report with benign strings)
// does not: no element, attribute, class, script or link of a string's making.
inline std::string html_problems(const std::string& page, const detail::Shape& benign) {
  const detail::Shape s = html_shape(page);
  std::string p = detail::not_in(s.elements, benign.elements, "html: an element");
  if (p.empty()) p = detail::not_in(s.attributes, benign.attributes, "html: an attribute");
  if (p.empty()) p = detail::not_in(s.classes, benign.classes, "html: a class");
  if (p.empty()) p = detail::not_in(s.scripts, benign.scripts, "html: a script");
  for (const auto& href : s.hrefs) {
    if (p.empty() && href.rfind("#finding-", 0) != 0) p = "html: a link out of the page: " + href;
  }
  return p;
}

// Each workflow command is one line, no control character in it, its properties file= and
// title= alone (no ',' or ':' of a string's making).
inline std::string github_problems(const std::vector<std::string>& lines) {
  for (const auto& line : lines) {
    const std::string c = control_in(line);
    if (!c.empty()) return "github: " + c + " in: " + line;
    std::size_t at = 0;
    for (const char* command : {"::error ", "::warning ", "::notice "}) {
      if (line.rfind(command, 0) == 0) at = std::char_traits<char>::length(command);
    }
    if (at == 0) return "github: not a workflow command: " + line;
    const std::size_t end = line.find("::", at);
    if (end == std::string::npos) return "github: no message: " + line;
    const std::string props = line.substr(at, end - at);
    for (std::size_t i = 0; i <= props.size();) {
      std::size_t comma = props.find(',', i);
      if (comma == std::string::npos) comma = props.size();
      const std::string item = props.substr(i, comma - i);
      if (item.rfind("file=", 0) != 0 && item.rfind("title=", 0) != 0)
        return "github: a property of a string's making: " + item;
      if (item.find(':') != std::string::npos) return "github: ':' in a property: " + item;
      i = comma + 1;
    }
  }
  return "";
}

// The markdown: no '<' but the start of the view's own tags, no '&' but an entity it writes,
// no control character (a tab only inside a code block); each line one the view writes (the
// heading, the counts, a table row of exactly five cells, a fix, a <details> summary, a code
// block whose lines all stay inside the list item), as many rows as findings shown; outside
// the code and summary lines, no '[' or ']' and no code span of a string's making.
inline std::string markdown_problems(const std::string& md, std::size_t findings) {
  using detail::ends;
  using detail::starts;
  static const char* const kTags[] = {"<details>", "</details>", "<summary>", "</summary>",
                                      "<code>",    "</code>",    "<pre>",     "</pre>"};
  static const char* const kEntities[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
  for (std::size_t i = 0; i < md.size(); ++i) {
    bool ok = true;
    if (md[i] == '<') {
      ok = false;
      for (const char* t : kTags) ok = ok || md.compare(i, std::char_traits<char>::length(t), t) == 0;
    } else if (md[i] == '&') {
      ok = false;
      for (const char* e : kEntities) ok = ok || md.compare(i, std::char_traits<char>::length(e), e) == 0;
    }
    if (!ok)
      return "markdown: raw '" + std::string(1, md[i]) + "' at byte " + std::to_string(i) + ": " + md.substr(i, 40);
  }
  std::vector<std::string> lines;
  for (std::size_t i = 0; i <= md.size();) {
    std::size_t nl = md.find('\n', i);
    if (nl == std::string::npos) nl = md.size();
    lines.push_back(md.substr(i, nl - i));
    i = nl + 1;
  }
  bool in_code = false, cut = false;
  std::size_t rows = 0;
  for (std::size_t k = 0; k < lines.size(); ++k) {
    const std::string& line = lines[k];
    const std::string where = "markdown line " + std::to_string(k + 1) + ": ";
    const bool code_start = starts(line, "  <pre><code>");
    if (in_code || code_start) {
      if (!starts(line, "  ")) return where + "a code line outside the list item: " + line;
      const std::string c = control_in(line, "\t");
      if (!c.empty()) return where + c;
      const std::size_t close = line.find("</code></pre>");
      if (close != std::string::npos && close + 13 != line.size()) return where + "text after the code block: " + line;
      if (line.find("<pre>", code_start ? 3 : 0) != std::string::npos) return where + "a <pre> in the code: " + line;
      in_code = close == std::string::npos;
      continue;
    }
    const std::string c = control_in(line);
    if (!c.empty()) return where + c;
    const bool summary =
        line.size() >= 41 && starts(line, "<details><summary><code>") && ends(line, ": fixes</summary>");
    const bool row = starts(line, "| ") && ends(line, " |");
    const bool known = (k == 0 && starts(line, "## batchcheck: ")) || line.empty() || k == 2 || row || summary ||
                       starts(line, "- **") || line == "</details>" || line == "No findings." ||
                       ends(line, " left out to keep this summary small: see the JSON report.");
    if (!known) return where + "not a line the view writes: " + line;
    if (summary) {
      // An HTML block: markdown is not read there; only the view's own tags at its ends.
      const std::string inner = line.substr(24, line.size() - 24 - 17);
      const std::size_t tag = inner.find('<');
      if (tag == std::string::npos || inner.compare(tag, 7, "</code>") != 0 ||
          inner.find('<', tag + 1) != std::string::npos) {
        return where + "a tag of a string's making in the summary: " + line;
      }
      continue;
    }
    std::size_t pipes = 0, ticks = 0;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (!detail::unescaped(line, i)) continue;
      if (line[i] == '|') ++pipes;
      if (line[i] == '`') ++ticks;
      if (line[i] == '[' || line[i] == ']') return where + "an unescaped bracket (a link or an image): " + line;
    }
    if (ticks % 2) return where + "an unpaired backtick: " + line;
    if (row && pipes != 6) return where + std::to_string(pipes) + " cell borders: " + line;
    if (!row && pipes > 0) return where + "a cell border outside the table: " + line;
    rows += row;
    cut = cut || ends(line, " left out to keep this summary small: see the JSON report.");
  }
  if (in_code) return "markdown: a code block that does not end";
  if (!cut && findings > 0 && rows != findings + 2) {
    return "markdown: " + std::to_string(rows) + " table rows for " + std::to_string(findings) + " findings";
  }
  return "";
}

// The scan result the stderr summary shows, with the report's strings: its config, device,
// mode, verdict and gate, and each finding's id, message, evidence, root cause, CUDA text,
// occurrences' messages and fixes (the numbers fixed, as a scan makes them).
inline ScanResult summary_input(const Json& report) {
  auto text = [](const Json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  ScanResult r;
  r.report = {{"config", text(report, "config")},
              {"device", text(report, "device")},
              {"mode", text(report, "mode")},
              {"verdict", text(report, "verdict")},
              {"fail_on", text(report, "fail_on")},
              {"batches", {{"checked", 3}, {"first", nullptr}, {"last", nullptr}}},
              {"geometry", {{"world_size", 2}}},
              {"summary", {{"errors", 1}, {"warnings", 0}, {"infos", 0}}}};
  uint64_t n = 0;
  for (const auto& f : report["findings"]) {
    Finding out;
    out.id = text(f, "id");
    out.severity = Severity::Error;
    out.message = text(f, "message");
    out.batch = n++;
    out.rank = 1;
    out.samples = {1, 2};
    out.count = 2;
    out.cuda_equivalent = text(f, "cuda_equivalent");
    if (f.contains("evidence") && f["evidence"].is_object()) out.evidence = f["evidence"];
    if (f.contains("root_cause") && f["root_cause"].is_object()) out.root_cause = f["root_cause"];
    for (const auto& fix : f.value("fixes", Json::array())) {
      out.fixes.push_back({text(fix, "id"), text(fix, "title"), text(fix, "code"), text(fix, "tradeoff"), {}});
    }
    for (const auto& o : f.value("occurrences", Json::array())) {
      Occurrence occ;
      occ.batch = n;
      occ.message = text(o, "message");
      out.occurrences.push_back(std::move(occ));
    }
    // Strings the summary reads from the evidence and the root cause, whatever the template has.
    out.evidence["location"] = out.message;
    out.evidence["source_line"] = out.cuda_equivalent;
    if (!out.root_cause.is_object()) out.root_cause = Json::object();
    out.root_cause["file"] = out.id;
    out.root_cause["line"] = 3;
    out.root_cause["source_line"] = out.message;
    r.findings.push_back(std::move(out));
  }
  return r;
}

// The summary's lines: no control character (a fix's code keeps its own line breaks, each its
// own line), and none that starts, after spaces, with "::" (GitHub's runner trims them).
inline std::string summary_problems(const std::string& text) {
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(start, nl - start);
    const std::string c = control_in(line);
    if (!c.empty()) return "summary: " + c + " in: " + line;
    const std::size_t b = line.find_first_not_of(' ');
    if (b != std::string::npos && line.compare(b, 2, "::") == 0) return "summary: a workflow command: " + line;
    if (line.find("##[") != std::string::npos) return "summary: GitHub's older command form: " + line;
    start = nl + 1;
  }
  return "";
}

}  // namespace batchcheck::view_checks
