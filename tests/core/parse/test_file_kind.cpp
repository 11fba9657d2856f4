// What a wrong file is, from its bytes: the zip layout torch.save and torch.jit.save write.
#include <gtest/gtest.h>

#include "core/parse/file_kind.h"

using namespace batchcheck;
using namespace std::string_literals;

namespace {

// One stored zip member, as torch.save writes them (no compression, no extra field).
std::string member(const std::string& name, const std::string& data) {
  std::string h = "PK\x03\x04";
  h += std::string(22, '\0');
  h += static_cast<char>(name.size() & 0xff);
  h += static_cast<char>(name.size() >> 8);
  h += std::string(2, '\0');
  return h + name + data;
}

std::string saved(const std::string& pickle) { return member("archive/data.pkl", pickle) + member("archive/version", "3\n"); }

const std::string kProto = "\x80\x02"s;

}  // namespace

TEST(FileKind, TellsWhatATorchSaveFileHolds) {
  EXPECT_EQ(classify_torch_file(saved(kProto + "ccollections\nOrderedDict\nq\x00)Rq\x01"s)).kind, TorchFileKind::StateDict);
  EXPECT_EQ(classify_torch_file(saved(kProto + "}q\x00(X\x10\x00\x00\x00model_state_dictq\x01"s)).kind, TorchFileKind::Checkpoint);
  EXPECT_EQ(classify_torch_file(saved(kProto + "c__main__\nNet\nq\x00)\x81}(X\x08\x00\x00\x00_modulesctorch.nn.modules.conv\n"s)).kind,
            TorchFileKind::PickledModule);
  EXPECT_EQ(classify_torch_file(saved(kProto + "}q\x00X\x06\x00\x00\x00inputscnumpy.core.multiarray\n_reconstruct\n"s)).kind,
            TorchFileKind::NumpyArrays);
  EXPECT_EQ(classify_torch_file(saved(kProto + "ctorch.utils.data.dataset\nTensorDataset\n")).kind, TorchFileKind::TensorDataset);
  EXPECT_EQ(classify_torch_file(saved(kProto + "}q\x00X\x06\x00\x00\x00inputs"s)).kind, TorchFileKind::OtherPickle);
  EXPECT_EQ(classify_torch_file(member("m/data.pkl", kProto + "}") + member("m/constants.pkl", kProto + ")")).kind,
            TorchFileKind::TorchScript);
  EXPECT_EQ(classify_torch_file("not a model").kind, TorchFileKind::Unknown);
  EXPECT_EQ(classify_torch_file("").kind, TorchFileKind::Unknown);
  EXPECT_EQ(classify_torch_file("PK\x03\x04").kind, TorchFileKind::Unknown);  // truncated
}

TEST(FileKind, HintsSayWhatToDo) {
  EXPECT_EQ(model_file_hint({TorchFileKind::StateDict, false}),
            "not a TorchScript archive: it is a state_dict (parameter tensors without the model's code): load it into the "
            "model (model.load_state_dict(...)); export the model with torch.jit.script(model).save(path) (or torch.jit.trace)");
  EXPECT_EQ(model_file_hint({TorchFileKind::PickledModule, false}),
            "not a TorchScript archive: it is a pickled nn.Module (torch.save(model)), which needs your Python code to load; "
            "export the model with torch.jit.script(model).save(path) (or torch.jit.trace)");
  EXPECT_EQ(model_file_hint({TorchFileKind::TorchScript, false}), "");
  EXPECT_EQ(data_file_hint({TorchFileKind::TensorDataset, false}),
            "it holds a pickled TensorDataset; save its tensors instead: torch.save({\"inputs\": ds.tensors[0], "
            "\"targets\": ds.tensors[1]}, path)");
  for (auto k : {TorchFileKind::StateDict, TorchFileKind::PickledModule, TorchFileKind::Checkpoint, TorchFileKind::NumpyArrays,
                 TorchFileKind::TensorDataset, TorchFileKind::OtherPickle}) {
    const std::string hint = model_file_hint({k, false});
    EXPECT_EQ(hint.find("Generic"), std::string::npos);
    EXPECT_NE(hint.find("torch.jit.script(model).save(path)"), std::string::npos) << hint;
  }
}
