// The bad-input catalogue: every input a CI gate may be handed by mistake gets one clear
// line on stderr and exit 2 (or, for a model that raises, a finding and exit 1): never a
// crash, a backtrace, "terminate called" or a partial report.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "support/pickle_bytes.h"
#include "support/workspace.h"

using namespace batchcheck;
using namespace batchcheck::test_util;

namespace {

const char* kSum = "def forward(self, x):\n    return x.sum(1, keepdim=True)\n";

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A valid setup: 8 samples of 3 features, float targets (8, 1), a summing model.
void valid(Workspace& w) {
  w.inputs(8, 3).float_targets(std::vector<float>(8, 0.0f)).model(kSum);
  w.write_config();
}

// An npy file with this header dict and `data_bytes` bytes of zeros after it.
void raw_npy(const std::string& path, const std::string& dict, std::size_t data_bytes, char major = 1) {
  std::string h("\x93NUMPY", 6);
  h += major;
  h += '\0';
  h += static_cast<char>(dict.size() & 0xff);
  h += static_cast<char>(dict.size() >> 8);
  if (major != 1) h += std::string(2, '\0');
  write_text(path, h + dict + std::string(data_bytes, '\0'));
}

struct BadInput {
  const char* name;
  // Prepares the workspace and returns the CLI arguments (after "scan").
  std::function<std::vector<std::string>(Workspace&)> prepare;
  int code;
  // The exact first line of stderr ("PREFIX:" + a prefix of it, where LibTorch's text follows).
  // Paths are as the user typed them: the test runs from the workspace folder.
  std::string first_line;
};

std::string cfg_with(Workspace& w, const std::string& text) {
  valid(w);
  write_text(w.file("cfg.json"), text);
  return w.file("cfg.json");
}

const std::string kGood =
    R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"}, "loader": {"batch_size": 4}, "loss": {"type": "mse"}})";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  if (pos != std::string::npos) s.replace(pos, from.size(), to);
  return s;
}

