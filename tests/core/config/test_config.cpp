#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/base/errors.h"
#include "core/config/config.h"
#include "core/parse/order.h"

using namespace batchcheck;

namespace {

const char* kMinimal = R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"},
 "loader": {"batch_size": 8}})";

std::string error_of(const std::string& text) {
  try {
    parse_config("cfg.json", text, "/base");
  } catch (const InputError& e) {
    return format_error(e);
  }
  return "(no error)";
}

// kMinimal with one section replaced.
// 66 probe sizes: more than kMaxProbeSizes.
std::string many_probes() {
  std::string s = "{\"probe_batch_sizes\": [1";
  for (int i = 0; i < 65; ++i) s += ", 1";
  return s + "]}";
}

std::string with(const std::string& section, const std::string& body) {
  std::string model = R"("model": {"path": "m.pt"})";
  std::string data = R"("data": {"inputs": "x.npy", "targets": "y.npy"})";
  std::string loader = R"("loader": {"batch_size": 8})";
  std::string extra;
  std::string part = "\"" + section + "\": " + body;
  if (section == "model") model = part;
  else if (section == "data") data = part;
  else if (section == "loader") loader = part;
  else extra = ", " + part;
  return "{" + model + ", " + data + ", " + loader + extra + "}";
}

}  // namespace

TEST(Config, MinimalHasSpecDefaults) {
  Config c = parse_config("cfg.json", kMinimal, "/base");
  EXPECT_EQ(c.model.path, "/base/m.pt");
  EXPECT_EQ(c.model.mode, Mode::Train);
  EXPECT_FALSE(c.model.output);
  EXPECT_EQ(c.data.format, DataFormat::Npy);
  EXPECT_EQ(c.data.inputs, "/base/x.npy");
  EXPECT_EQ(c.data.targets, "/base/y.npy");
  EXPECT_TRUE(c.data.has_targets);
  EXPECT_EQ(c.loader.batch_size, 8u);
  EXPECT_FALSE(c.loader.drop_last);
  EXPECT_FALSE(c.loader.shuffle);
  EXPECT_EQ(c.loader.world_size, 1u);
  EXPECT_EQ(c.loader.accumulation_steps, 1u);
  EXPECT_EQ(c.loss.type, LossType::None);
  EXPECT_EQ(c.loss.ignore_index, -100);
  EXPECT_EQ(c.checks.probe_batch_sizes, std::vector<uint64_t>{1});
  EXPECT_EQ(c.checks.max_batches, 0u);
  EXPECT_FALSE(c.checks.backward) << "unset: on in train mode, off in eval (decided at scan time)";
  EXPECT_TRUE(c.loader.ignored_keys.empty());
  EXPECT_EQ(c.device, "cpu");
  EXPECT_TRUE(c.sync);
}

TEST(Config, FullSpecExampleParses) {
  const char* text = R"({
  "model": {"path": "unet.pt", "mode": "eval", "output": "out"},
  "data": {"format": "npy", "inputs": "images.npy", "targets": "masks.npy"},
  "loader": {"batch_size": 8, "drop_last": false, "shuffle": true, "seed": 7, "epoch": 2,
             "world_size": 4, "sampler_drop_last": true, "accumulation_steps": 3},
  "loss": {"type": "cross_entropy", "ignore_index": 255, "reduction": "sum", "weight": [1, 2.5]},
  "checks": {"output_range": [0, 1], "target_range": [0, 1], "probe_batch_sizes": [1, 2], "max_batches": 5},
  "device": "cuda:1", "sync": false})";
  Config c = parse_config("cfg.json", text, "dir");
  EXPECT_EQ(c.model.path, "dir/unet.pt");
  EXPECT_EQ(c.model.mode, Mode::Eval);
  ASSERT_TRUE(c.model.output);
  EXPECT_EQ(std::get<std::string>(*c.model.output), "out");
  EXPECT_TRUE(c.loader.shuffle);
  EXPECT_TRUE(c.loader.seed_given);
  EXPECT_EQ(c.loader.seed, 7u);
  EXPECT_EQ(c.loader.epoch, 2u);
  EXPECT_EQ(c.loader.world_size, 4u);
  EXPECT_TRUE(c.loader.sampler_drop_last);
  EXPECT_EQ(c.loader.accumulation_steps, 3u);
  EXPECT_EQ(c.loss.type, LossType::CrossEntropy);
  EXPECT_EQ(c.loss.ignore_index, 255);
  EXPECT_EQ(c.loss.reduction, Reduction::Sum);
  EXPECT_EQ(c.loss.weight, (std::vector<double>{1, 2.5}));
  ASSERT_TRUE(c.checks.output_range);
  EXPECT_EQ(c.checks.output_range->hi, 1);
  EXPECT_EQ(c.checks.probe_batch_sizes, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(c.checks.max_batches, 5u);
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_FALSE(c.sync);
}

TEST(Config, OutputIndexAndAbsolutePaths) {
  Config c = parse_config("cfg.json", with("model", R"({"path": "/abs/m.pt", "output": 0})"), "/base");
  EXPECT_EQ(c.model.path, "/abs/m.pt");
  EXPECT_EQ(std::get<int64_t>(*c.model.output), 0);
}

TEST(Config, PtFormatInferredFromExtension) {
  Config c = parse_config("cfg.json", with("data", R"({"path": "d/data.pt"})"), "/base");
  EXPECT_EQ(c.data.format, DataFormat::Pt);
  EXPECT_EQ(c.data.path, "/base/d/data.pt");
  EXPECT_EQ(c.data.inputs, "inputs");
  EXPECT_EQ(c.data.targets, "targets");
  EXPECT_FALSE(c.data.targets_explicit);
}

TEST(Config, TargetsMayBeOmitted) {
  Config c = parse_config("cfg.json", with("data", R"({"inputs": "x.npy"})"), "/base");
  EXPECT_FALSE(c.data.has_targets);
}

