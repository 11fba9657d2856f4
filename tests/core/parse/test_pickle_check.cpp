// The bounded pickle check: what torch.save writes (1.13 and 2.15) passes; the files that crash
// LibTorch's unpickler or make it read past a storage are refused with a line saying why.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/parse/pickle_check.h"
#include "support/pickle_bytes.h"

using namespace batchcheck;
using namespace batchcheck::test_util;

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(PickleCheck, AcceptsWhatTorchSaveWrites) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(BATCHCHECK_SOURCE_DIR "/tests/fuzz/corpus/pickle_check")) {
    if (e.path().extension() != ".pt") continue;
    EXPECT_EQ(check_torch_save(read_file(e.path())), "") << e.path();
    ++files;
  }
  EXPECT_GE(files, 10) << "torch.save outputs of torch 1.13 and 2.15 (tests/fuzz/corpus/pickle_check)";
  // The hand-made archive the cases below break, intact: a {"inputs": tensor} dict.
  EXPECT_EQ(check_torch_save(archive(kProto + "}(" + str("inputs") + tensor(16, {4, 4}, {4, 1}) + "u.")), "");
}

TEST(PickleCheck, RefusesWhatCrashesLibTorch) {
  struct Case {
    const char* name;
    std::string file;
    std::string problem;
  };
  std::string deep = kProto;
  for (int i = 0; i < 200; ++i) deep += "(";
  for (int i = 0; i < 200; ++i) deep += "l";
  deep += ".";
  const Case cases[] = {
      {"REDUCE on an empty stack", archive(kProto + "R."), "its pickle is malformed: REDUCE on an empty stack (byte 2 of data.pkl)"},
      {"BUILD on an empty stack", archive(kProto + "b."), "its pickle is malformed: BUILD on a stack of fewer than two values (byte 2 of data.pkl)"},
      {"TUPLE2 on one value", archive(kProto + "N\x86."), "its pickle is malformed: TUPLE2 on a stack of fewer values (byte 3 of data.pkl)"},
      {"persistent id on an empty stack", archive(kProto + "Q."),
       "its pickle is malformed: a storage reference that is not a 5-tuple (byte 2 of data.pkl)"},
      {"200 nested lists", archive(deep),
       "its containers nest more than 100 levels deep (a data file holds tensors in a dict, tuple or list) (byte 302 of data.pkl)"},
      {"view past its storage", archive(kProto + tensor(16, {4, 5}, {5, 1}) + "."),
       "a tensor's shape reaches element 19 of its storage 0, which holds 16 (the file is corrupt)"},
      {"numel lie", archive(kProto + tensor(100, {10}, {1}) + ".", 64),
       "its storage 0 claims 100 elements but holds 64 bytes (the file is truncated or corrupt)"},
      {"offset past the end", archive(kProto + tensor(16, {2}, {1}, 15) + "."),
       "a tensor's shape reaches element 16 of its storage 0, which holds 16 (the file is corrupt)"},
      {"missing storage", zip({{"archive/data.pkl", kProto + tensor(16, {16}, {1}) + "."}}),
       "its storage 0 is missing from the archive (the file is truncated or corrupt)"},
      {"unknown opcode", archive(kProto + "\xff."), "its pickle is malformed: opcode 0xff, which tensor files do not use (byte 2 of data.pkl)"},
      {"no STOP", archive(kProto + "N"), "its pickle is malformed: no STOP opcode: the pickle is truncated"},
      {"a class that is not a tensor", archive(kProto + "cos\nsystem\n."),
       "it holds a Python object of class os.system, not tensors (a .pt data file holds tensors in a dict, tuple or list)"},
      {"BINGET of nothing", archive(kProto + "h\x05."), "its pickle is malformed: BINGET of a memo entry that was never stored (byte 2 of data.pkl)"},
  };
  for (const Case& c : cases) EXPECT_EQ(check_torch_save(c.file), c.problem) << c.name;
  // A damaged zip directory, and a zip cut short.
  std::string cut = archive(kProto + "N.");
  EXPECT_EQ(check_torch_save(cut.substr(0, cut.size() - 30)), "its zip directory is damaged (the file is truncated or corrupt)");
  // An expanded view (stride 0) that the scan would materialize: 2^31 floats from one stored float.
  std::string huge = kProto + "ctorch._utils\n_rebuild_tensor_v2\n((" + str("storage") + "ctorch\nFloatStorage\n" + str("0") +
                     str("cpu") + i1(1) + "tQ" + i1(0) + "(\x8a\x05" + std::string("\x00\x00\x00\x80\x00", 5) + "t(" + i1(0) +
                     "t\x89" + "ccollections\nOrderedDict\n)RtR.";
  EXPECT_EQ(check_torch_save(archive(huge, 4)),
            "a tensor is a view of 4 stored bytes that would take 8589934592 bytes in memory (an expand): save it with "
            ".contiguous() or .clone()");
}

TEST(PickleCheck, LeavesOtherFilesToTheirOwnMessages) {
  EXPECT_EQ(check_torch_save("not a zip"), "");
  EXPECT_EQ(check_torch_save(""), "");
  // A TorchScript archive (code/ and constants.pkl) is classified by file_kind, not refused here.
  EXPECT_EQ(check_torch_save(zip({{"m/data.pkl", kProto + "cos\nsystem\n."}, {"m/constants.pkl", kProto + ")."}})), "");
}
