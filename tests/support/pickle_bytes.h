#pragma once
// Hand-made torch.save archives for the tests: a stored zip of members, protocol-2 pickle
// pieces and a _rebuild_tensor_v2 call, to break one property at a time.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace batchcheck::test_util {

inline void put(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

// A stored (uncompressed) zip of these members, as torch.save lays it out (CRCs left 0: unchecked).
inline std::string zip(const std::vector<std::pair<std::string, std::string>>& members) {
  std::string out, dir;
  for (const auto& [name, data] : members) {
    const uint64_t local = out.size();
    out += "PK\x03\x04";
    put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 4), put(out, 0, 4);
    put(out, data.size(), 4), put(out, data.size(), 4), put(out, name.size(), 2), put(out, 0, 2);
    out += name + data;
    dir += "PK\x01\x02";
    put(dir, 20, 2), put(dir, 20, 2), put(dir, 0, 2), put(dir, 0, 2), put(dir, 0, 4), put(dir, 0, 4);
    put(dir, data.size(), 4), put(dir, data.size(), 4), put(dir, name.size(), 2), put(dir, 0, 2), put(dir, 0, 2);
    put(dir, 0, 2), put(dir, 0, 2), put(dir, 0, 4), put(dir, local, 4);
    dir += name;
  }
  const uint64_t at = out.size();
  out += dir + "PK\x05\x06";
  put(out, 0, 2), put(out, 0, 2), put(out, members.size(), 2), put(out, members.size(), 2);
  put(out, dir.size(), 4), put(out, at, 4), put(out, 0, 2);
  return out;
}

// Pickle text pieces (protocol 2).
inline std::string str(const std::string& s) {
  std::string o = "X";
  put(o, s.size(), 4);
  return o + s;
}
inline std::string i1(int v) { return std::string("K") + static_cast<char>(v); }
inline const std::string kProto = "\x80\x02";

// torch._utils._rebuild_tensor_v2 of storage "0" (float32, `numel` elements) with this size/stride/offset.
inline std::string tensor(int numel, std::vector<int> size, std::vector<int> stride, int offset = 0) {
  std::string p = "ctorch._utils\n_rebuild_tensor_v2\n(";
  p += "(" + str("storage") + "ctorch\nFloatStorage\n" + str("0") + str("cpu") + i1(numel) + "tQ";
  p += i1(offset) + "(";
  for (int v : size) p += i1(v);
  p += "t(";
  for (int v : stride) p += i1(v);
  p += "t\x89";
  p += "ccollections\nOrderedDict\n)Rt";
  p += "R";
  return p;
}

inline std::string archive(const std::string& pkl, std::size_t storage_bytes = 64) {
  return zip({{"archive/data.pkl", pkl}, {"archive/data/0", std::string(storage_bytes, '\0')}, {"archive/version", "3\n"}});
}

}  // namespace batchcheck::test_util
