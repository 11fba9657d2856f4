#include "core/parse/pickle_check.h"

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "core/base/int128.h"
#include "core/parse/zip.h"

namespace batchcheck {

namespace {

using Member = ZipMember;

uint64_t storage_element_size(const std::string& type) {
  static const std::map<std::string, uint64_t> sizes = {
      {"torch.FloatStorage", 4},   {"torch.DoubleStorage", 8},     {"torch.HalfStorage", 2},
      {"torch.BFloat16Storage", 2}, {"torch.LongStorage", 8},      {"torch.IntStorage", 4},
      {"torch.ShortStorage", 2},   {"torch.CharStorage", 1},       {"torch.ByteStorage", 1},
      {"torch.BoolStorage", 1},    {"torch.ComplexFloatStorage", 8}, {"torch.ComplexDoubleStorage", 16},
      {"torch.UntypedStorage", 1}, {"torch.QInt8Storage", 1},      {"torch.QUInt8Storage", 1},
      {"torch.QInt32Storage", 4}};
  auto it = sizes.find(type);
  return it == sizes.end() ? 0 : it->second;
}

struct Val {
  enum Kind { Mark, None, Bool, Int, Float, Str, Tuple, List, Dict, Global, Storage, Tensor, Object };
  Kind kind = None;
  int depth = 0;
  int64_t i = 0;
  std::string s;           // Str, Global: the text; Storage: the member's key
  std::vector<Val> items;  // Tuple: its elements, when they are few and small (tensor arguments)
  uint64_t weight = 1;     // values kept in `items`, recursively: bounds what a memo copy costs
  uint64_t numel = 0, element = 0;  // Storage
};

// Tuples keep their elements only while small: a tensor's arguments weigh ~140 at 64 dims.
constexpr uint64_t kKeptWeight = 300;

Val of(Val::Kind k) {
  Val v;
  v.kind = k;
  return v;
}
// Strings are kept only as long as names and keys are.
constexpr std::size_t kKeptString = 256;

class Machine {
 public:
  Machine(std::string_view pkl, std::string prefix, const std::map<std::string, Member>& members)
      : p_(pkl), prefix_(std::move(prefix)), members_(members) {}

  std::string run() {
    while (at_ < p_.size()) {
      const std::size_t op_at = at_;
      const unsigned char op = static_cast<unsigned char>(p_[at_++]);
      std::string err = step(op);
      if (err == "stop") return stack_.size() == 1 && stack_[0].kind != Val::Mark ? "" : bad("STOP with a malformed stack");
      if (err.empty()) continue;
      // Where in the pickle, for a malformed one: a tensor's or class's problem names itself.
      const bool structural = err.rfind("its pickle", 0) == 0 || err.rfind("its containers", 0) == 0;
      return structural ? err + " (byte " + std::to_string(op_at) + " of data.pkl)" : err;
    }
    return bad("no STOP opcode: the pickle is truncated");
  }

 private:
  static std::string bad(const std::string& what) { return "its pickle is malformed: " + what; }

  bool need(std::size_t n) const { return p_.size() - at_ >= n; }
  uint64_t take(int bytes) {
    uint64_t v = read_le(p_, at_, bytes);
    at_ += static_cast<std::size_t>(bytes);
    return v;
  }

  static std::string too_deep() {
    return "its containers nest more than " + std::to_string(kMaxPickleDepth) +
           " levels deep (a data file holds tensors in a dict, tuple or list)";
  }
  std::string push(Val v) {
    if (v.depth > kMaxPickleDepth) return too_deep();
    stack_.push_back(std::move(v));
    return "";
  }
  // The value on top, which must not be a mark.
  bool pop(Val& v) {
    if (stack_.empty() || stack_.back().kind == Val::Mark) return false;
    v = std::move(stack_.back());
    stack_.pop_back();
    return true;
  }
  // The values above the topmost mark, which is removed.
  bool pop_to_mark(std::vector<Val>& out) {
    std::size_t m = stack_.size();
    while (m > 0 && stack_[m - 1].kind != Val::Mark) --m;
    if (m == 0) return false;
    out.assign(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)), std::make_move_iterator(stack_.end()));
    stack_.resize(m - 1);
    return true;
  }
  static Val container(Val::Kind k, std::vector<Val> items) {
    Val v;
    v.kind = k;
    v.depth = 1;
    uint64_t weight = 1;
    for (const Val& e : items) {
      v.depth = std::max(v.depth, e.depth + 1);
      weight += e.weight;
    }
    if (k == Val::Tuple && weight <= kKeptWeight) {
      v.items = std::move(items);
      v.weight = weight;
    }
    return v;
  }
  // Adds children to the container on top of the stack.
  std::string extend(Val::Kind want, const std::vector<Val>& children, const char* opname) {
    if (stack_.empty() || stack_.back().kind != want) return bad(std::string(opname) + " on something that is not a " + (want == Val::List ? "list" : "dict"));
    Val& c = stack_.back();
    for (const Val& e : children) c.depth = std::max(c.depth, e.depth + 1);
    return c.depth > kMaxPickleDepth ? too_deep() : "";
  }

