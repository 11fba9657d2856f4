// The supervisor's protocol: every event survives the pipe as it was sent; a torn or foreign
// line is ignored, never a crash; the aggregator counts a step's findings only when the step
// ends, so a step cut short (crash, timeout) never counts twice.
#include <gtest/gtest.h>

#include <unistd.h>

#include <sstream>

#include "core/base/errors.h"
#include "core/journal/aggregate.h"
#include "core/journal/journal.h"

using namespace batchcheck;

namespace {

// Keeps what it is told, as JSON for easy comparison.
class Recorder : public ScanSink {
 public:
  std::vector<std::string> calls;
  ScanStart start_seen;
  std::vector<std::vector<int64_t>> begun;
  std::vector<RecordEvent> records;
  std::vector<StepEnd> ends;
  void start(const ScanStart& s) override { calls.push_back("start"); start_seen = s; }
  void begin(const StepInfo& s, const std::vector<int64_t>& idx) override {
    calls.push_back("begin " + std::to_string(s.step));
    begun.push_back(idx);
  }
  void record(RecordEvent&& r) override { calls.push_back("record " + r.id); records.push_back(std::move(r)); }
  void end(const StepEnd& e) override { calls.push_back("end " + std::to_string(e.step)); ends.push_back(e); }
  void finish(const ScanEnd& e) override { calls.push_back(std::string("finish ") + (e.complete ? "complete" : "incomplete")); }
};

std::vector<std::string> lines_through_pipe(const std::function<void(JournalWriter&)>& write) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  {
    JournalWriter w(fds[1]);
    write(w);
  }
  ::close(fds[1]);
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) all.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  std::vector<std::string> out;
  std::istringstream in(all);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TensorMeta meta(std::vector<int64_t> shape, const std::string& dtype) { return {true, std::move(shape), dtype, dtype == "float32"}; }

}  // namespace