std::vector<BadInput> catalogue() {
  auto cfg = [](std::string text) {
    return [text](Workspace& w) { return std::vector<std::string>{cfg_with(w, text)}; };
  };
  auto on_valid = [](std::function<void(Workspace&)> change, std::vector<std::string> flags = {}) {
    return [change, flags](Workspace& w) {
      valid(w);
      change(w);
      std::vector<std::string> args{w.file("cfg.json")};
      args.insert(args.end(), flags.begin(), flags.end());
      return args;
    };
  };
  auto npy_inputs = [on_valid](std::string dict, std::size_t bytes, char major = 1) {
    return on_valid([dict, bytes, major](Workspace& w) { raw_npy(w.file("x.npy"), dict, bytes, major); });
  };
  auto pt_data = [on_valid](std::vector<PtEntry> entries, bool tuple = false) {
    return on_valid([entries, tuple](Workspace& w) {
      save_pt(w.file("d.pt"), entries, tuple);
      write_text(w.file("cfg.json"), replace(kGood, R"("data": {"inputs": "x.npy", "targets": "y.npy"})", R"("data": {"path": "d.pt"})"));
    });
  };
  // A hand-made torch.save archive (tests/pickle_bytes.h) as the data file.
  auto pt_bytes = [on_valid](std::string bytes) {
    return on_valid([bytes](Workspace& w) {
      write_text(w.file("d.pt"), bytes);
      write_text(w.file("cfg.json"), replace(kGood, R"("data": {"inputs": "x.npy", "targets": "y.npy"})", R"("data": {"path": "d.pt"})"));
    });
  };
  // x.npy (8 rows) as the values of a variable-length input, with these offsets.
  auto ragged_offsets = [on_valid](std::vector<int64_t> offsets) {
    return on_valid([offsets](Workspace& w) {
      write_npy(w.file("o.npy"), NpyDtype::Int64, {offsets.size()}, offsets.data());
      write_text(w.file("cfg.json"), replace(kGood, R"("data": {"inputs": "x.npy", "targets": "y.npy"})",
                                             R"("data": {"inputs": {"values": "x.npy", "offsets": "o.npy"}})"));
    });
  };
  std::string nested = kProto;
  for (int i = 0; i < 1000; ++i) nested += "(";
  for (int i = 0; i < 1000; ++i) nested += "l";
  const std::string e = "batchcheck: error: ";
  return {
      {"pt: REDUCE on an empty stack", pt_bytes(archive(kProto + "R.")), 2,
       e + "d.pt: not a usable torch.save file: its pickle is malformed: REDUCE on an empty stack (byte 2 of data.pkl)"},
      {"pt: 1000 nested lists", pt_bytes(archive(nested + ".")), 2,
       e + "d.pt: not a usable torch.save file: its containers nest more than 100 levels deep (a data file holds tensors in a "
           "dict, tuple or list) (byte 1102 of data.pkl)"},
      {"pt: a view past its storage", pt_bytes(archive(kProto + "}(" + str("inputs") + tensor(16, {8, 3}, {3, 1}) + "u.")), 2,
       e + "d.pt: not a usable torch.save file: a tensor's shape reaches element 23 of its storage 0, which holds 16 (the file "
           "is corrupt)"},
      {"pt: storage numel lie", pt_bytes(archive(kProto + "}(" + str("inputs") + tensor(64, {8, 3}, {3, 1}) + "u.", 96)), 2,
       e + "d.pt: not a usable torch.save file: its storage 0 claims 64 elements but holds 96 bytes (the file is truncated or "
           "corrupt)"},
      // --- variable-length .npy fields: values + offsets ---
      {"npy offsets decrease", ragged_offsets({0, 2, 1, 8}), 2, e + "o.npy: [2]: offsets must not decrease: 1 after 2"},
      {"npy offsets start past 0", ragged_offsets({1, 2, 8}), 2, e + "o.npy: [0]: offsets must start at 0, got 1"},
      {"npy offsets end short", ragged_offsets({0, 2, 4, 7}), 2,
       e + "o.npy: [3]: the last offset must be the values' length, 8, got 7"},
      {"npy offsets not int64", on_valid([](Workspace& w) {
         const std::vector<float> f{0, 4, 8};
         write_npy(w.file("o.npy"), NpyDtype::Float32, {3}, f.data());
         write_text(w.file("cfg.json"), replace(kGood, R"("data": {"inputs": "x.npy", "targets": "y.npy"})",
                                                R"("data": {"inputs": {"values": "x.npy", "offsets": "o.npy"}})"));
       }),
       2, e + "o.npy: offsets must be a 1-D int64 array of samples + 1 entries (got float32 [3])"},
      // --- config ---
      {"empty config", cfg(""), 2, e + "cfg.json: 1:1: the file is empty; expected a JSON object"},
      {"not JSON", cfg("model: unet.pt\n"), 2, e + "cfg.json: 1:1: syntax error while parsing value - invalid literal; last read: 'm'"},
      {"trailing comma", cfg("{\n  \"model\": {\"path\": \"m.pt\"},\n}\n"), 2,
       e + "cfg.json: 3:1: syntax error while parsing object key - unexpected '}'; expected string literal"},
      {"config is a directory", [](Workspace& w) { std::filesystem::create_directory(w.file("d.json")); return std::vector<std::string>{w.file("d.json")}; },
       2, e + "d.json: is a directory, expected a JSON file"},
      {"config missing", [](Workspace& w) { return std::vector<std::string>{w.file("none.json")}; }, 2,
       e + "none.json: cannot read: No such file or directory"},
      // Not regular files: refused before any open, so nothing blocks or reads for ever.
      {"config is a FIFO", [](Workspace& w) { ::mkfifo(w.file("f.json").c_str(), 0600); return std::vector<std::string>{w.file("f.json")}; },
       2, e + "f.json: is a FIFO, not a regular file: expected a JSON file"},
      {"config is /dev/zero", [](Workspace&) { return std::vector<std::string>{"/dev/zero"}; }, 2,
       e + "/dev/zero: is a device, not a regular file: expected a JSON file"},
      {"npy is a FIFO", on_valid([](Workspace& w) {
         std::filesystem::remove(w.file("x.npy"));
         ::mkfifo(w.file("x.npy").c_str(), 0600);
       }),
       2, e + "x.npy: is a FIFO, not a regular file: expected a .npy file"},
      {"model is a directory", on_valid([](Workspace& w) {
         std::filesystem::remove(w.file("m.pt"));
         std::filesystem::create_directory(w.file("m.pt"));
       }),
       2, "PREFIX:" + e + "m.pt: is a directory, expected a TorchScript file (torch.jit.save)"},
      {"-o is a FIFO", on_valid([](Workspace& w) { ::mkfifo(w.file("out.json").c_str(), 0600); }, {"-o", "out.json"}), 2,
       e + "out.json: cannot write the report: it is a FIFO; write to a regular file"},
      {"config not a file path", [](Workspace& w) { valid(w); return std::vector<std::string>{w.file("cfg.json") + "/x.json"}; }, 2,
       e + "cfg.json/x.json: cannot read: Not a directory"},
      {"unknown key", cfg(replace(kGood, "\"batch_size\"", "\"batchsize\"")), 2,
       e + "cfg.json: loader.batchsize: unknown key; did you mean \"batch_size\"?"},
      {"string batch size", cfg(replace(kGood, "\"batch_size\": 4", "\"batch_size\": \"4\"")), 2,
       e + "cfg.json: loader.batch_size: expected a positive integer, got \"4\""},
      {"float batch size", cfg(replace(kGood, "\"batch_size\": 4", "\"batch_size\": 4.5")), 2,
       e + "cfg.json: loader.batch_size: expected a positive integer, got 4.5"},
      {"zero batch size", cfg(replace(kGood, "\"batch_size\": 4", "\"batch_size\": 0")), 2,
       e + "cfg.json: loader.batch_size: expected a positive integer, got 0"},
      {"negative world size", cfg(replace(kGood, "\"batch_size\": 4", "\"batch_size\": 4, \"world_size\": -2")), 2,
       e + "cfg.json: loader.world_size: expected a positive integer, got -2"},
      {"output_range lo > hi", cfg(replace(kGood, "\"loss\"", "\"checks\": {\"output_range\": [1, 0]}, \"loss\"")), 2,
       e + "cfg.json: checks.output_range: low bound 1 is greater than high bound 0"},
      {"unknown loss type", cfg(replace(kGood, "\"mse\"", "\"bce_logit\"")), 2,
       e + "cfg.json: loss.type: unknown value \"bce_logit\"; did you mean \"bce_with_logits\"?"},
      {"missing model.path", cfg(replace(kGood, "{\"path\": \"m.pt\"}", "{}")), 2, e + "cfg.json: model.path: missing required key"},
      {"number overflow (found by fuzz_config)", cfg(replace(kGood, "\"batch_size\": 4", "\"batch_size\": 4444422e2222")), 2,
       e + "cfg.json: 1:103: number overflow parsing '4444422e2222'"},
      {"missing loader", cfg(replace(kGood, ", \"loader\": {\"batch_size\": 4}", "")), 2, e + "cfg.json: loader: missing required key"},
      // --- model ---
      {"model missing", on_valid([](Workspace& w) { std::filesystem::remove(w.file("m.pt")); }), 2,
       e + "m.pt: cannot read the model: No such file or directory"},
      {"model empty", on_valid([](Workspace& w) { write_text(w.file("m.pt"), ""); }), 2, e + "m.pt: the model file is empty"},
      {"model truncated", on_valid([](Workspace& w) {
         std::string b = read_bytes(w.file("m.pt"));
         write_text(w.file("m.pt"), b.substr(0, b.size() / 2));
       }),
       2, "PREFIX:" + e + "m.pt: not a loadable TorchScript archive (torch.jit.save of a scripted or traced module): "},
      {"zip that is not TorchScript", on_valid([](Workspace& w) { save_pt(w.file("m.pt"), {{"inputs", {2}}}); }), 2,
       e + "m.pt: not a TorchScript archive: it is a file written by torch.save (data, not a model); export the model "
           "with torch.jit.script(model).save(path) (or torch.jit.trace)"},
      {"text file as model", on_valid([](Workspace& w) { write_text(w.file("m.pt"), "def forward(x): return x\n"); }), 2,
       "PREFIX:" + e + "m.pt: not a loadable TorchScript archive (torch.jit.save of a scripted or traced module): "},
      {"forward needs two inputs", on_valid([](Workspace& w) { w.model("def forward(self, x, y):\n    return x + y\n"); }), 2,
       e + "m.pt: forward: takes 2 required inputs (x, y); batchcheck feeds one input tensor unless model.inputs names the "
           "data fields that feed them, e.g. \"inputs\": [\"x\", \"y\"]"},
      {"output key not returned", on_valid([](Workspace& w) {
         w.model("def forward(self, x):\n    return {'logits': x.sum(1, keepdim=True)}\n");
         write_text(w.file("cfg.json"), replace(kGood, "{\"path\": \"m.pt\"}", "{\"path\": \"m.pt\", \"output\": \"out\"}"));
       }),
       2, e + "cfg.json: model.output: the model's output has no key \"out\" (keys: logits)"},
      {"output index out of range", on_valid([](Workspace& w) {
         w.model("def forward(self, x):\n    return (x.sum(1, keepdim=True), x)\n");
         write_text(w.file("cfg.json"), replace(kGood, "{\"path\": \"m.pt\"}", "{\"path\": \"m.pt\", \"output\": 2}"));
       }),
       2, e + "cfg.json: model.output: index 2 is out of range: the model returns 2 elements"},
      // An aux index past the tuple is out of range, not the prediction by wrap-around (3 % 3 == 0).
      {"aux index out of range", on_valid([](Workspace& w) {
         w.model("def forward(self, x):\n    return (x.sum(1, keepdim=True), x, x)\n");
         write_text(w.file("cfg.json"), replace(replace(kGood, "{\"path\": \"m.pt\"}", "{\"path\": \"m.pt\", \"output\": 0}"),
                                                "{\"type\": \"mse\"}", "{\"type\": \"mse\", \"aux\": {\"3\": 0.5}}"));
       }),
       2, e + "cfg.json: loss.aux.3: index 3 is out of range: the model returns 3 elements"},
      {"aux index far out of range", on_valid([](Workspace& w) {
         w.model("def forward(self, x):\n    return (x.sum(1, keepdim=True), x, x)\n");
         write_text(w.file("cfg.json"), replace(replace(kGood, "{\"path\": \"m.pt\"}", "{\"path\": \"m.pt\", \"output\": 0}"),
                                                "{\"type\": \"mse\"}", "{\"type\": \"mse\", \"aux\": {\"-4\": 0.5}}"));
       }),
       2, e + "cfg.json: loss.aux.-4: index -4 is out of range: the model returns 3 elements"},
      {"aux index the prediction's own", on_valid([](Workspace& w) {
         w.model("def forward(self, x):\n    return (x.sum(1, keepdim=True), x, x)\n");
         write_text(w.file("cfg.json"), replace(replace(kGood, "{\"path\": \"m.pt\"}", "{\"path\": \"m.pt\", \"output\": 0}"),
                                                "{\"type\": \"mse\"}", "{\"type\": \"mse\", \"aux\": {\"-3\": 0.5}}"));
       }),
       2, e + "cfg.json: loss.aux.-3: is the same element of the model's 3 outputs as model.output, the prediction itself; "
              "list only the extra outputs"},
      {"forward returns a tuple", on_valid([](Workspace& w) { w.model("def forward(self, x):\n    return (x, x)\n"); }), 2,
       e + "cfg.json: model.output: the model returns a tuple, not a tensor; set \"output\" to the index or key of the prediction"},
      // --- npy ---
      {"npy bad magic", on_valid([](Workspace& w) { write_text(w.file("x.npy"), "PK\x03\x04 not an npy file at all"); }), 2,
       "batchcheck: error: x.npy: not a .npy file (bad magic bytes)"},
      {"npy truncated header", on_valid([](Workspace& w) { write_text(w.file("x.npy"), std::string("\x93NUMPY\x01\x00\x76\x00{'descr'", 17)); }), 2,
       "batchcheck: error: x.npy: npy header: truncated header"},
      {"npy shape overflows", npy_inputs("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", 0), 2,
       "batchcheck: error: x.npy: npy header: the shape's element count overflows"},
      {"npy data shorter than header", npy_inputs("{'descr': '<f4', 'fortran_order': False, 'shape': (8, 3), }", 40), 2,
       "batchcheck: error: x.npy: the file is shorter than its header promises: 109 bytes, expected 165 for shape (8, 3)"},
      {"npy Fortran order", npy_inputs("{'descr': '<f4', 'fortran_order': True, 'shape': (8, 3), }", 96), 2,
       "batchcheck: error: x.npy: npy header: Fortran-order arrays are not supported; save with np.ascontiguousarray"},
      {"npy object dtype", npy_inputs("{'descr': '|O', 'fortran_order': False, 'shape': (8,), }", 64), 2,
       "batchcheck: error: x.npy: npy header: object arrays (pickled Python objects) are refused; save a numeric array"},
      {"npy big-endian", npy_inputs("{'descr': '>f4', 'fortran_order': False, 'shape': (8, 3), }", 96), 2,
       "batchcheck: error: x.npy: npy header: big-endian data ('>f4') is not supported; save it little-endian"},
      {"npy complex", npy_inputs("{'descr': '<c8', 'fortran_order': False, 'shape': (8, 3), }", 192), 2,
       "batchcheck: error: x.npy: npy header: unsupported dtype '<c8' (supported: float16/32/64, int8/16/32/64, uint8, bool)"},
      {"npy strings", npy_inputs("{'descr': '<U4', 'fortran_order': False, 'shape': (8,), }", 128), 2,
       "batchcheck: error: x.npy: npy header: unsupported dtype '<U4' (supported: float16/32/64, int8/16/32/64, uint8, bool)"},
      {"npy 0-d array", npy_inputs("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4), 2,
       "batchcheck: error: x.npy: npy header: a 0-d array has no sample dimension; expected shape (samples, ...)"},
      {"input/target count mismatch", on_valid([](Workspace& w) { w.float_targets(std::vector<float>(7, 0.0f)); }), 2,
       "batchcheck: error: y.npy: holds 7 samples but x.npy holds 8; inputs and targets must have the same count"},
      {"npy missing", on_valid([](Workspace& w) { std::filesystem::remove(w.file("y.npy")); }), 2,
       "batchcheck: error: y.npy: cannot read: No such file or directory"},
      // --- pt ---
      {"pt not a torch.save file", on_valid([](Workspace& w) {
         write_text(w.file("d.pt"), "just some text");
         write_text(w.file("cfg.json"), replace(kGood, R"("data": {"inputs": "x.npy", "targets": "y.npy"})", R"("data": {"path": "d.pt"})"));
       }),
       2, "PREFIX:batchcheck: error: d.pt: not a file written by torch.save ("},
      {"pt missing key", pt_data({{"images", {8, 3}}, {"targets", {8, 1}}}), 2,
       "batchcheck: error: d.pt: key \"inputs\": missing from the saved dict (keys: images, targets)"},
      {"pt value not a tensor", pt_data({{"inputs", {8, 3}}, {"targets", {}, false}}), 2,
       "batchcheck: error: d.pt: key \"targets\": is not a tensor or a list of per-sample tensors (got an int)"},
      {"pt different lengths", pt_data({{"inputs", {8, 3}}, {"targets", {6, 1}}}), 2,
       "batchcheck: error: d.pt: inputs hold 8 samples but targets hold 6; they must have the same count"},
      {"pt tuple of three", pt_data({{"a", {8, 3}}, {"b", {8, 1}}, {"c", {8}}}, true), 2,
       "batchcheck: error: d.pt: expected a tuple or list of (inputs, targets), or a list of per-sample (input, target) records, got 3 elements"},
      // --- flags ---
      {"unknown --fail-on", on_valid([](Workspace&) {}, {"--fail-on", "warnings"}), 2,
       "batchcheck: error: --fail-on: unknown level \"warnings\"; did you mean \"warning\"? (expected error, warning, info or never)"},
      {"report folder missing", on_valid([](Workspace&) {}, {"-o", "/nonexistent/dir/r.json"}), 2,
       "batchcheck: error: /nonexistent/dir/r.json: cannot write the report: the folder /nonexistent/dir does not exist"},
      {"cuda requested without CUDA", on_valid([](Workspace&) {}, {"--device", "cuda:7"}), 2,
       "PREFIX:batchcheck: error: --device: \"cuda:7\" "},
      {"config's cuda:7 without it", on_valid([](Workspace& w) {
         write_text(w.file("cfg.json"), replace(kGood, "\"loss\"", "\"device\": \"cuda:7\", \"loss\""));
       }),
       2, "PREFIX:" + e + "cfg.json: device: \"cuda:7\" "},
      {"sparse output", on_valid([](Workspace& w) { w.model("def forward(self, x):\n    return x.sum(1, keepdim=True).to_sparse()\n"); }), 2,
       e + "m.pt: output: the model returns a sparse tensor; the losses batchcheck checks need a dense tensor of real numbers: "
           "return out.to_dense()"},
      {"meta output", on_valid([](Workspace& w) { w.model("def forward(self, x):\n    return x.sum(1, keepdim=True).to('meta')\n"); }), 2,
       e + "m.pt: output: the model returns a meta tensor (shape only, no data); the losses batchcheck checks need a dense "
           "tensor of real numbers: compute the prediction on a real device"},
      {"bad --precision", on_valid([](Workspace&) {}, {"--precision", "fp8"}), 2,
       "batchcheck: error: --precision: unknown precision \"fp8\"; did you mean \"fp32\"? (expected fp32, fp16 or bf16)"},
      {"bad --half-headroom", on_valid([](Workspace&) {}, {"--half-headroom", "0"}), 2,
       "batchcheck: error: --half-headroom: \"0\" is not a share of float16's range above 0 and at most 1 (e.g. 0.5)"},
      {"recorded casts the graph lacks", on_valid([](Workspace& w) {
         write_text(w.file("cfg.json"),
                    replace(kGood, "\"loss\"", "\"precision\": {\"dtype\": \"bf16\", \"casts\": \"recorded\"}, \"loss\""));
       }),
       2, e + "cfg.json: precision.casts: \"recorded\", but the model's graph holds no cast to bfloat16: set \"casts\" to "
              "\"autocast\" (the engine enters torch.autocast), or leave precision out"},
      {"empty --precision", on_valid([](Workspace&) {}, {"--precision", ""}), 2,
       "batchcheck: error: --precision: an empty value: give one (see 'batchcheck scan --help')"},
      {"empty --half-headroom", on_valid([](Workspace&) {}, {"--half-headroom", ""}), 2,
       "batchcheck: error: --half-headroom: an empty value: give one (see 'batchcheck scan --help')"},
      {"bad --device", on_valid([](Workspace&) {}, {"--device", "gpu0"}), 2,
       "batchcheck: error: --device: unknown device \"gpu0\" (expected cpu, cuda, cuda:N or auto)"},
      // --- not bad input: a model that raises is a finding ---
      {"model raising is a finding", on_valid([](Workspace& w) { w.model("def forward(self, x):\n    return x.view(5, -1)\n"); }), 1, ""},
  };
}

}  // namespace

