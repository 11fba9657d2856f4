#include "core/parse/file_kind.h"

#include <cstdint>

namespace batchcheck {

namespace {

bool has(std::string_view s, std::string_view needle) { return s.find(needle) != std::string_view::npos; }

uint16_t le16(std::string_view s, std::size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(s[at]) | (static_cast<unsigned char>(s[at + 1]) << 8));
}

// The bytes of the zip member whose name ends in "data.pkl" (stored uncompressed by torch.save).
std::string_view data_pkl(std::string_view zip) {
  std::size_t p = 0;
  while ((p = zip.find("PK\x03\x04", p)) != std::string_view::npos && p + 30 <= zip.size()) {
    const std::size_t name_len = le16(zip, p + 26), extra_len = le16(zip, p + 28);
    const std::size_t data = p + 30 + name_len + extra_len;
    if (data > zip.size()) break;
    std::string_view name = zip.substr(p + 30, name_len);
    if (name.size() >= 8 && name.substr(name.size() - 8) == "data.pkl") return zip.substr(data);
    p += 4;
  }
  return {};
}

TorchFileKind classify_pickle(std::string_view pkl) {
  if (has(pkl, "TensorDataset")) return TorchFileKind::TensorDataset;
  if (has(pkl, "numpy.core.multiarray") || has(pkl, "numpy\n_reconstruct") || has(pkl, "numpy._core")) {
    return TorchFileKind::NumpyArrays;
  }
  // Protocol 2: PROTO 2, then the top object's first opcode.
  const char top = pkl.size() > 2 && static_cast<unsigned char>(pkl[0]) == 0x80 ? pkl[2] : '\0';
  const bool dict = top == '}';
  if (dict && (has(pkl, "state_dict") || has(pkl, "optimizer"))) return TorchFileKind::Checkpoint;
  if (top == 'c' && pkl.substr(3).rfind("collections\nOrderedDict\n", 0) == 0) return TorchFileKind::StateDict;
  if (has(pkl, "torch.nn.modules") || has(pkl, "_modules")) return TorchFileKind::PickledModule;
  return TorchFileKind::OtherPickle;
}

}  // namespace

FileKind classify_torch_file(std::string_view bytes) {
  FileKind k;
  if (bytes.rfind("PK\x03\x04", 0) == 0) {
    if (has(bytes, "constants.pkl") || has(bytes, "/code/")) {
      k.kind = TorchFileKind::TorchScript;
      return k;
    }
    std::string_view pkl = data_pkl(bytes);
    if (!pkl.empty()) k.kind = classify_pickle(pkl);
    return k;
  }
  if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80) {
    // The legacy format starts with a pickled magic number, then the object's pickle.
    k.legacy = true;
    k.kind = classify_pickle(bytes.substr(bytes.find('\x80', 1) == std::string_view::npos ? 0 : bytes.find('\x80', 1)));
  }
  return k;
}

std::string model_file_hint(const FileKind& k) {
  const std::string fix = "; export the model with torch.jit.script(model).save(path) (or torch.jit.trace)";
  switch (k.kind) {
    case TorchFileKind::StateDict:
      return "not a TorchScript archive: it is a state_dict (parameter tensors without the model's code): load it into "
             "the model (model.load_state_dict(...))" + fix;
    case TorchFileKind::PickledModule:
      return "not a TorchScript archive: it is a pickled nn.Module (torch.save(model)), which needs your Python code to load" + fix;
    case TorchFileKind::Checkpoint:
      return "not a TorchScript archive: it is a training checkpoint (a dict with state_dict/optimizer entries): load its "
             "state_dict into the model" + fix;
    case TorchFileKind::NumpyArrays:
    case TorchFileKind::TensorDataset:
    case TorchFileKind::OtherPickle:
      return "not a TorchScript archive: it is a file written by torch.save (data, not a model)" + fix;
    case TorchFileKind::TorchScript:
    case TorchFileKind::Unknown: break;
  }
  return "";
}

std::string data_file_hint(const FileKind& k) {
  const std::string fix = "; save tensors instead: torch.save({\"inputs\": x, \"targets\": y}, path)";
  switch (k.kind) {
    case TorchFileKind::NumpyArrays:
      return "it holds numpy arrays, which batchcheck does not unpickle" + fix + " with torch.from_numpy(...), or write .npy files";
    case TorchFileKind::TensorDataset:
      return "it holds a pickled TensorDataset" + std::string("; save its tensors instead: torch.save({\"inputs\": ds.tensors[0], "
                                                              "\"targets\": ds.tensors[1]}, path)");
    case TorchFileKind::StateDict:
    case TorchFileKind::PickledModule:
    case TorchFileKind::Checkpoint: return "it holds a model or checkpoint, not a dataset" + fix;
    case TorchFileKind::TorchScript: return "it is a TorchScript archive (a model), not a dataset" + fix;
    case TorchFileKind::OtherPickle:
    case TorchFileKind::Unknown: break;
  }
  return "";
}

}  // namespace batchcheck