TEST(ConfigErrors, ExactMessages) {
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {with("loader", R"({"batch_size": "8"})"),
       R"(batchcheck: error: cfg.json: loader.batch_size: expected a positive integer, got "8")"},
      {with("loader", R"({"batch_size": 8.5})"),
       "batchcheck: error: cfg.json: loader.batch_size: expected a positive integer, got 8.5"},
      {with("loader", R"({"batch_size": 0})"),
       "batchcheck: error: cfg.json: loader.batch_size: expected a positive integer, got 0"},
      {with("loader", R"({"batch_size": 8, "world_size": -2})"),
       "batchcheck: error: cfg.json: loader.world_size: expected a positive integer, got -2"},
      {with("loader", R"({"batchsize": 8})"),
       R"(batchcheck: error: cfg.json: loader.batchsize: unknown key; did you mean "batch_size"?)"},
      {with("loader", R"({})"), "batchcheck: error: cfg.json: loader.batch_size: missing required key"},
      {with("loader", R"({"batch_size": 8, "shuffle": "yes"})"),
       R"(batchcheck: error: cfg.json: loader.shuffle: expected true or false, got "yes")"},
      {with("loss", R"({"type": "bce_logits"})"),
       R"(batchcheck: error: cfg.json: loss.type: unknown value "bce_logits"; did you mean "bce_with_logits"?)"},
      {with("loss", R"({"type": "hinge"})"),
       "batchcheck: error: cfg.json: loss.type: unknown value \"hinge\" (expected one of: bce, bce_with_logits, "
       "cross_entropy, nll, mse, l1, smooth_l1, none, model, step, dice, dice_ce, jaccard, focal)"},
      {with("loss", R"({"reduction": "mean"})"), "batchcheck: error: cfg.json: loss.type: missing required key"},
      {with("checks", R"({"output_range": [1, 0]})"),
       "batchcheck: error: cfg.json: checks.output_range: low bound 1 is greater than high bound 0"},
      {with("checks", R"({"output_range": [0]})"),
       "batchcheck: error: cfg.json: checks.output_range: expected [low, high], got an array of 1 numbers"},
      {with("checks", R"({"target_range": [0, "1"]})"),
       R"(batchcheck: error: cfg.json: checks.target_range[1]: expected a number, got "1")"},
      {with("checks", R"({"probe_batch_sizes": [1, 0]})"),
       "batchcheck: error: cfg.json: checks.probe_batch_sizes[1]: expected a positive integer, got 0"},
      {with("checks", many_probes()),
       "batchcheck: error: cfg.json: checks.probe_batch_sizes: at most 64 probe sizes, got 66"},
      {with("device", R"("gpu")"),
       R"(batchcheck: error: cfg.json: device: unknown device "gpu" (expected cpu, cuda, cuda:N or auto))"},
      {with("model", R"({"mode": "train"})"), "batchcheck: error: cfg.json: model.path: missing required key"},
      {with("model", R"({"path": "m.pt", "mode": "training"})"),
       R"(batchcheck: error: cfg.json: model.mode: unknown value "training"; did you mean "train"?)"},
      {with("model", R"({"path": "m.pt", "output": 1.5})"),
       "batchcheck: error: cfg.json: model.output: expected an integer index or a string key, got 1.5"},
      {with("model", R"([1])"), "batchcheck: error: cfg.json: model: expected an object, got an array"},
      {with("data", R"({"inputs": "x.bin"})"),
       R"(batchcheck: error: cfg.json: data.format: cannot infer the format from the file extension; set "format" to "npy", "pt" or "imagefolder")"},
      {with("data", R"({"format": "pt", "inputs": "x"})"), "batchcheck: error: cfg.json: data.path: missing required key"},
      {with("data", R"({"format": "imagefolder", "path": "train", "inputs": "x"})"),
       R"(batchcheck: error: cfg.json: data.inputs: not used with format "imagefolder": its samples are (image, class index), the classes its sub-folders)"},
      {with("data", R"({"format": "npy", "inputs": "x.npy", "transform": {"resize": 8}})"),
       R"(batchcheck: error: cfg.json: data.transform: only used with format "imagefolder" (torchvision's image transforms))"},
      {with("data", R"({"format": "imagefolder", "path": "train", "transform": {"resize": [1, 2, 3]}})"),
       "batchcheck: error: cfg.json: data.transform.resize: expected 256 (the smaller edge) or [height, width], got an array"},
      {with("data", R"({"format": "imagefolder", "path": "train", "transform": {"center_crop": 0}})"),
       "batchcheck: error: cfg.json: data.transform.center_crop: expected sizes in [1, 16384], got 0"},
      {with("data", R"({"format": "imagefolder", "path": "train", "transform": {"interpolation": "bicubic"}})"),
       R"(batchcheck: error: cfg.json: data.transform.interpolation: only used with "resize")"},
      {with("data", R"({"format": "imagefolder", "path": "train", "transform": {"resize": 8, "interpolation": "bicubik"}})"),
       R"(batchcheck: error: cfg.json: data.transform.interpolation: unknown value "bicubik"; did you mean "bicubic"?)"},
      {with("data", R"({"format": "imagefolder", "path": "train", "transform": {"normalize": {"mean": [0.5, 0.5]}}})"),
       "batchcheck: error: cfg.json: data.transform.normalize.mean: expected 3 values (r, g, b) or 1 for every channel, got 2"},
      {with("data", R"({"format": "imagefolder", "path": "train", "transform": {"normalize": {"mean": [0.5], "std": [0.2, 0, 0.2]}}})"),
       "batchcheck: error: cfg.json: data.transform.normalize.std: a standard deviation of 0 divides by zero (torchvision's Normalize raises at every sample)"},
      {with("data", R"({"format": "imagefolder", "path": "train", "transform": {"resise": 8}})"),
       R"(batchcheck: error: cfg.json: data.transform.resise: unknown key; did you mean "resize"?)"},
      {with("loader", R"({"batch_size": 8, "collate": {"pad": {"inputs": 0}, "mask": {"attention_mask": "ids"}}})"),
       R"(batchcheck: error: cfg.json: loader.collate.mask.attention_mask: a generated mask reaches forward through model.inputs: list it there, e.g. ["ids", "attention_mask"])"},
      {with("loader", R"({"batch_size": 8, "collate": {"pad": {"ids": 0}, "mask": {"attention_mask": "labels"}}})"),
       R"(batchcheck: error: cfg.json: loader.collate.mask.attention_mask: marks the padding of "labels", which "pad" does not pad: add {"labels": 0} to it)"},
      {with("loader", R"({"batch_size": 8, "collate": {"pad": {"ids": 0, "attention_mask": 0}, "mask": {"attention_mask": "ids"}}})"),
       R"(batchcheck: error: cfg.json: loader.collate.mask.attention_mask: is generated, so it is not padded: remove it from "pad")"},
      {with("loader", R"({"batch_size": 8, "collate": {"pad": {"ids": 0}, "mask": "attention_mask"}})"),
       R"(batchcheck: error: cfg.json: loader.collate.mask: expected an object of generated field -> padded field, e.g. {"attention_mask": "input_ids"}, got "attention_mask")"},
      {with("loss", R"({"type": "mse", "target": "label"})"),
       R"(batchcheck: error: cfg.json: loss.target: names a field, but data.inputs is one .npy file; give the targets' file in data.targets, or map every field to its file: "inputs": {"label": "label.npy", ...})"},
      {with("lossy", R"({})"), R"(batchcheck: error: cfg.json: lossy: unknown key; did you mean "loss"?)"},
      {R"({"model": {"path": "m.pt"}})", "batchcheck: error: cfg.json: data: missing required key"},
      {"[1, 2]", "batchcheck: error: cfg.json: 1:1: expected an object, got an array"},
      {"", "batchcheck: error: cfg.json: 1:1: the file is empty; expected a JSON object"},
      {"{\n  \"model\": {\"path\": \"m.pt\"},\n}",
       "batchcheck: error: cfg.json: 3:1: syntax error while parsing object key - unexpected '}'; expected string literal"},
      {"not json", "batchcheck: error: cfg.json: 1:2: syntax error while parsing value - invalid literal; last read: 'no'"},
      // Found by fuzz_config: nlohmann throws out_of_range, not parse_error, for this.
      {"{\n  \"loader\": {\"batch_size\": 1e99999}}",
       "batchcheck: error: cfg.json: 2:28: number overflow parsing '1e99999'"},
  };
  for (const auto& c : cases) EXPECT_EQ(error_of(c.text), c.expected) << c.text;
}

class ConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("bc_config_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string error_loading(const std::string& path) {
    try {
      load_config(path);
    } catch (const InputError& e) {
      return format_error(e);
    }
    return "(no error)";
  }
  std::filesystem::path dir_;
};

TEST_F(ConfigFiles, RelativePathsResolveAgainstTheConfigFolder) {
  auto cfg = dir_ / "sub" / "cfg.json";
  std::filesystem::create_directories(cfg.parent_path());
  std::ofstream(cfg) << kMinimal;
  Config c = load_config(cfg.string());
  EXPECT_EQ(c.model.path, (dir_ / "sub" / "m.pt").string());
  EXPECT_EQ(c.file, cfg.string());
}

TEST_F(ConfigFiles, MissingFileAndDirectory) {
  auto missing = (dir_ / "nope.json").string();
  EXPECT_EQ(error_loading(missing), "batchcheck: error: " + missing + ": cannot read: No such file or directory");
  EXPECT_EQ(error_loading(dir_.string()), "batchcheck: error: " + dir_.string() + ": is a directory, expected a JSON file");
}

TEST(Config, DataLoaderKeysThatDoNotChangeTheBatchesAreAcceptedAndListed) {
  Config c = parse_config("cfg.json", with("loader", R"({"batch_size": 8, "num_workers": 4, "pin_memory": true,
      "persistent_workers": true, "prefetch_factor": 2, "timeout": 0})"), "/base");
  EXPECT_EQ(c.loader.ignored_keys,
            (std::vector<std::string>{"num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "timeout"}));
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "num_worker": 4})")),
            "batchcheck: error: cfg.json: loader.num_worker: unknown key; did you mean \"num_workers\"?");
  EXPECT_EQ(*parse_config("cfg.json", with("checks", R"({"backward": false})"), "/base").checks.backward, false);
}

TEST(Config, NulInAPathIsAnError) {
  EXPECT_EQ(error_of(with("model", R"({"path": "m\u0000.pt"})")),
            "batchcheck: error: cfg.json: model.path: contains a NUL character (\\u0000)");
}

TEST(Config, CollateDefaultOrPadPerField) {
  Config d = parse_config("cfg.json", with("loader", R"({"batch_size": 8, "collate": "default"})"), "/base");
  EXPECT_FALSE(d.loader.collate.pads());
  Config p = parse_config("cfg.json", with("loader", R"({"batch_size": 8, "collate": {"pad": {"inputs": 0, "targets": -100}, "pad_to_multiple_of": 8}})"), "/base");
  EXPECT_EQ(p.loader.collate.pad_for("x", false), 0.0);
  EXPECT_EQ(p.loader.collate.pad_for("y", true), -100.0);
  EXPECT_EQ(p.loader.collate.pad_to_multiple_of, 8u);
  Config only = parse_config("cfg.json", with("loader", R"({"batch_size": 8, "collate": {"pad": {"inputs": 1.5}}})"), "/base");
  EXPECT_EQ(only.loader.collate.pad_for("inputs", false), 1.5);
  EXPECT_FALSE(only.loader.collate.pad_for("targets", true));
  EXPECT_EQ(only.loader.collate.pad_to_multiple_of, 1u);

  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "collate": "pad"})")),
            "batchcheck: error: cfg.json: loader.collate: a padding collate needs each padded field's value: {\"pad\": {\"inputs\": 0}}");
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "collate": "defualt"})")),
            "batchcheck: error: cfg.json: loader.collate: unknown value \"defualt\"; did you mean \"default\"?");
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "collate": {"pad": {"input": 0}}})")),
            "batchcheck: error: cfg.json: loader.collate.pad.input: no such field (fields: inputs, targets); did you mean \"inputs\"?");
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "collate": {"pad": {}}})")),
            "batchcheck: error: cfg.json: loader.collate.pad: name a field to pad with its padding value, e.g. {\"inputs\": 0}");
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "collate": {"pad_to_multiple_of": 8}})")),
            "batchcheck: error: cfg.json: loader.collate.pad_to_multiple_of: only used with \"pad\" (the lengths of padded fields are rounded up)");
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "collate": {"pad": {"inputs": 0}, "pad_to_multiple_of": 0}})")),
            "batchcheck: error: cfg.json: loader.collate.pad_to_multiple_of: expected a positive integer, got 0");
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "collate": 3})")),
            "batchcheck: error: cfg.json: loader.collate: expected \"default\" or an object such as {\"pad\": {\"inputs\": 0}}, got 3");
}

