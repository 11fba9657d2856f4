// Hostile inputs, end to end (issue 29): file names and model errors written by an attacker
// reach stderr, the fixes and the views inert; no output of a run may replace an input of it;
// an allocation a batch cannot get is a finding for that batch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "cli.h"
#include "core/base/sanitizer.h"
#include "support/test_helpers.h"
#include "support/workspace.h"

using namespace batchcheck;
using namespace batchcheck::test_util;
namespace fs = std::filesystem;

namespace {

struct Cli {
  int code = -1;
  std::string out, err;
};

Cli cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  Cli r;
  r.code = run_cli(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Every line is one line with no control character, and none starts a workflow command other
// than the annotations batchcheck itself writes (--github).
void expect_inert_lines(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    for (unsigned char c : line) EXPECT_FALSE(c < 0x20 || c == 0x7f) << "control character " << int(c) << " in: " << line;
    EXPECT_EQ(line.find("##["), std::string::npos) << "GitHub's older command form in: " << line;
    // After what GitHub's runner trims: spaces, the no-break and the ideographic space.
    std::size_t b = 0;
    while (true) {
      if (line.compare(b, 1, " ") == 0) b += 1;
      else if (line.compare(b, 2, "\xc2\xa0") == 0) b += 2;
      else if (line.compare(b, 3, "\xe3\x80\x80") == 0) b += 3;
      else break;
    }
    if (line.compare(b, 2, "::") != 0) continue;
    const bool ours = line.rfind("::error ", 0) == 0 || line.rfind("::warning ", 0) == 0 || line.rfind("::notice ", 0) == 0;
    EXPECT_TRUE(ours) << "a workflow command from the input: " << line;
  }
}

// An image folder whose only class holds `name`, a file no decoder opens, beside a model.
std::string unreadable_image_scan(const TempDir& dir, const std::string& name) {
  fs::create_directories(dir.path() / "tree" / "a");
  std::ofstream(dir.path() / "tree" / "a" / name) << "not an image";
  save_module(dir.file("m.pt"), ModuleSpec{"Net", "def forward(self, x):\n    return x.mean(dim=[2, 3])\n", {}, {}});
  std::ofstream(dir.file("cfg.json")) << R"({"model": {"path": "m.pt"}, "data": {"format": "imagefolder", "path": "tree"},
                                             "loader": {"batch_size": 2}, "loss": {"type": "cross_entropy"}})";
  return dir.file("cfg.json");
}

const Json* find(const Json& report, const std::string& id) {
  for (const auto& f : report["findings"]) {
    if (f["id"] == id) return &f;
  }
  return nullptr;
}

}  // namespace

// A file name carrying a command substitution and quotes: the replace-file fix, Python run as a
// user would paste it, opens that file and raises PIL's error; nothing else runs.
TEST(Hostile, FixCodeOnAHostileFileNameRunsOnlyTheFix) {
  if (!python_torch_available()) GTEST_SKIP() << python_missing_line("the fix's Python");
  const std::vector<std::string> names = {"$(touch PWNED)x.png", "it's `touch PWNED` \"$(touch PWNED)\".png",
                                          "a\\'\"; touch PWNED; #.png"};
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    TempDir dir("hostile_fix");
    const std::string cfg = unreadable_image_scan(dir, name);
    Cli r = cli({"scan", cfg, "-o", dir.file("report.json"), "-q"});
    ASSERT_EQ(r.code, 1) << r.err;
    std::ifstream in(dir.file("report.json"));
    const Json report = Json::parse(in);
    const Json* f = find(report, "sample-unreadable");
    ASSERT_TRUE(f) << report.dump(1);
    std::string code;
    for (const auto& fix : (*f)["fixes"]) {
      if (fix["id"] == "replace-file") code = fix["code"];
    }
    ASSERT_FALSE(code.empty()) << f->dump(1);
    std::ofstream(dir.file("fix.py")) << code << "\n";
    // Run by the Python with PIL (torchvision's dependency), where the user trains.
    const auto run = run_command("cd " + dir.path().string() + " && " + python() + " fix.py 2>&1");
    EXPECT_NE(run.status, 0) << run.output;
    EXPECT_NE(run.output.find("cannot identify image file"), std::string::npos) << code << "\n" << run.output;
    EXPECT_NE(run.output.find("tree/a/"), std::string::npos) << run.output;  // it opened that file
    EXPECT_FALSE(fs::exists(dir.file("PWNED"))) << code;
    EXPECT_FALSE(fs::exists(dir.path() / "tree" / "a" / "PWNED")) << code;
  }
}

