// libFuzzer target: the report views of a report whose every string (values, and the keys
// of root_cause and evidence) comes from the input, as bytes that may be anything. Every view
// renders without throwing and keeps view_checks.h's properties: the JUnit parses as XML, the
// HTML page has nothing the page of benign strings lacks, each GitHub command is one plain
// line, the markdown holds no raw HTML and only the view's own lines, the stderr summary has
// no control character and no workflow command. A violation aborts.
//
// The input is the strings one after another, each ended by a backslash and one other byte
// (FuzzedDataProvider's ConsumeRandomLengthString; "\\\\" is a backslash); once it runs out,
// the rest keep their benign values.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/views/html_view.h"
#include "core/views/views.h"
#include "view_checks.h"

namespace {

using batchcheck::view_checks::Json;

[[noreturn]] void fail(const std::string& what, const Json& report) {
  std::fprintf(stderr, "fuzz_views: %s\nreport: %s\n", what.c_str(),
               report.dump(-1, ' ', true, Json::error_handler_t::replace).c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace vc = batchcheck::view_checks;
  static const Json benign = vc::template_report();
  static const vc::detail::Shape benign_page =
      vc::benign_html_shape([](const Json& r) { return batchcheck::html_view(r); });

  FuzzedDataProvider in(data, size);
  Json report = benign;
  vc::for_each_string(report, [&](std::string& s) {
    if (in.remaining_bytes() > 0) s = in.ConsumeRandomLengthString(512);
  });
  const std::size_t findings = report["findings"].size();

  std::string p = vc::junit_problems(batchcheck::junit_view(report));
  if (!p.empty()) fail(p, report);
  p = vc::markdown_problems(batchcheck::markdown_view(report), findings);
  if (!p.empty()) fail(p, report);
  // Cut to a few findings: the line saying what was left out, and the details that stay.
  p = vc::markdown_problems(batchcheck::markdown_view(report, 1500), findings);
  if (!p.empty()) fail(p, report);
  p = vc::github_problems(batchcheck::github_commands(report));
  if (!p.empty()) fail(p, report);
  p = vc::html_problems(batchcheck::html_view(report), benign_page);
  if (!p.empty()) fail(p, report);
  p = vc::summary_problems(batchcheck::format_summary(vc::summary_input(report)));
  if (!p.empty()) fail(p, report);
  return 0;
}