TEST(Config, RecordedOrderReplacesTheSampler) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("batchcheck_cfg_order_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream o(dir / "order.json");
    o << "[[3, 1, 0], [5, 2], [4]]";
  }
  Config c = parse_config("cfg.json", with("loader", R"({"order": "order.json"})"), dir.string());
  ASSERT_TRUE(c.loader.order);
  EXPECT_EQ(c.loader.order->batches_per_rank(), 3u);
  EXPECT_EQ(c.loader.batch_size, 3u);  // the largest recorded batch, unless given
  EXPECT_EQ(parse_config("cfg.json", with("loader", R"({"order": "order.json", "batch_size": 4})"), dir.string()).loader.batch_size, 4u);
  auto err = [&](const std::string& loader) {
    try {
      parse_config("cfg.json", with("loader", loader), dir.string());
    } catch (const InputError& e) {
      return format_error(e);
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(err(R"({"order": "order.json", "shuffle": true})"),
            "batchcheck: error: cfg.json: loader.shuffle: not used with \"order\": the recorded batches already say which "
            "samples each batch of each rank holds; remove \"shuffle\"");
  EXPECT_EQ(err(R"({"order": "missing.json"})"), "batchcheck: error: missing.json: cannot read: No such file or directory");
  // order_rank: the order is one DDP rank's share.
  const Config share = parse_config("cfg.json", with("loader", R"({"order": "order.json", "order_rank": {"rank": 1, "world_size": 4, "samples": 2}})"), dir.string());
  ASSERT_TRUE(share.loader.order_rank);
  EXPECT_EQ(share.loader.order_rank->rank, 1u);
  EXPECT_EQ(share.loader.order_rank->world_size, 4u);
  EXPECT_EQ(share.loader.order_rank->samples, 2u);
  EXPECT_EQ(err(R"({"order": "order.json", "order_rank": {"rank": 4, "world_size": 4}})"),
            "batchcheck: error: cfg.json: loader.order_rank.rank: expected a rank below world_size 4");
  EXPECT_EQ(err(R"({"batch_size": 2, "order_rank": {"rank": 0, "world_size": 2}})"),
            "batchcheck: error: cfg.json: loader.order_rank: describes a recorded order: use it with \"order\"");
  fs::remove_all(dir);
}

TEST(Config, ModelInputsNameTheFields) {
  const std::string two_npy = R"("data": {"inputs": {"ids": "ids.npy", "mask": "mask.npy"}, "targets": "y.npy"})";
  auto cfg = [&](const std::string& model, const std::string& data) {
    return "{" + model + ", " + data + R"(, "loader": {"batch_size": 8}})";
  };
  Config p = parse_config("cfg.json", cfg(R"("model": {"path": "m.pt", "inputs": ["ids", "mask"]})", two_npy), "/base");
  EXPECT_EQ(p.model.inputs_kind, InputsKind::Positional);
  EXPECT_EQ(p.model.input_fields, (std::vector<std::string>{"ids", "mask"}));
  EXPECT_EQ(p.data.field_files, (std::vector<std::string>{"/base/ids.npy", "/base/mask.npy"}));
  Config n = parse_config("cfg.json", cfg(R"("model": {"path": "m.pt", "inputs": {"attention_mask": "mask", "input_ids": "ids"}})", two_npy), "/base");
  EXPECT_EQ(n.model.inputs_kind, InputsKind::Named);
  EXPECT_EQ(n.model.input_args, (std::vector<std::string>{"attention_mask", "input_ids"}));
  EXPECT_EQ(n.model.input_fields, (std::vector<std::string>{"mask", "ids"}));
  EXPECT_EQ(parse_config("cfg.json", cfg(R"("model": {"path": "m.pt", "inputs": "record"})", two_npy), "/base").model.inputs_kind,
            InputsKind::Record);

  auto err = [&](const std::string& model, const std::string& data) {
    try {
      parse_config("cfg.json", cfg(model, data), "/base");
    } catch (const InputError& e) {
      return format_error(e);
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(err(R"("model": {"path": "m.pt"})", two_npy),
            "batchcheck: error: cfg.json: model.inputs: missing: data.inputs names 2 fields (ids, mask); list the ones forward "
            "takes, in order, or \"record\"");
  EXPECT_EQ(err(R"("model": {"path": "m.pt", "inputs": ["ids", "maks"]})", two_npy),
            "batchcheck: error: cfg.json: model.inputs[1]: no field \"maks\" in data.inputs (fields: ids, mask); did you mean \"mask\"?");
  EXPECT_EQ(err(R"("model": {"path": "m.pt", "inputs": ["ids"]})", R"("data": {"inputs": "x.npy", "targets": "y.npy"})"),
            "batchcheck: error: cfg.json: model.inputs[0]: names the field \"ids\" but data.inputs is one .npy file; map each "
            "field to its file: \"inputs\": {\"ids\": \"ids.npy\", ...}");
  EXPECT_EQ(err(R"("model": {"path": "m.pt", "inputs": "all"})", two_npy),
            "batchcheck: error: cfg.json: model.inputs: expected \"record\" (the whole record as one Dict[str, Tensor] argument), "
            "a list of fields or an object of argument -> field, got \"all\"");
  EXPECT_EQ(err(R"("model": {"path": "m.pt", "inputs": ["ids", "ids"]})", two_npy),
            "batchcheck: error: cfg.json: model.inputs[1]: the field \"ids\" is already inputs[0]");
  EXPECT_EQ(err(R"("model": {"path": "m.pt2", "inputs": "record"})", two_npy),
            "batchcheck: error: cfg.json: model.inputs: a .pt2 program takes its inputs positionally: list the fields in forward's order");
  EXPECT_EQ(err(R"("model": {"path": "m.pt", "inputs": ["ids", "mask"]})", R"("data": {"path": "d.pt", "inputs": {"ids": "ids.npy"}})"),
            "batchcheck: error: cfg.json: data.inputs: an object of field -> file is for .npy files; a .pt file names its keys in model.inputs");
  const std::string one_npy = R"("data": {"inputs": "x.npy", "targets": "y.npy"})";
  EXPECT_EQ(err(R"("model": {"path": "m.pt", "trains_exported": true})", one_npy),
            "batchcheck: error: cfg.json: model.trains_exported: only a .pt2 program can be the one training runs; a "
            "TorchScript archive is always checked as the model you train");
  EXPECT_EQ(err(R"("model": {"path": "m.pt2", "trains_exported": 1})", one_npy),
            "batchcheck: error: cfg.json: model.trains_exported: expected true or false, got 1");
  EXPECT_TRUE(parse_config("cfg.json", cfg(R"("model": {"path": "m.pt2", "trains_exported": true})", one_npy), "/base")
                  .model.trains_exported);
  EXPECT_FALSE(parse_config("cfg.json", cfg(R"("model": {"path": "m.pt2"})", one_npy), "/base").model.trains_exported);
}

TEST(Config, VariableLengthNpyFieldsAreValuesAndOffsets) {
  auto cfg = [](const std::string& data) { return R"({"model": {"path": "m.pt", "inputs": ["ids", "mask"]}, )" + data + R"(, "loader": {"batch_size": 8}})"; };
  Config p = parse_config("cfg.json",
                          cfg(R"("data": {"inputs": {"ids": {"values": "ids.v.npy", "offsets": "ids.o.npy"}, "mask": "mask.npy"},
                                          "targets": {"values": "y.v.npy", "offsets": "y.o.npy"}})"),
                          "/base");
  EXPECT_EQ(p.data.field_files, (std::vector<std::string>{"/base/ids.v.npy", "/base/mask.npy"}));
  EXPECT_EQ(p.data.field_offsets, (std::vector<std::string>{"/base/ids.o.npy", ""}));
  EXPECT_EQ(p.data.targets, "/base/y.v.npy");
  EXPECT_EQ(p.data.targets_offsets, "/base/y.o.npy");
  EXPECT_EQ(p.data.targets_offsets_display, "y.o.npy");
  // One input field: the object with exactly "values" and "offsets" is the field itself.
  Config one = parse_config(
      "cfg.json", R"({"model": {"path": "m.pt"}, "data": {"inputs": {"values": "v.npy", "offsets": "o.npy"}}, "loader": {"batch_size": 8}})", "/base");
  EXPECT_EQ(one.data.format, DataFormat::Npy);
  EXPECT_EQ(one.data.inputs, "/base/v.npy");
  EXPECT_EQ(one.data.inputs_offsets, "/base/o.npy");
  EXPECT_TRUE(one.data.field_names.empty());
  try {
    parse_config("cfg.json", cfg(R"("data": {"inputs": {"ids": {"values": "v.npy"}, "mask": "m.npy"}})"), "/base");
    ADD_FAILURE() << "a field object without offsets";
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), R"(batchcheck: error: cfg.json: data.inputs.ids: expected a .npy file name, or {"values": ..., "offsets": ...} for a variable-length field, got an object)");
  }
}

