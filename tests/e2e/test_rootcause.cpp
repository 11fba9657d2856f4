// Root-cause localization against a zoo of NaN and range origins (tests/e2e/rootcause/make_zoo.py),
// each model scripted and traced: the scan must fail at the batches where the real loop's
// predictions go bad, and name the op and the marked source line where the value was born,
// the module it sits in, what it was given, and (where a batch statistic spreads it) the
// samples that cause it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "support/oracle_suite.h"

using namespace batchcheck;
using Json = nlohmann::json;

namespace {

class RootCause : public test_util::OracleSuite<RootCause> {
 public:
  static constexpr const char* kTag = "rootcause";
  static constexpr const char* kScript = "tests/e2e/rootcause/make_zoo.py";
  static constexpr const char* kWhat = "the root-cause zoo";

  // The case's finding: output-nonfinite, or output-out-of-range for a range case.
  static const Json* finding(const Json& report, const std::string& id) {
    for (const auto& f : report["findings"]) {
      if (f["id"] == id) return &f;
    }
    return nullptr;
  }
};

}  // namespace

TEST_F(RootCause, EveryOriginIsNamedAtItsOpAndLine) {
  ASSERT_GE(manifest_["cases"].size(), 28u);
  for (const auto& t : manifest_["cases"]) {
    const std::string name = t["case"];
    SCOPED_TRACE(name);
    const bool range = t.value("range", false);
    const std::string id = range ? "output-out-of-range" : "output-nonfinite";
    Scan s = scan(name);
    EXPECT_EQ(s.code, 1) << s.err;
    std::set<uint64_t> loop;
    for (const auto& b : t["bad_batches"]) loop.insert(b.get<uint64_t>());
    ASSERT_FALSE(loop.empty());
    EXPECT_EQ(scan_failures(s.report, id), loop) << s.report["findings"].dump(1);
    const Json* f = finding(s.report, id);
    ASSERT_TRUE(f) << s.report["findings"].dump(1);
    const Json& rc = (*f)["root_cause"];
    ASSERT_TRUE(rc.is_object()) << f->dump(1);
    EXPECT_EQ(rc["kind"], t.value("kind", "op")) << rc.dump(1);
    if (t.contains("samples")) {
      // The finding's samples, or (every row bad: a batch statistic spreading one sample's
      // value) the samples the localizer found.
      const Json& samples = rc.contains("samples") ? rc["samples"] : (*f)["samples"];
      EXPECT_EQ(samples, t["samples"]) << f->dump(1);
      if (t.value("spread", false)) {
        EXPECT_GT((*f)["samples"].size(), 1u) << f->dump(1);  // every row of the batch went bad
        EXPECT_TRUE(rc.contains("samples")) << rc.dump(1);
      }
    }
    if (rc["kind"] == "input") {
      EXPECT_EQ(rc["name"], t["name"]) << rc.dump(1);
      EXPECT_NE(rc["summary"].get<std::string>().find("the model's input x already holds it"), std::string::npos);
      continue;
    }
    EXPECT_EQ(rc["op"], t["op"]) << rc.dump(1);
    EXPECT_EQ(rc["module"], t["module"]) << rc.dump(1);
    // The user's own file and line, from the archive's debug records.
    ASSERT_TRUE(rc.contains("file")) << rc.dump(1);
    EXPECT_NE(rc["file"].get<std::string>().find("make_zoo.py"), std::string::npos) << rc.dump(1);
    EXPECT_EQ(rc["line"], t["line"]) << rc.dump(1);
    if (name.find("traced") == std::string::npos) {
      // A scripted archive carries its source: the marked line comes from the archive.
      EXPECT_NE(rc["source_line"].get<std::string>().find("# zoo: "), std::string::npos) << rc.dump(1);
    } else {
      // A traced archive names make_zoo.py but holds none of its text, and a path inside a
      // model is never opened: nothing of that file reaches the report.
      EXPECT_FALSE(rc.contains("source_line")) << rc.dump(1);
      EXPECT_EQ(s.report.dump().find("# zoo: "), std::string::npos) << rc.dump(1);
      EXPECT_EQ(s.err.find("# zoo: "), std::string::npos) << s.err;
    }
    // The summary joins the message, where people look.
    EXPECT_NE((*f)["message"].get<std::string>().find(rc["summary"].get<std::string>()), std::string::npos);
    EXPECT_NE(rc["summary"].get<std::string>().find(t["op"].get<std::string>() + " at make_zoo.py:" +
                                                     std::to_string(t["line"].get<int>())),
              std::string::npos)
        << rc["summary"];
    if (t.contains("negative")) {
      EXPECT_EQ(rc["inputs"][0]["negative"], t["negative"]) << rc.dump(1);
      EXPECT_NE(rc["summary"].get<std::string>().find(std::to_string(t["negative"].get<int>()) + " negative"),
                std::string::npos)
          << rc["summary"];
    }
    if (t.contains("inf_op")) {
      EXPECT_EQ(rc["inf_from"]["op"], t["inf_op"]) << rc.dump(1);
    }
    if (t.contains("chain_op")) {
      bool seen = false;
      for (const auto& c : rc["chain"]) seen = seen || c["op"] == t["chain_op"];
      EXPECT_TRUE(seen) << rc.dump(1);
    }
    EXPECT_EQ(rc.value("batch_dependent", false), t.value("batch_dependent", false)) << rc.dump(1);
    // Each batch localized carries its own.
    EXPECT_TRUE((*f)["occurrences"][0]["root_cause"].is_object()) << f->dump(1);
  }
}

// root_cause off: the scan finds the same batches, with no root cause.
TEST_F(RootCause, CanBeSwitchedOff) {
  const std::string name = "log-scripted";
  Scan on = scan(name);
  const std::string path = config_path(name);
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  Json cfg = Json::parse(text);
  cfg["checks"] = {{"root_cause", false}};
  const std::string off_path = dir_->file("log-off.json");
  {
    std::ofstream out(off_path);
    out << cfg.dump();
  }
  std::ostringstream out, err;
  const std::string report_path = dir_->file("log-off-report.json");
  // Relative paths resolve against the config's folder: keep it beside the case's files.
  const std::string moved = (dir_->path() / name / "config-off.json").string();
  std::rename(off_path.c_str(), moved.c_str());
  EXPECT_EQ(run_cli({"scan", moved, "-o", report_path, "-q"}, out, err), 1) << err.str();
  std::ifstream in(report_path);
  Json off = Json::parse(in);
  const Json* a = finding(on.report, "output-nonfinite");
  const Json* b = finding(off, "output-nonfinite");
  ASSERT_TRUE(a && b);
  EXPECT_EQ((*a)["batches"], (*b)["batches"]);
  EXPECT_TRUE((*a)["root_cause"].is_object());
  EXPECT_FALSE(b->contains("root_cause")) << b->dump(1);
}
