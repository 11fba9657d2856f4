#include "core/views/views.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "core/base/errors.h"
#include "core/base/escape.h"
#include "core/base/text.h"
#include "core/report/catalog.h"
#include "core/views/view_text.h"

namespace batchcheck {

namespace {

using Json = nlohmann::ordered_json;

// The ranks a finding belongs to: its `ranks`, its `rank`, else the first checked rank (a
// probe or a check of the model itself).
std::vector<uint64_t> finding_ranks(const Json& f, uint64_t first) {
  if (f.contains("ranks") && f["ranks"].is_array() && !f["ranks"].empty()) return f["ranks"].get<std::vector<uint64_t>>();
  if (f.contains("rank") && f["rank"].is_number_integer() && f["rank"].get<int64_t>() >= 0) return {f["rank"].get<uint64_t>()};
  return {first};
}

std::string failure_body(const Json& f) {
  std::ostringstream b;
  b << f.value("severity", std::string()) << " " << f.value("id", std::string()) << " at " << where_text(f)
    << ", samples [" << samples_text(f, 32) << "]\n";
  if (f.contains("occurrences")) {
    for (const auto& o : f["occurrences"]) {
      if (!o.is_object()) continue;
      b << "  batch " << json_text(o.value("batch", Json())) << " of rank " << json_text(o.value("rank", Json())) << ": "
        << plural(o.value("count", uint64_t{0}), "sample");
      if (!field_text(o, "message").empty()) b << ": " << field_text(o, "message");
      b << "\n";
    }
  }
  if (f.contains("root_cause") && f["root_cause"].is_object()) {
    b << "root cause:";
    // Its words and numbers; the tensors' statistics and the chain stay in the JSON report.
    for (const auto& [key, v] : f["root_cause"].items()) {
      if (v.is_object() || (v.is_array() && !v.empty() && !v.front().is_primitive())) continue;
      b << " " << key << "=" << (v.is_string() ? v.get<std::string>() : json_text(v)) << ";";
    }
    b << "\n";
  }
  if (f.contains("cuda_equivalent") && f["cuda_equivalent"].is_string()) b << "on CUDA: " << f["cuda_equivalent"].get<std::string>() << "\n";
  for (const auto& fix : f.value("fixes", Json::array())) {
    b << "fix " << field_text(fix, "id") << ": " << (field_text(fix, "code").empty() ? field_text(fix, "title") : field_text(fix, "code")) << "\n";
  }
  return b.str();
}

}  // namespace

void require_report(const nlohmann::ordered_json& report, const std::string& file) {
  if (!report.is_object() || !report.contains("schema_version") || !report.contains("findings") ||
      !report["findings"].is_array() || !report.contains("verdict")) {
    throw InputError(file, "", "not a batchcheck report (the JSON `batchcheck scan -o` writes)");
  }
  for (std::size_t i = 0; i < report["findings"].size(); ++i) {
    const Json& f = report["findings"][i];
    if (!f.is_object() || !f.contains("id") || !f["id"].is_string() || !f.contains("severity") || !f["severity"].is_string() ||
        !f.contains("message") || !f["message"].is_string()) {
      throw InputError(file, "findings[" + std::to_string(i) + "]", "expected an object with id, severity and message");
    }
  }
}

std::string junit_view(const nlohmann::ordered_json& report) {
  std::vector<uint64_t> ranks;
  if (report.contains("batches") && report["batches"].contains("ranks") && report["batches"]["ranks"].is_array()) {
    ranks = report["batches"]["ranks"].get<std::vector<uint64_t>>();
  }
  if (ranks.empty()) ranks = {0};
  uint64_t world = 1;
  if (report.contains("geometry") && report["geometry"].contains("world_size")) world = report["geometry"]["world_size"].get<uint64_t>();
  const int fails_at = fail_rank(report);
  const std::string config = scan_name(report);

  // Per rank, per id: the findings, in report order.
  std::map<uint64_t, std::map<std::string, std::vector<const Json*>>> by_rank;
  for (const auto& f : report["findings"]) {
    for (uint64_t r : finding_ranks(f, ranks.front())) {
      // A rank that has no suite of its own (one suite for one rank, --rank R): the first.
      if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) r = ranks.front();
      auto& list = by_rank[r][f["id"].get<std::string>()];
      if (std::find(list.begin(), list.end(), &f) == list.end()) list.push_back(&f);
    }
  }
  const auto& catalog = finding_catalog();
  std::ostringstream suites;
  uint64_t total_tests = 0, total_failures = 0;
  for (uint64_t r : ranks) {
    std::ostringstream cases;
    uint64_t failures = 0;
    for (const auto& info : catalog) {
      cases << "    <testcase classname=\"batchcheck." << xml_escape(info.stage) << "\" name=\"" << info.id << "\"";
      const auto it = by_rank[r].find(info.id);
      if (it == by_rank[r].end()) {
        cases << "/>\n";
        continue;
      }
      const std::vector<const Json*>& found = it->second;
      const Json* failing = nullptr;
      for (const Json* f : found) {
        if (severity_rank((*f)["severity"].get<std::string>()) >= fails_at) {
          failing = f;
          break;
        }
      }
      cases << ">\n";
      if (failing) {
        ++failures;
        std::string body;
        for (const Json* f : found) body += failure_body(*f);
        cases << "      <failure message=\"" << xml_escape((*failing)["message"].get<std::string>()) << "\" type=\"" << info.id
              << "\">" << xml_escape(body) << "</failure>\n";
      } else {
        // Below --fail-on: the check passes; what it saw is kept where CI shows a test's output.
        std::string text;
        for (const Json* f : found) text += (*f)["severity"].get<std::string>() + ": " + (*f)["message"].get<std::string>() + "\n";
        cases << "      <system-out>" << xml_escape(text) << "</system-out>\n";
      }
      cases << "    </testcase>\n";
    }
    total_tests += catalog.size();
    total_failures += failures;
    const std::string name = world > 1 ? "batchcheck " + config + " (rank " + std::to_string(r) + ")" : "batchcheck " + config;
    suites << "  <testsuite name=\"" << xml_escape(name) << "\" tests=\"" << catalog.size() << "\" failures=\"" << failures
           << "\" errors=\"0\" skipped=\"0\">\n"
           << cases.str() << "  </testsuite>\n";
  }
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<testsuites name=\"batchcheck\" tests=\"" << total_tests << "\" failures=\"" << total_failures
      << "\" errors=\"0\">\n"
      << suites.str() << "</testsuites>\n";
  return out.str();
}