TEST(Config, LossTargetNamesTheTargetField) {
  Config npy = parse_config("cfg.json", R"({"model": {"path": "m.pt", "inputs": ["ids"]}, "data": {"inputs": {"ids": "ids.npy", "label": "y.npy"}},
                                          "loader": {"batch_size": 8}, "loss": {"type": "cross_entropy", "target": "label"}})",
                            "/base");
  EXPECT_EQ(npy.data.field_names, (std::vector<std::string>{"ids"}));
  EXPECT_EQ(npy.data.targets, "/base/y.npy");
  EXPECT_EQ(npy.data.targets_display, "y.npy");
  EXPECT_TRUE(npy.data.has_targets);
  Config pt = parse_config("cfg.json", R"({"model": {"path": "m.pt"}, "data": {"path": "d.pt"}, "loader": {"batch_size": 8},
                                         "loss": {"type": "cross_entropy", "target": "label"}})",
                           "/base");
  EXPECT_EQ(pt.data.targets, "label");
  EXPECT_TRUE(pt.data.targets_explicit);
  auto err = [](const std::string& text) {
    try {
      parse_config("cfg.json", text, "/base");
    } catch (const InputError& e) {
      return format_error(e);
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(err(R"({"model": {"path": "m.pt"}, "data": {"path": "d.pt", "targets": "y"}, "loader": {"batch_size": 8},
                   "loss": {"type": "mse", "target": "label"}})"),
            R"(batchcheck: error: cfg.json: loss.target: names "label" but data.targets names "y"; keep one)");
  EXPECT_EQ(err(R"({"model": {"path": "m.pt", "inputs": ["ids"]}, "data": {"inputs": {"ids": "ids.npy", "label": "y.npy"}},
                   "loader": {"batch_size": 8}, "loss": {"type": "mse", "target": "lable"}})"),
            R"(batchcheck: error: cfg.json: loss.target: no field "lable" in data.inputs (fields: ids, label); did you mean "label"?)");
}

TEST(Config, LossAuxListsExtraOutputsWithTheirWeights) {
  auto model = [](const std::string& output) { return R"({"path": "m.pt", "output": )" + output + "}"; };
  auto text = [&](const std::string& output, const std::string& aux) {
    std::string t = with("model", model(output));
    return t.substr(0, t.size() - 1) + R"(, "loss": {"type": "cross_entropy", "aux": )" + aux + "}}";
  };
  Config cfg = parse_config("cfg.json", text(R"("out")", R"({"aux": 0.5, "aux2": 0})"), "/base");
  EXPECT_EQ(cfg.loss.aux, (std::vector<std::pair<std::string, double>>{{"aux", 0.5}, {"aux2", 0.0}}));
  EXPECT_EQ(parse_config("cfg.json", text("0", R"({"1": 0.4})"), "/base").loss.aux.front().first, "1");

  EXPECT_EQ(error_of(text(R"("out")", R"({"aux": -1})")),
            R"(batchcheck: error: cfg.json: loss.aux.aux: expected the output's weight in the loss, a non-negative number, got -1)");
  EXPECT_EQ(error_of(text(R"("out")", R"(["aux"])")),
            R"(batchcheck: error: cfg.json: loss.aux: expected an object of extra outputs and their weights, e.g. {"aux": 0.5} (a dict key, or a tuple index as "1"), got an array)");
  EXPECT_EQ(error_of(text(R"("out")", R"({"out": 1})")),
            R"(batchcheck: error: cfg.json: loss.aux.out: is model.output, the prediction itself; list only the extra outputs)");
  EXPECT_EQ(error_of(text("0", R"({"9223372036854775808": 1})")),
            R"(batchcheck: error: cfg.json: loss.aux.9223372036854775808: is not an index of a tuple the model could return)");
  EXPECT_EQ(error_of(text("0", R"({"aux": 1})")),
            R"(batchcheck: error: cfg.json: loss.aux.aux: model.output is an index, so the model returns a tuple or list: name each extra output by its index ("1"))");
  EXPECT_EQ(error_of(R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"}, "loader": {"batch_size": 8},
                        "loss": {"type": "cross_entropy", "aux": {"aux": 1}}})"),
            R"(batchcheck: error: cfg.json: loss.aux: needs model.output: the model returns several outputs, and model.output names the prediction among them)");
}