TEST(BadInputs, CatalogueHasAtLeastThirtyCases) { EXPECT_GE(catalogue().size(), 30u); }

TEST(BadInputs, EachGetsOneClearLineAndNoReport) {
  for (const auto& c : catalogue()) {
    Workspace w(std::string("bad_") + std::to_string(std::hash<std::string>{}(c.name) % 100000));
    std::vector<std::string> args = {"scan"};
    for (const auto& a : c.prepare(w)) args.push_back(a);
    const std::string report = w.file("report.json");
    bool explicit_output = std::find(args.begin(), args.end(), "-o") != args.end();
    if (!explicit_output) {
      args.push_back("-o");
      args.push_back(report);
    }
    args.push_back("-q");
    std::ostringstream out, err;
    // Relative data paths in messages: run from the workspace folder, as a user would.
    auto cwd = std::filesystem::current_path();
    std::filesystem::current_path(w.file(""));
    for (auto& a : args) {
      if (a.rfind(w.file(""), 0) == 0) a = a.substr(w.file("").size());
    }
    int code = run_cli(args, out, err);
    std::filesystem::current_path(cwd);

    std::string e = err.str();
    std::string expected = c.first_line;
    EXPECT_EQ(code, c.code) << c.name << ": " << e;
    EXPECT_EQ(e.find("terminate called"), std::string::npos) << c.name;
    EXPECT_EQ(e.find("frame #"), std::string::npos) << c.name;
    EXPECT_EQ(out.str(), "") << c.name;
    if (c.code == 2) {
      EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << c.name << ": " << e;
      std::string first = e.substr(0, e.find('\n'));
      if (expected.rfind("PREFIX:", 0) == 0) {
        expected = expected.substr(7);
        EXPECT_EQ(first.substr(0, expected.size()), expected) << c.name;
      } else {
        EXPECT_EQ(first, expected) << c.name;
      }
      EXPECT_FALSE(std::filesystem::exists(report)) << c.name << ": no report for unusable input";
    } else {
      EXPECT_TRUE(std::filesystem::exists(report)) << c.name;
    }
  }
}
