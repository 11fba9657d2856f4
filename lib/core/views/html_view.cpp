#include "core/views/html_view.h"

#include <algorithm>
#include <sstream>

#include "core/base/text.h"
#include "core/report/catalog.h"
#include "core/views/html_plots.h"
#include "core/views/view_text.h"

namespace batchcheck {

namespace {

using Json = nlohmann::ordered_json;

constexpr std::size_t kMaxArticles = 200;     // findings shown in full; the rest are counted
constexpr std::size_t kMaxText = 4000;        // characters of one message, code or evidence
constexpr std::size_t kMaxBatchesListed = 20;
constexpr std::size_t kMaxOccurrences = 10;

// The first `most` bytes of `s`, not ending inside a UTF-8 sequence (the cut half would
// show as U+FFFD).
std::string cut(const std::string& s, std::size_t most) {
  if (s.size() <= most) return s;
  std::size_t n = most;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80 && most - n < 3) --n;
  return s.substr(0, n);
}

// Escaped, and cut: one message may hold a whole traceback.
std::string h(const std::string& raw) {
  if (raw.size() <= kMaxText) return xml_escape(raw);
  const std::string shown = cut(raw, kMaxText);
  return xml_escape(shown) + " … (" + std::to_string(raw.size() - shown.size()) + " more bytes in the JSON report)";
}

// A severity as a class name: the known ones only, so that a report's text cannot add
// classes (the page's CSS and script select on them).
std::string sev_class(const std::string& severity) { return severity_rank(severity) >= 0 ? severity : "unknown"; }

uint64_t count_of(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number_unsigned() ? j[key].get<uint64_t>() : 0;
}

const char* const kStyle = R"(
:root{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#111827;background:#f9fafb}
body{margin:0 auto;max-width:1080px;padding:0 20px 40px}
h1{font-size:1.6em;margin:0}h2{font-size:1.2em;margin:28px 0 8px;border-bottom:1px solid #e5e7eb;padding-bottom:4px}
h3{font-size:1.05em;margin:0 0 6px}
.verdict{margin:20px 0 8px;padding:16px 20px;border-radius:8px;color:#fff}
.verdict.fail{background:#b91c1c}.verdict.pass{background:#15803d}.verdict p{margin:6px 0 0}
.counts span{display:inline-block;margin-right:14px;font-weight:600}
.muted{color:#6b7280;font-size:.9em}
svg{width:100%;height:auto;display:block}
.lbl{font-size:11px;fill:#374151}
figure.plot{margin:10px 0 14px}figcaption{font-size:.9em;font-weight:600;margin-bottom:2px}
.swatch{display:inline-block;width:10px;height:10px;margin:0 3px 0 8px;vertical-align:middle}
table{border-collapse:collapse;width:100%;font-size:.9em}th,td{border:1px solid #e5e7eb;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6}
.finding{background:#fff;border:1px solid #e5e7eb;border-left:6px solid #9ca3af;border-radius:6px;padding:12px 16px;margin:12px 0}
.finding.error{border-left-color:#dc2626}.finding.warning{border-left-color:#f59e0b}.finding.info{border-left-color:#2563eb}
.sev{display:inline-block;border-radius:4px;padding:1px 6px;font-size:.8em;color:#fff;margin-right:6px;background:#6b7280}
.sev.error{background:#dc2626}.sev.warning{background:#d97706}.sev.info{background:#2563eb}
.fix{margin:8px 0}.fix .code{position:relative}
pre{background:#111827;color:#f9fafb;padding:10px 12px;border-radius:6px;overflow-x:auto;white-space:pre-wrap;word-break:break-word;margin:4px 0}
button.copy{position:absolute;top:4px;right:4px;font-size:.75em;padding:2px 8px;cursor:pointer}
code{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.9em}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:6px 0}dt{color:#6b7280}dd{margin:0}
details pre{background:#f3f4f6;color:#111827}
)";

// Copy buttons, and a mark that the page's script ran (the browser test reads it).
const char* const kScript = R"(
(function () {
  function copied(b) { b.textContent = 'copied'; setTimeout(function () { b.textContent = 'copy'; }, 1500); }
  function fallback(text, b) {
    var t = document.createElement('textarea'); t.value = text; document.body.appendChild(t); t.select();
    try { document.execCommand('copy'); copied(b); } catch (e) { b.textContent = 'select and copy'; }
    document.body.removeChild(t);
  }
  var buttons = document.querySelectorAll('button.copy');
  for (var i = 0; i < buttons.length; i++) {
    buttons[i].addEventListener('click', function (ev) {
      var b = ev.currentTarget, text = b.parentNode.querySelector('code').textContent;
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () { copied(b); }, function () { fallback(text, b); });
      } else { fallback(text, b); }
    });
  }
  document.body.setAttribute('data-rendered', 'ok');
})();
)";

std::string head_section(const Json& report) {
  const std::string verdict = field_text(report, "verdict");
  const Json s = report.value("summary", Json::object());
  std::ostringstream o;
  o << "<header id=\"verdict\" class=\"verdict " << (verdict == "fail" ? "fail" : "pass") << "\"><h1>batchcheck: "
    << (verdict == "fail" ? "FAIL" : verdict == "pass" ? "pass" : h(verdict)) << "</h1><p><code>" << h(scan_name(report))
    << "</code></p><p class=\"counts\"><span id=\"count-errors\">" << plural(count_of(s, "errors"), "error") << "</span><span>"
    << plural(count_of(s, "warnings"), "warning") << "</span><span>" << plural(count_of(s, "infos"), "info")
    << "</span>fails on " << h(field_text(report, "fail_on").empty() ? std::string("error") : field_text(report, "fail_on")) << "</p>";
  std::vector<std::string> facts;
  if (report.contains("batches") && report["batches"].is_object()) {
    facts.push_back(plural(count_of(report["batches"], "checked"), "batch", "batches") + " checked");
  }
  if (!field_text(report, "device").empty()) facts.push_back("on " + field_text(report, "device"));
  if (!field_text(report, "mode").empty()) facts.push_back(field_text(report, "mode") + " mode");
  if (report.contains("backward") && report["backward"].is_boolean()) {
    facts.push_back(report["backward"].get<bool>() ? "with backward" : "forward only");
  }
  if (report.contains("tool") && report["tool"].is_object() && !field_text(report["tool"], "libtorch").empty()) {
    facts.push_back("LibTorch " + field_text(report["tool"], "libtorch"));
  }
  o << "<p>" << h(join(facts, " · ")) << "</p>";
  if (report.contains("complete") && report["complete"] == false) o << "<p><strong>Incomplete:</strong> not every batch was checked (see the notes).</p>";
  o << "</header>";
  return o.str();
}

std::string geometry_section(const Json& report) {
  std::ostringstream o;
  o << "<section id=\"geometry\"><h2>Batches as the loader delivers them</h2>";
  const Json g = report.value("geometry", Json::object());
  if (g.is_object() && g.contains("batches_per_rank")) {
    if (!field_text(g, "pytorch_equivalent").empty()) o << "<p><code>" << h(field_text(g, "pytorch_equivalent")) << "</code></p>";
    const uint64_t samples = report.contains("dataset") ? count_of(report["dataset"], "samples") : 0;
    o << "<p>" << plural(samples, "sample") << "; " << plural(count_of(g, "batches_per_rank"), "batch", "batches") << " per rank";
    if (count_of(g, "world_size") > 1) o << " on each of " << count_of(g, "world_size") << " ranks";
    o << ", the last holding " << plural(count_of(g, "last_batch_size"), "sample") << "; "
      << plural(count_of(g, "padded_samples"), "padded sample") << ", " << plural(count_of(g, "dropped_samples"), "dropped sample")
      << ".</p>";
  }
  o << strip_svg(report) << "</section>";
  return o.str();
}

std::string fix_html(const Json& fix) {
  std::ostringstream o;
  o << "<div class=\"fix\"><strong>" << h(field_text(fix, "title")) << "</strong> <span class=\"muted\">(" << h(field_text(fix, "id"))
    << ")</span>";
  const std::string code = field_text(fix, "code");
  if (!code.empty()) {
    o << "<div class=\"code\"><pre><code>" << h(code) << "</code></pre><button class=\"copy\" type=\"button\">copy</button></div>";
  }
  if (!field_text(fix, "tradeoff").empty()) o << "<div class=\"muted\">" << h(field_text(fix, "tradeoff")) << "</div>";
  if (!field_text(fix, "verified").empty()) o << "<div class=\"muted\">verified: " << h(field_text(fix, "verified")) << "</div>";
  o << "</div>";
  return o.str();
}

// A value of root_cause or evidence as text: strings as they are, the rest as JSON.
std::string value_text(const Json& v) { return v.is_string() ? v.get<std::string>() : json_text(v); }

std::string finding_html(const Json& f, std::size_t k) {
  const std::string sev = field_text(f, "severity"), id = field_text(f, "id");
  std::ostringstream o;
  o << "<article class=\"finding " << sev_class(sev) << "\" id=\"finding-" << k << "\"><h3><span class=\"sev " << sev_class(sev)
    << "\">" << h(sev) << "</span><code>" << h(id) << "</code> — " << h(where_text(f)) << "</h3><p>" << h(field_text(f, "message")) << "</p><dl>";
  if (const FindingInfo* info = find_finding(id)) o << "<dt>meaning</dt><dd>" << h(info->what) << "</dd>";
  if (f.contains("batches") && f["batches"].is_array() && !f["batches"].empty()) {
    const Json& b = f["batches"];
    std::vector<std::string> listed;
    for (std::size_t i = 0; i < b.size() && i < kMaxBatchesListed; ++i) listed.push_back(json_text(b[i]));
    o << "<dt>batches</dt><dd>" << h(join(listed));
    if (b.size() > kMaxBatchesListed) o << " … and " << b.size() - kMaxBatchesListed << " more";
    o << "</dd>";
  }
  if (f.contains("samples") && f["samples"].is_array() && !f["samples"].empty()) {
    o << "<dt>samples</dt><dd>" << h(samples_text(f, 32)) << " (" << plural(count_of(f, "count"), "sample") << " concerned)</dd>";
  }
  if (f.contains("root_cause") && f["root_cause"].is_object()) {
    o << "<dt>root cause</dt><dd><dl class=\"root-cause\">";
    for (const auto& [key, v] : f["root_cause"].items()) o << "<dt>" << h(key) << "</dt><dd>" << h(value_text(v)) << "</dd>";
    o << "</dl></dd>";
  }
  if (!field_text(f, "cuda_equivalent").empty()) o << "<dt>on CUDA</dt><dd><code>" << h(field_text(f, "cuda_equivalent")) << "</code></dd>";
  o << "</dl>";
  const Json occ = f.value("occurrences", Json::array());
  if (occ.is_array() && occ.size() > 1) {
    o << "<details><summary>" << plural(std::max<uint64_t>(count_of(f, "occurrences_total"), occ.size()), "occurrence")
      << "</summary><ul>";
    for (std::size_t i = 0; i < occ.size() && i < kMaxOccurrences; ++i) {
      const Json& e = occ[i];
      if (!e.is_object()) continue;
      o << "<li>batch " << h(json_text(e.value("batch", Json()))) << " of rank " << h(json_text(e.value("rank", Json()))) << ": "
        << plural(count_of(e, "count"), "sample");
      if (!field_text(e, "message").empty()) o << ": " << h(field_text(e, "message"));
      o << "</li>";
    }
    o << "</ul></details>";
  }
  for (const auto& fix : f.value("fixes", Json::array())) o << fix_html(fix);
  if (f.contains("evidence") && f["evidence"].is_object() && !f["evidence"].empty()) {
    o << "<details><summary>evidence</summary><pre>" << h(json_text(f["evidence"], 2)) << "</pre></details>";
  }
  o << "</article>";
  return o.str();
}

std::string findings_section(const Json& report) {
  std::ostringstream o;
  o << "<section id=\"findings\"><h2>Findings</h2>";
  const Json& findings = report["findings"];
  if (findings.empty()) {
    o << "<p>No findings: every batch passed.</p></section>";
    return o.str();
  }
  o << "<table><tr><th>severity</th><th>id</th><th>where</th><th>samples</th><th>message</th></tr>";
  for (std::size_t k = 0; k < findings.size() && k < kMaxArticles; ++k) {
    const Json& f = findings[k];
    o << "<tr><td><span class=\"sev " << sev_class(field_text(f, "severity")) << "\">" << h(field_text(f, "severity"))
      << "</span></td><td><a href=\"#finding-" << k << "\"><code>" << h(field_text(f, "id")) << "</code></a></td><td>"
      << h(where_text(f)) << "</td><td>" << h(samples_text(f, 8)) << "</td><td>" << h(cut(field_text(f, "message"), 300))
      << "</td></tr>";
  }
  o << "</table>";
  for (std::size_t k = 0; k < findings.size() && k < kMaxArticles; ++k) o << finding_html(findings[k], k);
  if (findings.size() > kMaxArticles) {
    o << "<p>" << findings.size() - kMaxArticles << " more findings are in the JSON report.</p>";
  }
  o << "</section>";
  return o.str();
}

std::string tail_sections(const Json& report) {
  std::ostringstream o;
  const Json sug = report.value("suggestions", Json::object());
  if (sug.is_object() && sug.contains("batch_sizes") && sug["batch_sizes"].is_array() && !sug["batch_sizes"].empty()) {
    o << "<section id=\"suggestions\"><h2>Nearby batch sizes</h2><table><tr><th>batch size</th><th>last batch</th><th>batches</th>"
      << "<th>dropped with drop_last</th></tr>";
    for (const auto& c : sug["batch_sizes"]) {
      o << "<tr><td>" << count_of(c, "batch_size") << "</td><td>" << count_of(c, "tail") << "</td><td>" << count_of(c, "batches")
        << "</td><td>" << count_of(c, "dropped_with_drop_last") << "</td></tr>";
    }
    o << "</table></section>";
  }
  const Json notes = report.value("notes", Json::array());
  if (notes.is_array() && !notes.empty()) {
    o << "<section id=\"notes\"><h2>Notes</h2><ul>";
    for (const auto& n : notes) o << "<li>" << h(n.is_string() ? n.get<std::string>() : json_text(n)) << "</li>";
    o << "</ul></section>";
  }
  return o.str();
}

}  // namespace

std::string html_view(const nlohmann::ordered_json& report) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,"
    << "initial-scale=1\"><title>batchcheck: " << h(field_text(report, "verdict")) << " — " << h(scan_name(report))
    << "</title><style>" << kStyle << "</style></head><body data-rendered=\"no\">";
  o << head_section(report) << geometry_section(report);
  o << "<section id=\"plots\"><h2>Per batch</h2>" << plots_html(report) << "</section>";
  o << findings_section(report) << tail_sections(report);
  std::string version;
  if (report.contains("tool") && report["tool"].is_object()) version = field_text(report["tool"], "version");
  o << "<footer class=\"muted\"><p>batchcheck " << h(version) << " · report schema "
    << h(json_text(report.value("schema_version", Json()))) << " · this page is a view of the JSON report; <code>batchcheck explain ID</code> says more about a finding.</p></footer>";
  o << "<script>" << kScript << "</script></body></html>\n";
  return o.str();
}

}  // namespace batchcheck