  std::string text(std::size_t n, Val::Kind kind) {
    if (!need(n)) return bad("a string runs past the end");
    Val v;
    v.kind = kind;
    if (n <= kKeptString) v.s = std::string(p_.substr(at_, n));
    at_ += n;
    return push(std::move(v));
  }
  std::string integer(int64_t x) {
    Val v;
    v.kind = Val::Int;
    v.i = x;
    return push(v);
  }

  std::string global(const std::string& name) {
    Val v;
    v.kind = Val::Global;
    v.s = name;
    // What Python's torch.save writes, and what LibTorch's torch::pickle_save adds (type tags
    // of typed dicts and lists, specialized lists).
    static const char* allowed[] = {"torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
                                    "collections.OrderedDict",           "torch.jit._pickle.restore_type_tag",
                                    "torch.jit._pickle.build_intlist",   "torch.jit._pickle.build_tensorlist",
                                    "torch.jit._pickle.build_doublelist", "torch.jit._pickle.build_boollist"};
    for (const char* a : allowed) {
      if (name == a) return push(std::move(v));
    }
    if (storage_element_size(name)) return push(std::move(v));
    return "it holds a Python object of class " + name + ", not tensors (a .pt data file holds tensors in a dict, tuple or list)";
  }

  std::string persistent_id() {
    Val pid;
    if (!pop(pid) || pid.kind != Val::Tuple || pid.items.size() < 5) return bad("a storage reference that is not a 5-tuple");
    const auto& it = pid.items;
    if (it[0].kind != Val::Str || it[0].s != "storage" || it[1].kind != Val::Global || it[2].kind != Val::Str || it[4].kind != Val::Int || it[4].i < 0) {
      return bad("a storage reference without (\"storage\", type, key, location, numel)");
    }
    Val st;
    st.kind = Val::Storage;
    st.s = it[2].s;
    st.element = storage_element_size(it[1].s);
    st.numel = static_cast<uint64_t>(it[4].i);
    auto m = members_.find(prefix_ + "data/" + st.s);
    if (m == members_.end()) return "its storage " + st.s + " is missing from the archive (the file is truncated or corrupt)";
    if (!m->second.stored) return "its storage " + st.s + " is compressed (torch.save stores members uncompressed)";
    if (st.element == 0 || st.numel > m->second.size / st.element) {
      return "its storage " + st.s + " claims " + std::to_string(st.numel) + " elements but holds " + std::to_string(m->second.size) +
             " bytes (the file is truncated or corrupt)";
    }
    return push(std::move(st));
  }

  // torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]).
  std::string tensor(const Val& args) {
    const auto& a = args.items;
    if (a.size() < 4 || a[0].kind != Val::Storage || a[1].kind != Val::Int || a[2].kind != Val::Tuple || a[3].kind != Val::Tuple) {
      return bad("a tensor without (storage, offset, size, stride)");
    }
    const Val& st = a[0];
    const auto& size = a[2].items;
    const auto& stride = a[3].items;
    if (size.size() != stride.size() || size.size() > 64) return bad("a tensor whose size and stride disagree");
    if (a[1].i < 0) return bad("a tensor with a negative storage offset");
    uint128 numel = 1, last = static_cast<uint64_t>(a[1].i);
    for (std::size_t d = 0; d < size.size(); ++d) {
      if (size[d].kind != Val::Int || stride[d].kind != Val::Int || size[d].i < 0 || stride[d].i < 0) {
        return bad("a tensor with a negative or non-integer size or stride");
      }
      numel *= static_cast<uint64_t>(size[d].i);
      if (numel > (static_cast<uint128>(1) << 62)) return "a tensor claims more than 2^62 elements";
      if (size[d].i > 0) last += static_cast<uint128>(static_cast<uint64_t>(size[d].i) - 1) * static_cast<uint64_t>(stride[d].i);
    }
    if (numel > 0 && last >= st.numel) {
      return "a tensor's shape reaches element " + std::to_string(static_cast<uint64_t>(last)) + " of its storage " + st.s +
             ", which holds " + std::to_string(st.numel) + " (the file is corrupt)";
    }
    // A view that repeats its storage (expand) would be materialized by the scan.
    const uint128 bytes = numel * st.element;
    if (bytes > (static_cast<uint128>(1) << 30) && bytes > 2 * static_cast<uint128>(st.numel) * st.element) {
      return "a tensor is a view of " + std::to_string(st.numel * st.element) + " stored bytes that would take " +
             std::to_string(static_cast<uint64_t>(bytes)) + " bytes in memory (an expand): save it with .contiguous() or .clone()";
    }
    Val t;
    t.kind = Val::Tensor;
    return push(std::move(t));
  }

