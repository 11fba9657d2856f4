#pragma once
// What a file that is not what batchcheck expected actually is: a state_dict, a pickled
// nn.Module, a checkpoint, numpy arrays... From its bytes alone (torch.save writes an
// uncompressed zip whose data.pkl names the Python classes it holds), so the error can
// say what to do instead. Used only on the error path.
#include <string>
#include <string_view>

namespace batchcheck {

enum class TorchFileKind {
  Unknown,        // not a zip archive nor a pickle
  TorchScript,    // code/ and constants.pkl: a TorchScript archive
  StateDict,      // an OrderedDict of tensors
  PickledModule,  // torch.save(model)
  Checkpoint,     // a dict with state_dict / optimizer entries
  NumpyArrays,    // numpy arrays pickled inside
  TensorDataset,  // a pickled torch.utils.data.TensorDataset
  OtherPickle,    // some other torch.save output
};

struct FileKind {
  TorchFileKind kind = TorchFileKind::Unknown;
  bool legacy = false;  // the pre-1.6 torch.save format (a bare pickle, not a zip)
};

FileKind classify_torch_file(std::string_view bytes);

// For a model path: "not a TorchScript archive: it is a state_dict ...; export with ...".
// Empty for TorchScript and Unknown (the loader's own message is better there).
std::string model_file_hint(const FileKind& k);
// For a data .pt that torch::pickle_load refused: what it holds and how to save tensors.
std::string data_file_hint(const FileKind& k);

}  // namespace batchcheck