namespace {

// One line of text with no control character left to act: line breaks and tabs become
// spaces (a line break would end a table row or start a block), every other control and the
// bidirectional overrides are shown as escapes (\x1b, \u{202E}).
std::string one_line(const std::string& raw) {
  std::string flat = utf8_clean(raw);
  for (char& c : flat) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return terminal_text(flat);
}

// Untrusted text in markdown's inline context (a table cell, a list item, the heading),
// shown as the very characters: no raw HTML (< > & as entities), no link or image ([ ]), no
// code span, emphasis or strikethrough (` * _ ~), no cell break (|); a backslash is escaped
// too, so that the text cannot undo the escapes that follow it.
std::string md_text(const std::string& raw) {
  std::string out;
  for (char c : one_line(raw)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\\': case '`': case '*': case '_': case '~': case '[': case ']': case '|':
        out += '\\';
        out += c;
        break;
      default: out += c;
    }
  }
  return out;
}

// Text in monospace: a code span while the text is plain (what ids and paths are), where it
// shows as it is; else <code> around the escaped text (inside a code span escapes show
// literally, so hostile text cannot go there).
std::string md_code(const std::string& raw) {
  bool plain = !raw.empty();
  for (char c : raw) {
    plain = plain && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      std::string("-_./:=,+@()# ").find(c) != std::string::npos);
  }
  return plain ? "`" + raw + "`" : "<code>" + md_text(raw) + "</code>";
}

// Text on a line of an HTML block (<details><summary>): the markdown is not parsed there,
// so HTML escaping alone, on one line (a blank line would end the block).
std::string md_html_text(const std::string& raw) { return xml_escape(one_line(raw)); }

// A fix's code as a <pre><code> HTML block inside the list item: markdown leaves its lines
// as they are (no fence that a ``` in the code could close), HTML shows the escaped text
// literally. Every line is indented as the list item's content, so none of them can end the
// item and be read as markdown; CR counts as a line break there, so lines are split on it too.
std::string md_code_block(const std::string& raw) {
  const std::string clean = utf8_clean(raw);
  std::string out = "  <pre><code>";
  std::size_t i = 0;
  for (bool first = true; i <= clean.size(); first = false) {
    std::size_t end = clean.find_first_of("\r\n", i);
    if (end == std::string::npos) end = clean.size();
    // Tabs kept, as code indents with them; each other control shown as an escape.
    std::string line;
    for (std::size_t a = i; a <= end;) {
      std::size_t tab = clean.find('\t', a);
      if (tab == std::string::npos || tab > end) tab = end;
      line += terminal_text(std::string_view(clean).substr(a, tab - a));
      if (tab < end) line += '\t';
      a = tab + 1;
    }
    out += (first ? "" : "\n  ") + xml_escape(line);
    if (end == clean.size()) break;
    i = end + (clean.compare(end, 2, "\r\n") == 0 ? 2 : 1);
  }
  return out + "</code></pre>\n";
}

}  // namespace

std::string markdown_view(const nlohmann::ordered_json& report, std::size_t max_bytes) {
  const Json& s = report.value("summary", Json::object());
  const std::string verdict = field_text(report, "verdict");
  std::ostringstream head;
  head << "## batchcheck: " << (verdict == "fail" ? "FAIL" : verdict == "pass" ? "pass" : md_text(verdict)) << " — "
       << md_code(scan_name(report)) << "\n\n";
  head << plural(s.value("errors", uint64_t{0}), "error") << ", " << plural(s.value("warnings", uint64_t{0}), "warning") << ", "
       << plural(s.value("infos", uint64_t{0}), "info");
  if (report.contains("batches") && report["batches"].contains("checked")) {
    head << "; " << plural(report["batches"]["checked"].get<uint64_t>(), "batch", "batches") << " checked on "
         << md_text(field_text(report, "device")) << " (" << md_text(field_text(report, "mode")) << " mode)";
  }
  if (report.contains("complete") && report["complete"] == false) head << "; **interrupted**: not every batch was checked";
  head << "; fails on " << md_text(report.value("fail_on", std::string("error"))) << "\n\n";
  const Json& findings = report["findings"];
  if (findings.empty()) return head.str() + "No findings.\n";
  head << "| severity | id | where | samples | message |\n| --- | --- | --- | --- | --- |\n";

  std::string table, details;
  std::size_t shown = 0;
  const std::string foot_reserve(200, ' ');  // room for the line saying what was left out
  for (const auto& f : findings) {
    std::string row = "| " + md_text(field_text(f, "severity")) + " | " + md_code(field_text(f, "id")) + " | " +
                      md_text(where_text(f)) + " | " + md_text(samples_text(f, 8)) + " | " + md_text(field_text(f, "message")) +
                      " |\n";
    std::string detail;
    const Json fixes = f.value("fixes", Json::array());
    if (!fixes.empty()) {
      detail = "<details><summary><code>" + md_html_text(field_text(f, "id")) + "</code> at " + md_html_text(where_text(f)) +
               ": fixes</summary>\n\n";
      for (const auto& fix : fixes) {
        detail += "- **" + md_text(field_text(fix, "id")) + "**: " + md_text(field_text(fix, "title")) + "\n";
        const std::string code = field_text(fix, "code");
        if (!code.empty()) detail += "\n" + md_code_block(code);
        if (!field_text(fix, "verified").empty()) detail += "\n  verified: " + md_text(field_text(fix, "verified")) + "\n";
      }
      detail += "\n</details>\n";
    }
    if (head.str().size() + table.size() + row.size() + details.size() + detail.size() + foot_reserve.size() > max_bytes) break;
    table += row;
    details += detail;
    ++shown;
  }
  std::string out = head.str() + table;
  if (shown < findings.size()) {
    out += "\n" + std::to_string(findings.size() - shown) + " more finding" + (findings.size() - shown == 1 ? "" : "s") +
           " left out to keep this summary small: see the JSON report.\n";
  }
  if (!details.empty()) out += "\n" + details;
  return out;
}

namespace {

// Workflow command escaping: the message (data) and the properties. %, CR and LF as GitHub
// decodes them; every other control character (ESC would reach the log viewer as a terminal
// escape) and the bidirectional overrides shown as escapes, so each command is one plain line.
std::string gh_data(const std::string& s) {
  std::string out;
  for (char c : utf8_clean(s)) {
    if (c == '%') out += "%25";
    else if (c == '\r') out += "%0D";
    else if (c == '\n') out += "%0A";
    else out += c;
  }
  return terminal_text(out);
}

std::string gh_property(const std::string& s) {
  std::string out;
  for (char c : gh_data(s)) {
    if (c == ':') out += "%3A";
    else if (c == ',') out += "%2C";
    else out += c;
  }
  return out;
}

}  // namespace

std::vector<std::string> github_commands(const nlohmann::ordered_json& report) {
  constexpr std::size_t kShown = 10;  // GitHub shows 10 errors and 10 warnings per step
  const std::string config = field_text(report, "config");
  std::vector<std::string> out;
  std::map<std::string, std::size_t> count;
  for (const char* severity : {"error", "warning", "info"}) {
    const std::string command = std::string(severity) == "info" ? "notice" : severity;
    for (const auto& f : report["findings"]) {
      if (field_text(f, "severity") != severity) continue;
      if (++count[severity] > kShown) continue;
      const std::string title = "batchcheck " + field_text(f, "id") + " at " + where_text(f);
      out.push_back("::" + command + " file=" + gh_property(config) + ",title=" + gh_property(title) + "::" +
                    gh_data(field_text(f, "message")));
    }
  }
  std::vector<std::string> hidden;
  for (const char* severity : {"error", "warning", "info"}) {
    if (count[severity] > kShown) hidden.push_back(plural(count[severity] - kShown, severity));
  }
  if (!hidden.empty()) {
    out.push_back("::notice title=batchcheck::" + gh_data(join(hidden) + " more than GitHub shows: see the report"));
  }
  return out;
}

}  // namespace batchcheck