// File names with a line break that starts a workflow command, and terminal escapes: stderr's
// summary and the error lines show them escaped.
TEST(Hostile, FileNamesReachStderrAsOneInertLine) {
  for (const std::string& name : std::vector<std::string>{"bad\n::stop-commands::tok\nz.png", "\x1b]0;title\x07\x1b[2J\x1b[31mred.png",
                                                          "a\n\xc2\xa0::add-mask::x\n\xe3\x80\x80::stop-commands::t.png",
                                                          "##[stop-commands]T.png"}) {
    SCOPED_TRACE(name);
    TempDir dir("hostile_names");
    const std::string cfg = unreadable_image_scan(dir, name);
    Cli r = cli({"scan", cfg, "-o", dir.file("report.json")});
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("sample-unreadable"), std::string::npos) << r.err;
    expect_inert_lines(r.err);
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos);
  }
  // An error line naming such a file (a config that does not exist).
  Cli r = cli({"scan", "/nonexistent/\x1b[2J\n::stop-commands::x\n.json"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  expect_inert_lines(r.err);
}

// A model whose error carries terminal escapes, a workflow command and HTML: inert on stderr
// (with --github), in the markdown, the JUnit and the HTML page.
TEST(Hostile, AModelsErrorTextIsInertInEveryView) {
  if (!python_torch_available()) GTEST_SKIP() << python_missing_line("the raising model");
  Workspace w("hostile_model");
  w.inputs(8, 3).float_targets(std::vector<float>(8, 0.f));
  std::ofstream(w.file("make.py")) << R"(import sys, torch
class Net(torch.nn.Module):
    def forward(self, x):
        if bool(x.sum() > -1.0):
            raise RuntimeError("boom" + chr(27) + "]0;title" + chr(7) + chr(27) + "[2J\n::stop-commands::tok\n"
                               + "<img src=x onerror=alert(1)>" + chr(65534))
        return x.sum(1, keepdim=True)
torch.jit.script(Net()).save(sys.argv[1])
)";
  const auto made = run_command(python() + " " + w.file("make.py") + " " + w.file("m.pt") + " 2>&1");
  ASSERT_EQ(made.status, 0) << made.output;
  w.write_config();
  Cli r = cli({"scan", w.file("cfg.json"), "-o", w.file("report.json"), "--github", "--junit", w.file("r.xml"), "--markdown",
               w.file("r.md"), "--html", w.file("r.html")});
  ASSERT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("::error "), std::string::npos) << r.err;
  expect_inert_lines(r.err);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  const std::string md = slurp(w.file("r.md"));
  EXPECT_EQ(md.find("<img"), std::string::npos) << md;
  EXPECT_EQ(slurp(w.file("r.html")).find("<img"), std::string::npos);
  // JUnit: well-formed for a real XML parser (U+FFFE is no XML character).
  const auto lint = run_command("xmllint --noout " + w.file("r.xml") + " 2>&1");
  EXPECT_EQ(lint.status, 0) << lint.output;
}

