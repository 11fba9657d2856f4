#include "core/views/summary.h"

#include <sstream>
#include <utility>

#include "core/base/escape.h"
#include "core/base/text.h"
#include "core/views/view_text.h"

// The human summary on stderr: a view of the report, like the JSON itself. Every string that
// came from the model, the data or a file name goes through terminal_text/log_text: a terminal
// and a CI log parser read these lines.
namespace batchcheck {

std::string format_summary(const ScanResult& result) {
  const auto& r = result.report;
  std::ostringstream out;
  const auto& b = r["batches"];
  out << "batchcheck: " << terminal_text(scan_name(r)) << ": checked " << plural(b["checked"].get<uint64_t>(), "batch", "batches")
      << " on " << terminal_text(r["device"].get<std::string>()) << " (" << terminal_text(r["mode"].get<std::string>()) << " mode)"
      << (result.complete                               ? ""
          : r.value("stopped_at_first_error", false) ? ", STOPPED AT THE FIRST ERROR (--fail-fast)"
                                                     : ", INTERRUPTED")
      << "\n";
  // A user's step takes every field and returns its loss: no prediction, no target of batchcheck's.
  const bool step = r.contains("loss") && r["loss"].value("type", std::string()) == "step";
  auto line = [&](const char* name, const nlohmann::ordered_json& s) {
    if (s.is_null()) return;
    auto shape = [](const nlohmann::ordered_json& j) { return j.is_null() ? std::string("-") : j.dump(); };
    out << "  " << name << " batch " << s["index"] << ": " << plural(s["size"].get<uint64_t>(), "sample") << ", input " << shape(s["input_shape"]);
    if (step) {
      out << " -> your step's loss\n";
    } else {
      out << " -> output " << shape(s["output_shape"]) << ", target " << shape(s["target_shape"]) << "\n";
    }
  };
  // A saved report (render --text) may lack them: read, never indexed blind.
  const nlohmann::ordered_json first = b.value("first", nlohmann::ordered_json()), last = b.value("last", nlohmann::ordered_json());
  if (first.is_object()) line("first", first);
  if (last.is_object() && last != first) line("last ", last);
  for (const auto& f : result.findings) {
    out << to_string(f.severity) << ": " << terminal_text(f.id);  // a merged part's, as written
    if (f.probe) out << " (probe)";
    if (f.batch) out << " at batch " << *f.batch;
    if (f.rank && r["geometry"]["world_size"].get<uint64_t>() > 1) out << " of rank " << *f.rank;
    if (!f.samples.empty()) {
      std::vector<int64_t> head(f.samples.begin(), f.samples.begin() + std::min<std::size_t>(f.samples.size(), 5));
      out << ", samples [" << join_ints(head) << (f.samples.size() > 5 || f.count > head.size() ? ", ..." : "") << "]";
    }
    out << "\n    " << log_text(f.message) << "\n";
    // The user's line that raised (forward and backward errors).
    if (f.evidence.contains("location") && f.evidence["location"].is_string()) {
      std::string where = terminal_text(f.evidence["location"].get<std::string>());
      if (f.evidence.contains("source_line") && f.evidence["source_line"].is_string()) {
        where += ": " + terminal_text(f.evidence["source_line"].get<std::string>());
      }
      out << "    " << guard_log_line(std::move(where)) << "\n";  // the whole line: ":" + ": " is "::"
    }
    // Where the bad value was born: the user's line (root_cause, when localized).
    const auto& rc = f.root_cause;
    if (rc.is_object() && rc.contains("file") && rc["file"].is_string() && rc.contains("line")) {
      out << "    root cause at " << terminal_text(rc["file"].get<std::string>()) << ":" << rc["line"].dump();
      if (rc.contains("source_line") && rc["source_line"].is_string()) out << ": " << terminal_text(rc["source_line"].get<std::string>());
      out << "\n";
    }
    // Later batches that failed for another reason under the same id (a few).
    int others = 0;
    for (const auto& o : f.occurrences) {
      if (o.message.empty() || !o.batch || ++others > 3) continue;
      out << "    at batch " << *o.batch;
      if (o.rank && r["geometry"]["world_size"].get<uint64_t>() > 1) out << " of rank " << *o.rank;
      out << ": " << terminal_text(o.message) << "\n";
    }
    if (!f.cuda_equivalent.empty()) out << "    on CUDA: " << terminal_text(f.cuda_equivalent) << "\n";
    for (const auto& fix : f.fixes) {
      std::string code = log_lines(fix.code.empty() ? fix.title : fix.code);
      // Multi-line code (a whole collate_fn) stays readable under its fix line.
      for (std::size_t p = code.find('\n'); p != std::string::npos; p = code.find('\n', p + 1)) code.insert(p + 1, "        ");
      out << "    fix " << terminal_text(fix.id) << ": " << code;
      if (!fix.tradeoff.empty()) out << "  (" << terminal_text(fix.tradeoff) << ")";
      out << "\n";
      if (!fix.verified.empty()) out << "        verified: " << terminal_text(fix.verified) << "\n";
    }
  }
  const auto& s = r["summary"];
  out << "verdict: " << terminal_text(r["verdict"].get<std::string>()) << " (" << plural(s["errors"].get<uint64_t>(), "error") << ", "
      << plural(s["warnings"].get<uint64_t>(), "warning") << ", " << plural(s["infos"].get<uint64_t>(), "info")
      << "; --fail-on " << terminal_text(r["fail_on"].get<std::string>()) << ")\n";
  return out.str();
}

}  // namespace batchcheck