// batchcheck.scan()'s fallback: the model ran in the Python process, so no file and no backward.
TEST(Config, EagerModelsHaveNoFileAndNoBackward) {
  auto text = [](const std::string& model, const std::string& checks = "{}") {
    return R"({"model": )" + model + R"(, "data": {"format": "stream", "path": "s.sock"}, "loader": {"batch_size": 8}, "checks": )" +
           checks + "}";
  };
  Config cfg = parse_config("cfg.json", text(R"({"format": "eager", "mode": "train"})"), "/base");
  EXPECT_EQ(cfg.model.format, ModelFormat::Eager);
  EXPECT_EQ(cfg.model.path, "");
  EXPECT_FALSE(backward_enabled(cfg));  // train mode, yet the graph is in the Python process
  EXPECT_EQ(error_of(text(R"({"format": "eager", "path": "m.pt"})")),
            R"(batchcheck: error: cfg.json: model.path: not used with format "eager": the prediction comes from the Python process with each batch)");
  EXPECT_EQ(error_of(R"({"model": {"format": "eager"}, "data": {"inputs": "x.npy"}, "loader": {"batch_size": 8}})"),
            R"(batchcheck: error: cfg.json: model.format: "eager" takes its predictions from batchcheck.scan() (data.format "stream"), not from a file)");
  EXPECT_EQ(error_of(text(R"({"format": "eager"})", R"({"backward": true})")),
            R"(batchcheck: error: cfg.json: checks.backward: an eager forward's graph stays in the Python process: backward runs only with a TorchScript archive)");
}

TEST(Config, RegionLosses) {
  auto text = [](const std::string& loss) {
    return R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"}, "loader": {"batch_size": 8}, "loss": )" +
           loss + "}";
  };
  Config cfg = parse_config("cfg.json", text(R"({"type": "dice", "activation": "softmax", "target_format": "index", "ignore_index": 255})"), "/base");
  EXPECT_EQ(cfg.loss.type, LossType::Dice);
  EXPECT_EQ(cfg.loss.activation, Activation::Softmax);
  EXPECT_EQ(cfg.loss.target_format, TargetFormat::Index);
  EXPECT_TRUE(cfg.loss.ignore_index_given);
  Config plain = parse_config("cfg.json", text(R"({"type": "jaccard"})"), "/base");
  EXPECT_EQ(plain.loss.activation, Activation::None);
  EXPECT_EQ(plain.loss.target_format, TargetFormat::Mask);
  EXPECT_FALSE(plain.loss.ignore_index_given);
  Config focal = parse_config("cfg.json", text(R"({"type": "focal", "gamma": 1.5, "alpha": 0.25})"), "/base");
  EXPECT_EQ(focal.loss.gamma, 1.5);
  EXPECT_EQ(focal.loss.alpha, 0.25);

  EXPECT_EQ(error_of(text(R"({"type": "cross_entropy", "activation": "softmax"})")),
            R"(batchcheck: error: cfg.json: loss.activation: only used with the region losses (type "dice", "dice_ce", "jaccard", "focal"))");
  EXPECT_EQ(error_of(text(R"({"type": "dice", "gamma": 2})")), R"(batchcheck: error: cfg.json: loss.gamma: only used with type "focal")");
  EXPECT_EQ(error_of(text(R"({"type": "focal", "alpha": 2})")), R"(batchcheck: error: cfg.json: loss.alpha: expected a number in [0, 1], got 2)");
  EXPECT_EQ(error_of(text(R"({"type": "dice", "weight": [1, 2]})")),
            R"(batchcheck: error: cfg.json: loss.weight: not used by type "dice" (batchcheck checks its targets, not its weighting))");
  EXPECT_EQ(error_of(text(R"({"type": "dice", "activation": "softmax", "target_format": "binary"})")),
            R"(batchcheck: error: cfg.json: loss.activation: "softmax" over the one channel of a "binary" target is 1 everywhere: use "sigmoid")");
  EXPECT_EQ(error_of(text(R"({"type": "dice", "target_format": "indices"})")).rfind(
                R"(batchcheck: error: cfg.json: loss.target_format: )", 0),
            0u);
  EXPECT_NE(error_of(text(R"({"type": "dise"})")).find(R"(did you mean "dice"?)"), std::string::npos);
}

TEST(Config, ListCollateAndTheModelsOwnLoss) {
  const std::string base = R"({"model": {"path": "m.pt", "output": 0}, "data": {"path": "d.pt"},
                               "loader": {"batch_size": 4, "collate": {"list": true}}, "loss": {"type": "model"}})";
  Config cfg = parse_config("cfg.json", base, "/base");
  EXPECT_TRUE(cfg.loader.collate.list);
  EXPECT_EQ(cfg.loss.type, LossType::Model);
  EXPECT_EQ(error_of(R"({"model": {"path": "m.pt"}, "data": {"path": "d.pt"},
                        "loader": {"batch_size": 4, "collate": {"list": true, "pad": {"inputs": 0}}}})"),
            R"(batchcheck: error: cfg.json: loader.collate.list: keeps each sample apart, so there is nothing to pad or mask: remove "pad" and "mask")");
  EXPECT_EQ(error_of(R"({"model": {"path": "m.pt", "inputs": "record"}, "data": {"inputs": {"a": "a.npy"}, "targets": "y.npy"},
                        "loader": {"batch_size": 4, "collate": {"list": true}}, "loss": {"type": "none"}})"),
            R"(batchcheck: error: cfg.json: loader.collate.list: model.inputs "record" passes one Dict[str, Tensor] of batched fields; with lists of samples, list the fields)");
  EXPECT_EQ(error_of(R"({"model": {"path": "m.pt", "inputs": {"images": "inputs"}}, "data": {"path": "d.pt"},
                        "loader": {"batch_size": 4}, "loss": {"type": "model"}})"),
            R"(batchcheck: error: cfg.json: model.inputs: with loss type "model" the targets follow the inputs positionally (model(images, targets)): list the input fields)");
  EXPECT_EQ(error_of(R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy"}, "loader": {"batch_size": 4}, "loss": {"type": "model"}})"),
            R"(batchcheck: error: cfg.json: loss.type: "model" passes the targets to forward, which computes the loss: the data holds no targets)");
  EXPECT_EQ(error_of(R"({"model": {"path": "m.pt", "output": 0}, "data": {"path": "d.pt"}, "loader": {"batch_size": 4},
                        "loss": {"type": "model", "aux": {"1": 1}}})"),
            R"(batchcheck: error: cfg.json: loss.aux: needs a loss "type" batchcheck computes: each extra output is compared with the target by that loss (with "model", forward's own loss already adds its heads))");
}