// No output of a run may be an input of it, or another output, by name, symlink or hard link;
// each refusal is exit 2 with one line, and the file is left as it was.
TEST(Hostile, NoOutputReplacesAnInputOrAnotherOutput) {
  Workspace w("hostile_outputs");
  w.inputs(8, 3).float_targets(std::vector<float>(8, 0.f)).model("def forward(self, x):\n    return x.sum(1, keepdim=True)\n");
  std::ofstream(w.file("order.json")) << "[[0, 1, 2, 3], [4, 5, 6, 7]]";
  w.loader(R"({"batch_size": 4, "order": "order.json"})");
  const std::string cfg = w.write_config();
  ASSERT_EQ(cli({"scan", cfg, "-o", w.file("report.json"), "-q"}).code, 0);
  fs::create_symlink(w.file("cfg.json"), w.file("link.json"));
  fs::create_hard_link(w.file("x.npy"), w.file("hard.npy"));
  struct Case {
    std::vector<std::string> args;
    std::string file, line;
  };
  const std::vector<Case> cases = {
      {{"-o", w.file("report.json"), "--html", w.file("report.json")}, "report.json",
       w.file("report.json") + ": --html: is also the file of -o: two outputs of one run cannot share a file"},
      {{"--html", w.file("order.json")}, "order.json",
       w.file("order.json") + ": --html: is the recorded order (loader.order), an input of this run: refusing to overwrite it"},
      {{"--junit", w.file("link.json")}, "cfg.json",
       w.file("link.json") + ": --junit: is the config, an input of this run: refusing to overwrite it"},
      {{"--markdown", w.file("hard.npy")}, "x.npy",
       w.file("hard.npy") + ": --markdown: is the inputs, an input of this run: refusing to overwrite it"},
      {{"-o", w.file("m.pt")}, "m.pt", w.file("m.pt") + ": -o: is the model, an input of this run: refusing to overwrite it"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    const std::string before = slurp(w.file(c.file));
    std::vector<std::string> args = {"scan", cfg, "-q"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Cli r = cli(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, "batchcheck: error: " + c.line + "\n");
    EXPECT_EQ(slurp(w.file(c.file)), before);
  }
  // The step summary GitHub names is an output too.
  ::setenv("GITHUB_STEP_SUMMARY", w.file("order.json").c_str(), 1);
  const std::string order = slurp(w.file("order.json"));
  Cli gh = cli({"scan", cfg, "-q", "--github"});
  ::unsetenv("GITHUB_STEP_SUMMARY");
  EXPECT_EQ(gh.code, 2);
  EXPECT_EQ(gh.err, "batchcheck: error: " + w.file("order.json") +
                        ": $GITHUB_STEP_SUMMARY: is the recorded order (loader.order), an input of this run: refusing to overwrite it\n");
  EXPECT_EQ(slurp(w.file("order.json")), order);

  // render: its report; merge: each part.
  const std::string report = slurp(w.file("report.json"));
  fs::create_symlink(w.file("report.json"), w.file("report-link.json"));
  Cli render = cli({"render", w.file("report.json"), "--markdown", w.file("report-link.json")});
  EXPECT_EQ(render.code, 2);
  EXPECT_EQ(render.err, "batchcheck: error: " + w.file("report-link.json") +
                            ": --markdown: is the report being rendered, an input of this run: refusing to overwrite it\n");
  EXPECT_EQ(slurp(w.file("report.json")), report);
  w.loader(R"({"batch_size": 4})");
  w.write_config();
  for (const char* k : {"0/2", "1/2"}) ASSERT_EQ(cli({"scan", cfg, "--shard", k, "-o", w.file("part-{shard}.json")}).code, 0);
  const std::string part = slurp(w.file("part-1.json"));
  Cli merge = cli({"merge", w.file("part-0.json"), w.file("part-1.json"), "-o", w.file("merged.json"), "--junit", w.file("part-1.json")});
  EXPECT_EQ(merge.code, 2);
  EXPECT_EQ(merge.err, "batchcheck: error: " + w.file("part-1.json") +
                           ": --junit: is part 2 being merged, an input of this run: refusing to overwrite it\n");
  EXPECT_EQ(slurp(w.file("part-1.json")), part);
  EXPECT_FALSE(fs::exists(w.file("merged.json")));
}

// Writing into the image folder a scan reads (a member, a new file, a hard link to a member)
// is refused.
TEST(Hostile, NoOutputLandsInTheImageFolder) {
  TempDir dir("hostile_tree");
  const std::string cfg = unreadable_image_scan(dir, "x.png");
  const std::string member = (dir.path() / "tree" / "a" / "x.png").string();
  fs::create_hard_link(member, dir.file("outside.png"));
  // A class folder linked in from elsewhere: its files are members (the listing follows it).
  fs::create_directories(dir.path() / "elsewhere" / "b");
  std::ofstream(dir.path() / "elsewhere" / "b" / "y.png") << "not an image";
  fs::create_directory_symlink(dir.path() / "elsewhere" / "b", dir.path() / "tree" / "b");
  const std::string linked = (dir.path() / "elsewhere" / "b" / "y.png").string();
  for (const std::string& out :
       std::vector<std::string>{member, (dir.path() / "tree" / "new.json").string(), dir.file("outside.png"), linked}) {
    SCOPED_TRACE(out);
    Cli r = cli({"scan", cfg, "-q", "--html", out});
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, "batchcheck: error: " + out + ": --html: is inside the image folder " + (dir.path() / "tree").string() +
                         " of this scan: refusing to write into the dataset (write the report elsewhere)\n");
    EXPECT_EQ(slurp(member), "not an image");
    EXPECT_EQ(slurp(linked), "not an image");
  }
}

// A member that is a device or a FIFO (PIL would read without end, or block): unreadable,
// and the scan ends.
TEST(Hostile, AMemberThatIsADeviceOrAFifoIsUnreadable) {
  TempDir dir("hostile_fifo");
  const std::string cfg = unreadable_image_scan(dir, "x.png");
  fs::create_symlink("/dev/zero", dir.path() / "tree" / "a" / "zero.png");
  ASSERT_EQ(run_command("mkfifo " + (dir.path() / "tree" / "a" / "fifo.png").string()).status, 0);
  Cli r = cli({"scan", cfg, "-o", dir.file("report.json"), "-q", "--batch-timeout", "60"});
  EXPECT_EQ(r.code, 1) << r.err;
  std::ifstream in(dir.file("report.json"));
  const Json report = Json::parse(in);
  const Json* f = find(report, "sample-unreadable");
  ASSERT_TRUE(f) << report.dump(1);
  EXPECT_NE(f->dump().find("not a regular file"), std::string::npos) << f->dump(1);
}

// A temporary name planted as a link beside the report (a shared folder) is not followed.
TEST(Hostile, APlantedTemporaryLinkIsNotFollowed) {
  Workspace w("hostile_tmp");
  w.inputs(8, 3).float_targets(std::vector<float>(8, 0.f)).model("def forward(self, x):\n    return x.sum(1, keepdim=True)\n");
  const std::string cfg = w.write_config();
  const std::string before = slurp(cfg);
  fs::create_symlink(cfg, w.file(".batchcheck-" + std::to_string(::getpid()) + ".tmp"));
  Cli r = cli({"scan", cfg, "-o", w.file("out.json"), "-q"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(cfg), before);
  EXPECT_TRUE(Json::parse(slurp(w.file("out.json"))).is_object());
}

// merge opens the recorded order its parts' config names; what that file holds is never
// echoed back (parts edited to name another file).
TEST(Hostile, MergeNeverEchoesAFileItsPartsName) {
  Workspace w("hostile_merge_order");
  w.inputs(8, 3).float_targets(std::vector<float>(8, 0.f)).model("def forward(self, x):\n    return x.sum(1, keepdim=True)\n");
  std::ofstream(w.file("order.json")) << "[[0, 1, 2, 3], [4, 5, 6, 7]]";
  w.loader(R"({"batch_size": 4, "order": "order.json"})");
  const std::string cfg = w.write_config();
  for (const char* k : {"0/2", "1/2"}) ASSERT_EQ(cli({"scan", cfg, "--shard", k, "-o", w.file("part-{shard}.json")}).code, 0);
  // The order a merge reads is an input of it: no output may replace it.
  const std::string order = slurp(w.file("order.json"));
  Cli clobber = cli({"merge", w.file("part-0.json"), w.file("part-1.json"), "-o", w.file("order.json")});
  EXPECT_EQ(clobber.code, 2);
  EXPECT_EQ(clobber.err, "batchcheck: error: " + w.file("order.json") +
                             ": -o: is the recorded order (loader.order) of the parts' config, an input of this run: refusing to "
                             "overwrite it\n");
  EXPECT_EQ(slurp(w.file("order.json")), order);
  std::ofstream(w.file("secret.json")) << R"({"api_token": "s3cr3t"})";
  for (const char* part : {"part-0.json", "part-1.json"}) {
    Json j = Json::parse(slurp(w.file(part)));
    std::string text = j["config"]["text"];
    const auto at = text.find("order.json");
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, 10, w.file("secret.json"));
    j["config"]["text"] = text;
    std::ofstream(w.file(part)) << j.dump();
  }
  Cli merge = cli({"merge", w.file("part-0.json"), w.file("part-1.json"), "-o", w.file("merged.json")});
  EXPECT_EQ(merge.code, 2) << merge.err;
  EXPECT_EQ(merge.err.find("api_token"), std::string::npos) << merge.err;
  EXPECT_EQ(merge.err.find("s3cr3t"), std::string::npos) << merge.err;
  EXPECT_NE(merge.err.find(": config.loader.order: the recorded order the part's config names ("), std::string::npos) << merge.err;
}

// A batch whose forward asks for more memory than there is: a finding for that batch, with the
// bytes asked; the other batches are checked.
TEST(Hostile, AnAllocationABatchCannotGetIsAFindingForThatBatch) {
#if BATCHCHECK_ASAN
  GTEST_SKIP() << "AddressSanitizer aborts on an allocation this large instead of failing it";
#else
  Workspace w("hostile_oom");
  // 2^42 floats (16 TiB) on the last batch only (10 samples, batches of 4).
  w.inputs(10, 3).float_targets(std::vector<float>(10, 0.f))
      .model("def forward(self, x):\n"
             "    if x.size(0) < 4:\n"
             "        return torch.zeros([4398046511104, 1])[:x.size(0)]\n"
             "    return x.sum(1, keepdim=True)\n");
  ScanRun r = w.scan();
  ASSERT_EQ(r.code, 1) << r.err;
  const Json* f = find(r.report, "batch-out-of-memory");
  ASSERT_TRUE(f) << r.report["findings"].dump(1);
  EXPECT_EQ((*f)["batch"], 2);
  EXPECT_EQ((*f)["evidence"]["bytes_requested"], 17592186044416ull) << f->dump(1);
  EXPECT_EQ(r.report["batches"]["checked"], 3);
  EXPECT_EQ((*f)["fixes"][0]["id"], "smaller-batch-size");
#endif
}

// A prediction expanded to 2^40 elements (a view: no memory until something reads it whole):
// reading it for the checks cannot get 4 TiB, which is a finding for that batch, not a crash.
TEST(Hostile, AHugeExpandedPredictionIsAFindingNotACrash) {
#if BATCHCHECK_ASAN
  GTEST_SKIP() << "AddressSanitizer aborts on an allocation this large instead of failing it";
#else
  Workspace w("hostile_expand");
  w.inputs(8, 3).float_targets(std::vector<float>(8, 0.f))
      .model("def forward(self, x):\n"
             "    return x.sum().reshape([1, 1]).expand([1099511627776, 1])\n");
  ScanRun r = w.scan();
  EXPECT_EQ(r.code, 1) << r.err;
  const Json* f = find(r.report, "batch-out-of-memory");
  ASSERT_TRUE(f) << r.report["findings"].dump(1);
  EXPECT_EQ((*f)["evidence"]["bytes_requested"], 4398046511104ull) << f->dump(1);
  EXPECT_EQ(r.report["batches"]["checked"], 2);  // every batch, each its own finding
#endif
}