  std::string reduce() {
    Val args, fn;
    if (!pop(args) || !pop(fn)) return bad("REDUCE on an empty stack");
    if (fn.kind != Val::Global || args.kind != Val::Tuple) return bad("REDUCE of something that is not a known function");
    if (fn.s == "torch._utils._rebuild_tensor_v2") return tensor(args);
    if (fn.s == "torch._utils._rebuild_parameter") {
      if (args.items.empty() || args.items[0].kind != Val::Tensor) return bad("a parameter without its tensor");
      return push(args.items[0]);
    }
    if (fn.s == "collections.OrderedDict") return push(container(Val::Dict, {}));
    if (fn.s == "torch.jit._pickle.restore_type_tag") {  // (value, "Dict[str, Tensor]"): the value
      if (!args.items.empty()) return push(args.items[0]);
      Val v = of(Val::Object);
      v.depth = args.depth - 1;
      return push(std::move(v));
    }
    if (fn.s.rfind("torch.jit._pickle.build_", 0) == 0) {  // (list,): the list
      Val v = of(Val::List);
      v.depth = args.depth - 1;
      return push(std::move(v));
    }
    return bad("REDUCE of " + fn.s);
  }

  std::string step(unsigned char op) {
    Val a, b;
    std::vector<Val> items;
    switch (op) {
      case 0x80: return need(1) ? (take(1), "") : bad("PROTO without its version");
      case 0x95: return need(8) ? (take(8), "") : bad("FRAME without its length");
      case '.': return "stop";
      case '(': stack_.push_back(of(Val::Mark)); return "";
      case '}': return push(container(Val::Dict, {}));
      case ']': return push(container(Val::List, {}));
      case ')': return push(container(Val::Tuple, {}));
      case 'N': return push(of(Val::None));
      case 0x88: case 0x89: return push(of(Val::Bool));
      case 'J': return need(4) ? integer(static_cast<int32_t>(take(4))) : bad("BININT runs past the end");
      case 'K': return need(1) ? integer(static_cast<int64_t>(take(1))) : bad("BININT1 runs past the end");
      case 'M': return need(2) ? integer(static_cast<int64_t>(take(2))) : bad("BININT2 runs past the end");
      case 0x8a: {  // LONG1: n little-endian two's-complement bytes
        if (!need(1)) return bad("LONG1 runs past the end");
        const std::size_t n = take(1);
        if (!need(n)) return bad("LONG1 runs past the end");
        if (n > 8) {
          at_ += n;
          return integer(INT64_MAX);  // beyond int64: no tensor size or offset can be it
        }
        uint64_t v = n ? read_le(p_, at_, static_cast<int>(n)) : 0;
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
        at_ += n;
        return integer(static_cast<int64_t>(v));
      }
      case 'G': return need(8) ? (take(8), push(of(Val::Float))) : bad("BINFLOAT runs past the end");
      case 'X': case 'B': case 'T': return need(4) ? text(take(4), op == 'X' ? Val::Str : Val::Object) : bad("a string length runs past the end");
      case 0x8c: case 'C': case 'U': return need(1) ? text(take(1), op == 0x8c ? Val::Str : Val::Object) : bad("a string length runs past the end");
      case 0x8d: case 0x8e: {
        if (!need(8)) return bad("a string length runs past the end");
        const uint64_t n = take(8);
        return n > p_.size() ? bad("a string runs past the end") : text(static_cast<std::size_t>(n), op == 0x8d ? Val::Str : Val::Object);
      }
      case 'q': case 'r': case 0x94: {
        uint64_t idx = memo_.size();
        if (op != 0x94) {
          if (!need(op == 'q' ? 1 : 4)) return bad("BINPUT runs past the end");
          idx = take(op == 'q' ? 1 : 4);
        }
        if (stack_.empty() || stack_.back().kind == Val::Mark) return bad("memoizing an empty stack");
        if (idx > p_.size()) return bad("a memo index beyond the pickle's size");
        memo_[idx] = stack_.back();
        return "";
      }
      case 'h': case 'j': {
        if (!need(op == 'h' ? 1 : 4)) return bad("BINGET runs past the end");
        auto it = memo_.find(take(op == 'h' ? 1 : 4));
        if (it == memo_.end()) return bad("BINGET of a memo entry that was never stored");
        return push(it->second);
      }
      case 'c': {
        const std::size_t nl1 = p_.find('\n', at_);
        const std::size_t nl2 = nl1 == std::string_view::npos ? nl1 : p_.find('\n', nl1 + 1);
        if (nl2 == std::string_view::npos) return bad("GLOBAL runs past the end");
        std::string name = std::string(p_.substr(at_, nl1 - at_)) + "." + std::string(p_.substr(nl1 + 1, nl2 - nl1 - 1));
        at_ = nl2 + 1;
        return global(name);
      }
      case 0x93: {
        if (!pop(b) || !pop(a) || a.kind != Val::Str || b.kind != Val::Str) return bad("STACK_GLOBAL without module and name");
        return global(a.s + "." + b.s);
      }
      case 't': case 'l': case 'd': {
        if (!pop_to_mark(items)) return bad("a container opcode without its MARK");
        if (op == 'd' && items.size() % 2) return bad("DICT with an odd number of items");
        return push(container(op == 't' ? Val::Tuple : op == 'l' ? Val::List : Val::Dict, std::move(items)));
      }
      case 0x85: case 0x86: case 0x87: {
        const std::size_t n = op - 0x84u;
        items.resize(n);
        for (std::size_t k = n; k-- > 0;) {
          if (!pop(items[k])) return bad("TUPLE" + std::to_string(n) + " on a stack of fewer values");
        }
        return push(container(Val::Tuple, std::move(items)));
      }
      case 'a':
        if (!pop(a)) return bad("APPEND on an empty stack");
        return extend(Val::List, {a}, "APPEND");
      case 'e':
        if (!pop_to_mark(items)) return bad("APPENDS without its MARK");
        return extend(Val::List, items, "APPENDS");
      case 's':
        if (!pop(b) || !pop(a)) return bad("SETITEM on a stack of fewer than three values");
        return extend(Val::Dict, {a, b}, "SETITEM");
      case 'u':
        if (!pop_to_mark(items) || items.size() % 2) return bad("SETITEMS without its MARK or with an odd number of items");
        return extend(Val::Dict, items, "SETITEMS");
      case 'Q': return persistent_id();
      case 'R': return reduce();
      case 'b':  // BUILD: the state of the object below it (a tensor's or a dict's)
        if (!pop(a) || stack_.empty() || stack_.back().kind == Val::Mark) return bad("BUILD on a stack of fewer than two values");
        if (stack_.back().kind != Val::Tensor && stack_.back().kind != Val::Dict) return bad("BUILD of something that is not a tensor");
        return "";
      case '0': return pop(a) ? "" : bad("POP on an empty stack");
      case '1': return pop_to_mark(items) ? "" : bad("POP_MARK without a MARK");
      case '2':
        if (stack_.empty() || stack_.back().kind == Val::Mark) return bad("DUP on an empty stack");
        return push(stack_.back());
      default: {
        static const char* hex = "0123456789abcdef";
        return bad(std::string("opcode 0x") + hex[op >> 4] + hex[op & 15] + ", which tensor files do not use");
      }
    }
  }

  std::string_view p_;
  std::size_t at_ = 0;
  std::string prefix_;
  const std::map<std::string, Member>& members_;
  std::vector<Val> stack_;
  std::map<uint64_t, Val> memo_;
};

}  // namespace

std::string check_torch_save(std::string_view bytes) {
  if (bytes.rfind("PK\x03\x04", 0) != 0) return "";  // not a zip: LibTorch refuses it with its own message
  std::string problem;
  auto members = zip_members(bytes, problem);
  if (!members) return problem;
  const std::string root = archive_root(*members);
  // Not a torch.save archive (a TorchScript archive has code/ and constants.pkl): classified elsewhere.
  if (root.empty() || members->count(root + "constants.pkl")) return "";
  const Member& pm = members->at(root + "data.pkl");
  if (!pm.stored) return "its data.pkl is compressed (torch.save stores members uncompressed)";
  // zip_members checked that a stored member's bytes lie in the file.
  std::string_view pkl = bytes.substr(pm.offset, pm.size);
  std::string problem_line = Machine(pkl, root, *members).run();
  // Names from the file (class names, storage keys) may hold control characters: one line.
  for (char& c : problem_line) {
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  return problem_line;
}

}  // namespace batchcheck