TEST(Journal, EveryEventSurvivesThePipe) {
  ScanStart s;
  s.data.samples = 10;
  s.data.input = meta({3}, "float32");
  s.data.has_targets = true;
  s.model.batchnorm_modules = {"bn1"};
  s.model.frozen_eval = {2, 1};
  s.device = "cuda:1";
  s.device_note = "\"cuda\" is cuda:1, the GPU of local rank 1";
  s.libtorch = "2.15.0";
  s.backward = true;
  s.ranks = {0, 1};
  s.replay_steps = 6;
  Finding g;
  g.id = "tail-batch-singleton";
  g.severity = Severity::Warning;
  g.batch = 4;
  g.samples = {9};
  g.message = "the last batch holds 1 sample \xff";  // invalid UTF-8 is replaced, not fatal
  g.fixes.push_back({"drop-last", "t", "DataLoader(..., drop_last=True)", "x", {}});
  g.occurrences.push_back({0, 4, {9}, 1, {}, "batch 4 failed otherwise", nullptr});
  g.occurrences_total = 1;
  s.geometry = {g};
  RecordEvent r;
  r.at = {3, 1, 2, false, 2};
  r.id = "target-out-of-range";
  r.stage = "target";
  r.message = "found 255";
  r.evidence = {{"max", 255}};
  r.samples = {7};
  r.count = 1;
  r.cuda = "Assertion `t >= 0 && t < n_classes` failed.";
  r.batch_indices = {6, 7};
  BatchStats stats;
  stats.pred_min = -2.5;  // pred_max stays unknown: a prediction with no finite value
  stats.pred_nonfinite = 20;
  stats.loss_nonfinite = true;
  stats.band_lo = 0;
  stats.band_hi = 1;
  StepEnd e{3, true, 2, BatchShapes{2, 2, meta({2, 3}, "float32"), meta({2, 10}, "float32"), meta({2}, "int64")}, stats};

  auto lines = lines_through_pipe([&](JournalWriter& w) {
    w.loading("data.pt");
    w.start(s);
    w.begin({3, 1, 2, false, 2}, {6, 7});
    w.begin({4, 1, 3, false, 3}, {8, 2, 5});
    RecordEvent copy = r;
    w.record(std::move(copy));
    w.end(e);
    w.finish({false, true});
    w.error("input", "m.pt", "forward", "takes 2 inputs");
  });
  ASSERT_EQ(lines.size(), 8u);
  Recorder rec;
  EXPECT_EQ(apply_journal_line(lines[0], rec).kind, JournalLine::Kind::Loading);
  for (std::size_t i = 1; i < 7; ++i) EXPECT_EQ(apply_journal_line(lines[i], rec).kind, JournalLine::Kind::Event) << lines[i];
  JournalLine err = apply_journal_line(lines[7], rec);
  EXPECT_EQ(err.kind, JournalLine::Kind::Error);
  EXPECT_EQ(err.error_kind + "|" + err.file + "|" + err.where + "|" + err.what, "input|m.pt|forward|takes 2 inputs");

  EXPECT_EQ(rec.calls, (std::vector<std::string>{"start", "begin 3", "begin 4", "record target-out-of-range", "end 3",
                                                 "finish incomplete"}));
  EXPECT_EQ(rec.start_seen.data.samples, 10u);
  EXPECT_EQ(rec.start_seen.data.input.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(rec.start_seen.model.frozen_eval.batch_norm, 2u);
  EXPECT_EQ(rec.start_seen.ranks, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(rec.start_seen.device, "cuda:1");
  EXPECT_EQ(rec.start_seen.device_note, "\"cuda\" is cuda:1, the GPU of local rank 1");
  ASSERT_EQ(rec.start_seen.geometry.size(), 1u);
  EXPECT_EQ(to_json(rec.start_seen.geometry[0])["fixes"], to_json(g)["fixes"]);
  EXPECT_EQ(to_json(rec.start_seen.geometry[0])["occurrences"], to_json(g)["occurrences"]);
  EXPECT_EQ(rec.start_seen.geometry[0].occurrences.at(0).message, "batch 4 failed otherwise");
  EXPECT_EQ(rec.start_seen.geometry[0].message, "the last batch holds 1 sample \xef\xbf\xbd");
  EXPECT_EQ(rec.begun, (std::vector<std::vector<int64_t>>{{6, 7}, {8, 2, 5}}));  // a run and a shuffled batch
  const RecordEvent& got = rec.records.at(0);
  EXPECT_EQ(got.at.rank, 1u);
  EXPECT_EQ(got.at.batch, 2u);
  EXPECT_EQ(got.evidence, r.evidence);
  EXPECT_EQ(got.samples, r.samples);
  EXPECT_EQ(got.cuda, r.cuda);
  EXPECT_EQ(got.batch_indices, r.batch_indices);
  ASSERT_TRUE(rec.ends.at(0).shapes);
  EXPECT_EQ(rec.ends[0].shapes->output.shape, (std::vector<int64_t>{2, 10}));
  ASSERT_TRUE(rec.ends[0].stats);
  const BatchStats& st = *rec.ends[0].stats;
  EXPECT_EQ(st.pred_min, -2.5);
  EXPECT_FALSE(st.pred_max);
  EXPECT_EQ(st.pred_nonfinite, 20u);
  EXPECT_FALSE(st.loss);
  EXPECT_TRUE(st.loss_nonfinite);
  EXPECT_EQ(st.band_lo, 0.0);
  EXPECT_EQ(st.band_hi, 1.0);
}

TEST(Journal, TornAndForeignLinesAreIgnored) {
  Recorder rec;
  for (const char* line : {"", "{", "{\"e\":\"begin\"}", "{\"e\":\"record\",\"at\":7}", "[1,2]", "{\"e\":\"nope\"}",
                           "{\"e\":\"begin\",\"at\":{\"step\":0,\"rank\":0,\"batch\":0,\"probe\":false,\"size\":2},\"indices\":{\"first\":0,\"count\":1099511627777}}"}) {
    EXPECT_EQ(apply_journal_line(line, rec).kind, JournalLine::Kind::Malformed) << line;
  }
  EXPECT_TRUE(rec.calls.empty());
}

TEST(Journal, RequestRoundTrip) {
  EngineRequest r;
  r.command.config_path = "cfg.json";
  r.command.output_path = "out.json";
  r.command.fail_on = FailOn::Warning;
  r.command.mode = Mode::Eval;
  r.command.batch_timeout = 2.5;
  r.command.rank = 3;
  r.resume.start_step = 7;
  r.resume.skip = {9, 12};
  r.resume.largest_ok_batch = 64;
  EngineRequest back = decode_request(encode_request(r));
  EXPECT_EQ(back.command.config_path, "cfg.json");
  EXPECT_EQ(back.command.output_path, "out.json");
  EXPECT_EQ(back.command.fail_on, FailOn::Warning);
  EXPECT_EQ(back.command.mode, Mode::Eval);
  EXPECT_EQ(back.command.batch_timeout, 2.5);
  EXPECT_EQ(back.command.rank, 3u);
  EXPECT_FALSE(back.command.device);
  EXPECT_EQ(back.resume.start_step, 7u);
  EXPECT_EQ(back.resume.skip, (std::set<uint64_t>{9, 12}));
  EXPECT_EQ(back.resume.largest_ok_batch, 64u);
  EXPECT_THROW(decode_request("{\"command\": 1}"), InternalError);
}

TEST(Aggregator, AStepCountsOnlyWhenItEndsAndACrashReplacesIt) {
  Config cfg = parse_config("cfg.json", R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"},
                                            "loader": {"batch_size": 2}, "loss": {"type": "mse"}})", ".");
  ScanSettings settings;
  std::ostringstream log;
  Aggregator agg(cfg, settings, log);
  ScanStart s;
  s.data.samples = 6;
  s.ranks = {0};
  s.replay_steps = 3;
  agg.start(s);
  auto rec = [](uint64_t step, const std::string& id) {
    RecordEvent r;
    r.at = {step, 0, step, false, 2};
    r.id = id;
    r.stage = "output";
    r.message = id;
    r.samples = {static_cast<int64_t>(2 * step)};
    r.count = 1;
    return r;
  };
  agg.begin({0, 0, 0, false, 2}, {0, 1});
  agg.record(rec(0, "output-nonfinite"));
  agg.end({0, true, 2, std::nullopt, std::nullopt});
  // Step 1's findings arrive, then the process dies before it ends.
  agg.begin({1, 0, 1, false, 2}, {2, 3});
  agg.record(rec(1, "output-nonfinite"));
  ASSERT_TRUE(agg.open_step());
  EXPECT_EQ(agg.open_step()->step, 1u);
  agg.fail_open_step("forward-crash", "crashed", {{"signal", "SIGSEGV"}});
  EXPECT_FALSE(agg.open_step());
  EXPECT_EQ(agg.watermark(), 2u);
  agg.begin({2, 0, 2, false, 2}, {4, 5});
  agg.end({2, true, 2, std::nullopt, std::nullopt});
  agg.finish({true, false});
  ScanResult r = agg.result(agg.end_state());
  EXPECT_EQ(r.report["batches"]["checked"], 3);
  ASSERT_EQ(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[0].id, "output-nonfinite");
  EXPECT_EQ(r.findings[0].batches, (std::vector<uint64_t>{0}));  // step 1's record was dropped with the crash
  EXPECT_EQ(r.findings[0].count, 1u);
  EXPECT_EQ(r.findings[1].id, "forward-crash");
  EXPECT_EQ(r.findings[1].samples, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.findings[1].count, 2u);
  // The plots count the crashed step as failed: every step once.
  EXPECT_EQ(r.report["series"]["ranks"][0]["errors"], nlohmann::ordered_json::parse("[1, 1, 0]"));
  EXPECT_EQ(r.report["series"]["ranks"][0]["batch"], nlohmann::ordered_json::parse("[0, 1, 2]"));
}

TEST(Aggregator, TheHeadroomsLargestValueLeadsItsFinding) {
  static Config cfg;  // the Aggregator keeps a reference until the report is built
  cfg = parse_config("c.json", R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy"}, "loader": {"batch_size": 2}})", ".");
  ScanSettings settings;
  std::ostringstream log;
  Aggregator agg(cfg, settings, log);
  ScanStart s;
  s.data.samples = 6;
  s.replay_steps = 3;
  s.device = "cpu";
  agg.start(s);
  // Batches 0 and 2 place a peak: 36,000 then 48,000 (batch 1 grew less and was not placed).
  for (uint64_t b = 0; b < 3; ++b) {
    const std::vector<int64_t> indices = {static_cast<int64_t>(2 * b), static_cast<int64_t>(2 * b + 1)};
    StepInfo at{b, 0, b, false, 2};
    agg.begin(at, indices);
    if (b != 1) {
      RecordEvent r;
      r.at = at;
      r.id = "half-headroom";
      r.stage = "forward";
      r.message = b == 0 ? "peak 36,000" : "peak 48,000";
      r.evidence = {{"peak", b == 0 ? 36000.0 : 48000.0}};
      r.samples = {indices[1]};
      r.count = 1;
      r.batch_indices = indices;
      agg.record(std::move(r));
    }
    agg.end({b, true, 2, std::nullopt, BatchStats{}});
  }
  agg.finish({true, false});
  const auto report = agg.result(agg.end_state()).report;
  const auto& f = report["findings"][0];
  EXPECT_EQ(f["id"], "half-headroom");
  EXPECT_EQ(f["batch"], 2);
  EXPECT_EQ(f["samples"], nlohmann::ordered_json::array({5}));
  EXPECT_EQ(f["message"], "peak 48,000");
  EXPECT_EQ(f["batches"], nlohmann::ordered_json::array({0, 2}));
  // Each occurrence keeps its own batch's words and samples.
  EXPECT_EQ(f["occurrences"][0]["message"], "peak 36,000");
  EXPECT_EQ(f["occurrences"][0]["samples"], nlohmann::ordered_json::array({1}));
  EXPECT_EQ(f["occurrences"][1]["message"], "peak 48,000");
  EXPECT_EQ(f["occurrences"][1]["samples"], nlohmann::ordered_json::array({5}));
}