// Issue 29 (9): sizes a config asks for are bounded before anything is allocated for them.
TEST(ConfigBounds, AFileOverEightMiBIsRefusedBeforeItIsParsed) {
  // A hostile corpus's 50,000,000 probe sizes: the text alone is 100 MiB; parsed, it would
  // take gigabytes before the 64-probe limit is checked.
  std::string probes = "{\"probe_batch_sizes\": [";
  probes.reserve(100u << 20);
  for (int i = 0; i < 50'000'000 - 1; ++i) probes += "1,";
  probes += "1]}";
  std::string text = with("checks", probes);
  text.resize(100u << 20, ' ');  // trailing whitespace: exactly 100 MiB of valid JSON
  EXPECT_EQ(error_of(text), "batchcheck: error: cfg.json: the file is 104857600 bytes (100 MiB); a config file may be at most "
                            "8 MiB (8388608 bytes): its settings take a few KB, its longest lists (loss.weight, one value "
                            "per class) a few MB");
  // At the limit it is read (and the list refused by its own bound).
  std::string small = with("checks", many_probes());
  small.resize(8u << 20, ' ');
  EXPECT_EQ(error_of(small), "batchcheck: error: cfg.json: checks.probe_batch_sizes: at most 64 probe sizes, got 66");
}

TEST_F(ConfigFiles, AFileOverEightMiBIsRefusedBeforeItIsRead) {
  const std::string path = (dir_ / "cfg.json").string();
  std::string text = kMinimal;
  text.resize(9u << 20, ' ');
  std::ofstream(path) << text;
  EXPECT_EQ(error_loading(path), "batchcheck: error: " + path + ": the file is 9437184 bytes (9 MiB); a config file may be at "
                                 "most 8 MiB (8388608 bytes): its settings take a few KB, its longest lists (loss.weight, one "
                                 "value per class) a few MB");
}

TEST(ConfigBounds, WorldSizeIsBoundedByTheRanksAReplayCanHold) {
  // 2^63 ranks: the replay would list every rank (and exit 3 or terminate on bad_alloc).
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "world_size": 9223372036854775808})")),
            "batchcheck: error: cfg.json: loader.world_size: at most 1048576 ranks (2^20), got 9223372036854775808: the "
            "replay checks every rank and keeps state for each, at least 8 bytes a rank for the list of ranks alone (64 EiB here)");
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "world_size": 1048577})")),
            "batchcheck: error: cfg.json: loader.world_size: at most 1048576 ranks (2^20), got 1048577: the replay checks "
            "every rank and keeps state for each, at least 8 bytes a rank for the list of ranks alone (8 MiB here)");
  Config c = parse_config("cfg.json", with("loader", R"({"batch_size": 8, "world_size": 1048576})"), "/base");
  EXPECT_EQ(c.loader.world_size, 1048576u);
  EXPECT_EQ(c.loader.sampler, SamplerKind::Distributed);
}

TEST(ConfigBounds, PadToMultipleOfIsBounded) {
  const auto loader = [](const std::string& m) {
    return with("loader", R"({"batch_size": 8, "collate": {"pad": {"inputs": 0}, "pad_to_multiple_of": )" + m + "}}");
  };
  EXPECT_EQ(error_of(loader("4611686018427387904")),
            "batchcheck: error: cfg.json: loader.collate.pad_to_multiple_of: expected at most 1048576 (2^20), got "
            "4611686018427387904: every padded field of a batch is rounded up to a multiple of it, so one int64 sample "
            "alone would take 32 EiB");
  EXPECT_EQ(parse_config("cfg.json", loader("1048576"), "/base").loader.collate.pad_to_multiple_of, 1048576u);
}

TEST(ConfigBounds, ImageSizesAreBoundedByTheirPixels) {
  const auto transform = [](const std::string& t) {
    return with("data", R"({"format": "imagefolder", "path": "train", "transform": )" + t + "}");
  };
  EXPECT_EQ(error_of(transform(R"({"resize": [16384, 16384]})")),
            "batchcheck: error: cfg.json: data.transform.resize: 16384 x 16384 is 268435456 pixels, at most 67108864 "
            "(8192 x 8192): ToTensor makes 12 bytes a pixel (3 float32 channels), so one image would take 3 GiB");
  EXPECT_EQ(error_of(transform(R"({"resize": 9000})")),
            "batchcheck: error: cfg.json: data.transform.resize: a smaller edge of 9000 makes at least 9000 x 9000 = "
            "81000000 pixels, at most 67108864 (8192 x 8192): ToTensor makes 12 bytes a pixel (3 float32 channels), so one "
            "image would take 927 MiB");
  EXPECT_EQ(error_of(transform(R"({"center_crop": [16384, 4097]})")),
            "batchcheck: error: cfg.json: data.transform.center_crop: 16384 x 4097 is 67125248 pixels, at most 67108864 "
            "(8192 x 8192): ToTensor makes 12 bytes a pixel (3 float32 channels), so one image would take 768 MiB");
  Config c = parse_config("cfg.json", transform(R"({"resize": 8192, "center_crop": [16384, 4096]})"), "/base");
  EXPECT_EQ(c.data.transform.resize->height, 8192);
  EXPECT_EQ(c.data.transform.center_crop->width, 4096);
}

TEST(ConfigBounds, FieldListsAreBounded) {
  // Each field is a tensor of every batch; the cross-checks compare these lists with each other.
  std::string list = "[\"f0\"", map = "{\"f0\": \"f0.npy\"", pads = "{\"f0\": 0", masks = "{\"m0\": \"f0\"";
  for (int i = 1; i <= 1024; ++i) {
    const std::string n = std::to_string(i);
    list += ", \"f" + n + "\"";
    map += ", \"f" + n + "\": \"f" + n + ".npy\"";
    pads += ", \"f" + n + "\": 0";
    masks += ", \"m" + n + "\": \"f0\"";
  }
  list += "]", map += "}", pads += "}", masks += "}";
  EXPECT_EQ(error_of(with("model", R"({"path": "m.pt", "inputs": )" + list + "}")),
            "batchcheck: error: cfg.json: model.inputs: at most 1024 inputs, got 1025: each is a tensor of every batch");
  EXPECT_EQ(error_of(with("data", R"({"inputs": )" + map + R"(, "targets": "y.npy"})")),
            "batchcheck: error: cfg.json: data.inputs: at most 1024 fields, got 1025: each is a tensor of every batch");
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "collate": {"pad": )" + pads + "}}")),
            "batchcheck: error: cfg.json: loader.collate.pad: at most 1024 padded fields, got 1025: each is a tensor of every batch");
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "collate": {"pad": {"f0": 0}, "mask": )" + masks + "}}")),
            "batchcheck: error: cfg.json: loader.collate.mask: at most 1024 generated masks, got 1025: each is a tensor of every batch");
}

TEST(Config, PrecisionAsTrained) {
  const std::string top = R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy"}, "loader": {"batch_size": 8}, )";
  Config c = parse_config("cfg.json", top + R"("precision": "fp16"})", "/base");
  EXPECT_EQ(c.precision.dtype, Precision::Fp16);
  EXPECT_FALSE(c.precision.recorded);
  EXPECT_EQ(c.precision.from, "the config's precision");
  c = parse_config("cfg.json", top + R"("precision": {"dtype": "bf16", "casts": "recorded", "source": "your step's torch.autocast"}})", "/base");
  EXPECT_EQ(c.precision.dtype, Precision::Bf16);
  EXPECT_TRUE(c.precision.recorded);
  EXPECT_EQ(c.precision.from, "your step's torch.autocast");
  EXPECT_EQ(parse_config("cfg.json", kMinimal, "/base").precision.dtype, Precision::Fp32);  // the default, unchanged
  EXPECT_EQ(parse_config("cfg.json", top + R"("checks": {"half_headroom": 0.6}})", "/base").checks.half_headroom, 0.6);
  EXPECT_EQ(error_of(top + R"("precision": "fp8"})"),
            "batchcheck: error: cfg.json: precision: unknown precision \"fp8\" (expected fp32, fp16 or bf16)");
  EXPECT_EQ(error_of(top + R"("precision": {"dtype": "fp16", "casts": "mine"}})"),
            "batchcheck: error: cfg.json: precision.casts: expected \"autocast\" (the engine enters torch.autocast) or "
            "\"recorded\" (the model's graph holds its casts)");
  EXPECT_EQ(error_of(top + R"("checks": {"half_headroom": 2}})"),
            "batchcheck: error: cfg.json: checks.half_headroom: expected a share of float16's range (65,504) above 0 and at "
            "most 1, e.g. 0.5");
  EXPECT_EQ(error_of(R"({"model": {"path": "m.pt2"}, "data": {"inputs": "x.npy"}, "loader": {"batch_size": 8}, "precision": "bf16"})"),
            std::string("batchcheck: error: cfg.json: precision: ") + kPt2NoPrecision);
}

// Text is text: names and limits in characters, keywords refused, echoes cut (issue 59, item 5).
TEST(Config, CollateFnNamesAreValidPythonNamesCountedInCharacters) {
  Config c = parse_config("cfg.json", with("loader", R"({"batch_size": 8, "collate_fn": "mymod.collé"})"), "/base");
  EXPECT_EQ(c.loader.collate_fn, "mymod.collé");
  for (const char* bad : {"import", "mymod.class", "a..b", "1abc", "a b"}) {
    const std::string body = std::string(R"({"batch_size": 8, "collate_fn": ")") + bad + "\"}";
    EXPECT_EQ(error_of(with("loader", body)),
              std::string("batchcheck: error: cfg.json: loader.collate_fn: expected a Python name such as \"mymodule.pad_collate\" "
                          "(a module's function, no keyword), got \"") + bad + "\"")
        << bad;
  }
}

TEST(Config, DescriptionLimitsCountCharactersNotBytes) {
  std::string cjk;
  for (int i = 0; i < 101; ++i) cjk += "模";  // 101 characters, 303 bytes
  Config c = parse_config("cfg.json", R"({"source": ")" + cjk + R"(", "model": {"path": "m.pt"}, "data": {"inputs": "x.npy",
    "targets": "y.npy"}, "loader": {"batch_size": 8}})", "/base");
  EXPECT_EQ(c.source, cjk);
  std::string long_source;
  for (int i = 0; i < 301; ++i) long_source += "é";
  EXPECT_EQ(error_of(R"({"source": ")" + long_source + R"(", "model": {"path": "m.pt"}, "data": {"inputs": "x.npy",
    "targets": "y.npy"}, "loader": {"batch_size": 8}})"),
            "batchcheck: error: cfg.json: source: expected a description of 1 to 300 characters");
}

TEST(Config, OrderNameWithoutAnOrderAndAHugePrecisionAreRefusedInOneShortLine) {
  EXPECT_EQ(error_of(with("loader", R"({"batch_size": 8, "order_name": 7})")),
            "batchcheck: error: cfg.json: loader.order_name: used only with \"order\": it names a recorded order "
            "(batchcheck.scan() writes both)");
  const std::string huge(7 << 20, 'x');
  EXPECT_EQ(error_of(R"({"precision": ")" + huge + R"(", "model": {"path": "m.pt"}, "data": {"inputs": "x.npy",
    "targets": "y.npy"}, "loader": {"batch_size": 8}})"),
            "batchcheck: error: cfg.json: precision: unknown precision \"" + std::string(40, 'x') +
                "...\" (expected fp32, fp16 or bf16)");
}
