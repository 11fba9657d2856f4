// data.format "stream": the batches of the user's own DataLoader, collated by their collate_fn
// in their Python process (batchcheck.scan), sent over a Unix socket batch by batch. Nothing is
// copied to disk; a fresh engine child (after a crash) connects again and asks for the next one.
//
// Frames: an 8-byte little-endian length, then the payload. The engine sends {"indices": [...]}
// (or {"hello": 1} first, answered with the samples, the fields and the operator libraries the
// model needs: the peer may still be preparing the model when the engine starts); the peer
// answers a request with a JSON header, then one raw frame per field (C-contiguous, native
// byte order): {"fields": [{"name", "dtype", "shape"}...]}, or
// {"error": "collate" | "dataset", "message": ..., "row": ...} where their code raised. With
// model.format "eager" the header may also carry the user's forward: the field
// "batchcheck.prediction" (and "batchcheck.aux.<key>" for each of loss.aux's outputs), or
// {"forward_error": "what forward raised"}, a message or an object
// ({"message", "location", "source_line", "raised_in", "traceback", "module", "unchecked"}).
// For a captured step, "capture" names another shape's archive beside the model's (a file name),
// and "forward_error" what the user's own step raised on this batch (its truth). A request says how
// many batches to push "ahead" of it: the epoch's next ones, each header naming its "pushed"
// indices; {"credit": 1} asks for one more; {"end": true} says there are no more to push.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>

#include "core/base/errors.h"
#include "core/base/text.h"
#include "engine/data/data_fields.h"
#include "engine/data/data_source.h"

namespace batchcheck {
namespace {

using nlohmann::json;

// A batch bigger than this is not one a training step takes, nor a header longer than that:
// a corrupt frame is refused before anything is allocated for it.
constexpr uint64_t kMaxFrame = uint64_t{64} << 30;
constexpr uint64_t kMaxHeader = uint64_t{64} << 20;
// How many of the epoch's next batches the peer pushes ahead of the one asked for.
constexpr int kPushAhead = 4;

std::optional<at::ScalarType> stream_dtype(const std::string& s) {
  static const std::map<std::string, at::ScalarType> kTypes = {
      {"float32", at::kFloat}, {"float64", at::kDouble}, {"float16", at::kHalf},  {"bfloat16", at::kBFloat16},
      {"int64", at::kLong},    {"int32", at::kInt},      {"int16", at::kShort},   {"int8", at::kChar},
      {"uint8", at::kByte},    {"bool", at::kBool}};
  const auto it = kTypes.find(s);
  if (it == kTypes.end()) return std::nullopt;
  return it->second;
}

class StreamSource : public DataSource {
 public:
  explicit StreamSource(const Config& cfg) : display_("the Python DataLoader (" + cfg.data.path_display + ")") {
    connect_to(cfg.data.path);
    send_json({{"hello", 1}});
    const json hello = receive_json();
    if (!hello.contains("samples") || !hello["samples"].is_number_unsigned() || !hello.contains("fields") ||
        !hello["fields"].is_array()) {
      throw InputError(display_, "", "the peer is not batchcheck's Python API (no samples and fields in its greeting)");
    }
    samples_ = hello["samples"].get<uint64_t>();
    for (const json& l : hello.value("libraries", json::array())) {
      if (!l.is_string() || l.get<std::string>().empty()) throw InputError(display_, "", "a greeting whose libraries are not paths: not batchcheck's protocol");
      libraries_.push_back(l.get<std::string>());
    }
    if (const auto c = hello.find("call"); c != hello.end()) {
      if (!c->is_object()) throw InputError(display_, "call", "not an object: not batchcheck's protocol");
      for (const char* key : {"forward", "select", "targets", "loss"}) {
        if (c->contains(key) && !(*c)[key].is_string()) throw InputError(display_, std::string("call.") + key, "not a string: not batchcheck's protocol");
      }
      call_ = {c->value("forward", ""), c->value("select", ""), c->value("targets", ""), c->value("loss", "")};
    }
    std::vector<std::string> available;
    for (const json& f : hello["fields"]) {
      TensorMeta m = meta_of(f);
      available.push_back(f.value("name", ""));
      metas_[available.back()] = m;
    }
    target_name_ = cfg.data.targets;
    has_targets_ = metas_.count(target_name_) > 0;
    if (cfg.data.targets_explicit && !has_targets_) {
      throw InputError(display_, "targets \"" + target_name_ + "\"",
                       "missing, but data.targets names it (fields: " + join(available) + ")" + did_you_mean(target_name_, available));
    }
    if (cfg.model.inputs_kind != InputsKind::Single) {
      inputs_ = wanted_fields(cfg, available, target_name_, display_);
    } else if (metas_.count(cfg.data.inputs)) {
      inputs_ = {cfg.data.inputs};
    } else {
      throw InputError(display_, "field \"" + cfg.data.inputs + "\"", "missing, but the model takes it (fields: " + join(available) +
                                                                         "); name forward's fields in model.inputs");
    }
    for (const auto& f : inputs_) bytes_ += meta_bytes(metas_[f]);
    if (has_targets_) bytes_ += meta_bytes(metas_[target_name_]);
  }
  ~StreamSource() override {
    if (fd_ >= 0) ::close(fd_);
  }

  uint64_t samples() const override { return samples_; }
  const std::vector<std::string>& input_names() const override { return inputs_; }
  bool has_targets() const override { return has_targets_; }
  TensorMeta sample_meta(int field) const override {
    const auto it = metas_.find(name_of(field));
    return it == metas_.end() ? TensorMeta{} : it->second;
  }
  uint64_t sample_bytes() const override { return bytes_; }
  std::vector<std::string> operator_libraries() const override { return libraries_; }
  ForwardCall forward_call() const override { return call_; }

  at::Tensor gather(int field, const std::vector<int64_t>& indices) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (indices != cached_indices_ || !cached_) fetch(indices);
    if (cached_->failure) throw_failure(*cached_->failure, indices.size());
    const auto it = cached_->fields.find(name_of(field));
    if (it == cached_->fields.end()) {
      if (field == kTargetField) return at::Tensor();
      throw InputError(display_, "field \"" + name_of(field) + "\"", "missing from a batch, though the first batch had it");
    }
    return it->second;
  }

 private:
  struct Batch {
    std::map<std::string, at::Tensor> fields;
    std::optional<json> failure;
    std::optional<GivenForward> given;
  };

 public:
  std::optional<GivenForward> given_forward(const std::vector<int64_t>& indices) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (indices != cached_indices_ || !cached_) fetch(indices);
    return cached_->given;
  }

 private:

  std::string name_of(int field) const {
    return field == kTargetField ? target_name_ : inputs_.at(static_cast<std::size_t>(field));
  }

  TensorMeta meta_of(const json& f) const {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("dtype") || !f["dtype"].is_string()) {
      throw InputError(display_, "", "a field that is not {\"name\", \"dtype\", \"shape\"}: not batchcheck's protocol");
    }
    TensorMeta m;
    m.present = true;
    m.dtype = f.value("dtype", "");
    const auto t = stream_dtype(m.dtype);
    if (!t || !f.contains("shape") || !f["shape"].is_array()) {
      throw InputError(display_, "field \"" + f.value("name", "") + "\"", "a dtype or shape the engine cannot take: " + f.dump());
    }
    m.floating = at::isFloatingType(*t);
    uint64_t bytes = at::elementSize(*t);
    for (const json& d : f["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || m.shape.size() >= 16) {
        throw InputError(display_, "field \"" + f.value("name", "") + "\"", "a shape the engine cannot take: " + f["shape"].dump());
      }
      m.shape.push_back(d.get<int64_t>());
      const auto extent = static_cast<uint64_t>(m.shape.back());
      bytes = extent == 0 ? 0 : (bytes > kMaxFrame / extent ? kMaxFrame + 1 : bytes * extent);
    }
    if (bytes > kMaxFrame) throw InputError(display_, "field \"" + f.value("name", "") + "\"", "a tensor over 64 GiB: not batchcheck's protocol");
    return m;
  }

  void connect_to(const std::string& path) {
    sockaddr_un addr{};
    if (path.size() >= sizeof(addr.sun_path)) throw InputError(display_, "", "the socket's path is too long");
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw InputError(display_, "", std::string("cannot connect to the Python process that holds the loader: ") + std::strerror(errno) +
                                         " (data.format \"stream\" is written by batchcheck.scan(), which serves it while the scan runs)");
    }
  }

  void write_all(const void* p, std::size_t n) const {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw InputError(display_, "", "the Python process went away mid-scan (" + std::string(std::strerror(errno)) + ")");
      c += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  void read_all(void* p, std::size_t n) const {
    char* c = static_cast<char*>(p);
    while (n > 0) {
      const ssize_t r = ::recv(fd_, c, n, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw InputError(display_, "", "the Python process went away mid-scan (the loader's connection closed)");
      c += r;
      n -= static_cast<std::size_t>(r);
    }
  }
  uint64_t read_length() const {
    unsigned char b[8];
    read_all(b, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
    if (n > kMaxFrame) throw InputError(display_, "", "a frame of " + std::to_string(n) + " bytes: not batchcheck's protocol");
    return n;
  }
  void send_json(const json& j) const {
    const std::string s = j.dump();
    unsigned char b[8];
    uint64_t n = s.size();
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(n >> (8 * i));
    write_all(b, 8);
    write_all(s.data(), s.size());
  }
  json receive_json() const {
    const uint64_t n = read_length();
    if (n > kMaxHeader) throw InputError(display_, "", "a header of " + std::to_string(n) + " bytes: not batchcheck's protocol");
    std::string s(n, '\0');
    read_all(s.data(), s.size());
    json j = json::parse(s, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw InputError(display_, "", "a header that is not a JSON object: not batchcheck's protocol");
    return j;
  }

  // The batch of `indices`: pushed already, or asked for. Asking says how many of the epoch's
  // next batches to push behind it, and each pushed batch taken asks for one more, so that the
  // Python process prepares batches while this one checks them instead of taking turns with it
  // (a round trip per batch costs more than a small batch's check).
  void fetch(const std::vector<int64_t>& indices) const {
    while (true) {
      const auto pushed = pushed_.find(indices);
      if (pushed != pushed_.end()) {
        cached_ = std::move(pushed->second);
        pushed_.erase(pushed);
        cached_indices_ = indices;
        // One more ahead, unless kPushAhead are held or on their way already (batches pushed
        // but not wanted, around probes and out-of-order requests, are never more than that).
        if (outstanding_ + pushed_.size() < static_cast<std::size_t>(kPushAhead)) {
          send_json({{"credit", 1}});
          ++outstanding_;
        }
        return;
      }
      if (outstanding_ == 0) break;
      receive_pushed(receive_json());  // a push on its way may be the one wanted
    }
    const int ahead = std::max(0, kPushAhead - static_cast<int>(pushed_.size()));
    send_json({{"indices", indices}, {"ahead", ahead}});
    outstanding_ += ahead;
    while (true) {
      json header = receive_json();
      if (header.contains("pushed") || header.contains("end")) {
        receive_pushed(std::move(header));
        continue;
      }
      cached_ = read_batch(header);
      cached_indices_ = indices;
      return;
    }
  }

  // A batch pushed ahead (kept for when it is wanted), or the peer's word that it has no more
  // to push (the epoch's end).
  void receive_pushed(json header) const {
    if (header.contains("end")) {
      outstanding_ = 0;
      return;
    }
    std::vector<int64_t> key;
    const json& p = header["pushed"];
    for (const json& i : p.is_array() ? p : json::array({nullptr})) {
      if (!i.is_number_integer()) throw InputError(display_, "", "a pushed batch without its indices: not batchcheck's protocol");
      key.push_back(i.get<int64_t>());
    }
    if (outstanding_ == 0) throw InputError(display_, "", "a batch pushed unasked: not batchcheck's protocol");
    --outstanding_;
    pushed_[key] = read_batch(header);
  }

  Batch read_batch(const json& header) const {
    Batch b;
    if (header.contains("error")) {
      b.failure = header;
      return b;
    }
    for (const json& f : header.value("fields", json::array())) {
      const TensorMeta m = meta_of(f);
      const std::string name = f.value("name", "");
      const uint64_t n = read_length();
      at::Tensor t = at::empty(m.shape, at::TensorOptions().dtype(*stream_dtype(m.dtype)));
      if (static_cast<uint64_t>(t.nbytes()) != n) {
        throw InputError(display_, "field \"" + name + "\"", "a frame of " + std::to_string(n) + " bytes for a tensor of " +
                                                                 std::to_string(t.nbytes()) + ": not batchcheck's protocol");
      }
      read_all(t.data_ptr(), n);
      if (name == kEagerPredictionField) {
        if (!b.given) b.given.emplace();
        b.given->output = std::move(t);
      } else if (name.rfind(kEagerAuxPrefix, 0) == 0) {
        if (!b.given) b.given.emplace();
        b.given->aux[name.substr(std::strlen(kEagerAuxPrefix))] = std::move(t);
      } else if (name.rfind(kRowSamplesPrefix, 0) == 0) {
        if (t.scalar_type() != at::kLong || t.dim() != 1) {
          throw InputError(display_, "field \"" + name + "\"", "a row map that is not int64 and 1-D: not batchcheck's protocol");
        }
        if (!b.given) b.given.emplace();
        b.given->row_samples[name.substr(std::strlen(kRowSamplesPrefix))] = std::move(t);
      } else {
        b.fields[name] = std::move(t);
      }
    }
    if (header.contains("forward_error")) {
      if (!b.given) b.given.emplace();
      read_forward_error(header["forward_error"], *b.given);
    }
    if (const auto it = header.find("faults"); it != header.end()) {
      if (!b.given) b.given.emplace();
      read_faults(*it, *b.given);
    }
    if (const auto it = header.find("gradients"); it != header.end()) {
      if (!b.given) b.given.emplace();
      read_gradients(*it, *b.given);
    }
    if (const auto it = header.find("root_cause"); it != header.end()) {
      if (!b.given) b.given.emplace();
      b.given->localization = read_localization(*it);
    }
    if (const auto it = header.find("backward_error"); it != header.end() && it->is_string()) {
      if (!b.given) b.given.emplace();
      b.given->backward_error = single_line(it->get<std::string>());
    }
    if (const auto it = header.find("half"); it != header.end()) {
      if (!b.given) b.given.emplace();
      b.given->half = read_half(*it);
    }
    if (const auto it = header.find("capture"); it != header.end()) {
      if (!b.given) b.given.emplace();
      b.given->capture = capture_name(*it);
    }
    return b;
  }

  // A string (the message), or {"message", "location", "source_line", "raised_in", "traceback",
  // "module", "unchecked"}: read by type, so a malformed one is the protocol's error.
  void read_forward_error(const json& e, GivenForward& g) const {
    auto text = [&e](const char* key) {
      const auto it = e.find(key);
      return it != e.end() && it->is_string() ? single_line(it->get<std::string>()) : std::string();
    };
    if (e.is_string()) {
      g.error = e.get<std::string>();
    } else if (e.is_object()) {
      g.error = text("message");
      g.location = text("location");
      g.source_line = text("source_line");
      g.raised_in = text("raised_in");
      g.module = text("module");
      const auto tb = e.find("traceback");
      if (tb != e.end() && tb->is_string()) g.traceback = tb->get<std::string>();
      const auto u = e.find("unchecked");
      g.unchecked = u != e.end() && u->is_boolean() && u->get<bool>();
    } else {
      throw InputError(display_, "forward_error", "neither a message nor an object: not batchcheck's protocol");
    }
    if (g.error.empty()) g.error = "forward raised";
  }

  // The faults of a step run eagerly, in OpFault's terms (core/pipeline/backend.h); read by type,
  // bounded, so a malformed one is the protocol's error and never a crash.
  void read_faults(const json& faults, GivenForward& g) const {
    if (!faults.is_array() || faults.size() > 64) throw InputError(display_, "faults", "not a list of faults: not batchcheck's protocol");
    auto text = [](const json& o, const char* key) {
      const auto it = o.find(key);
      return it != o.end() && it->is_string() ? single_line(it->get<std::string>()) : std::string();
    };
    auto number = [](const json& o, const char* key) {
      const auto it = o.find(key);
      return it != o.end() && it->is_number() ? it->get<double>() : 0.0;
    };
    auto ints = [this](const json& o, const char* key) {
      std::vector<int64_t> out;
      const auto it = o.find(key);
      if (it == o.end()) return out;
      if (!it->is_array() || it->size() > (uint64_t{1} << 20)) throw InputError(display_, key, "not a list of numbers: not batchcheck's protocol");
      for (const json& v : *it) {
        if (!v.is_number_integer()) throw InputError(display_, key, "not a list of numbers: not batchcheck's protocol");
        out.push_back(v.get<int64_t>());
      }
      return out;
    };
    static const std::set<std::string> kIds = {"index", "target-out-of-range", "output-out-of-range", "output-nonfinite",
                                               "target-nonfinite", "shape-mismatch", "loss-nonfinite"};
    for (const json& o : faults) {
      if (!o.is_object()) throw InputError(display_, "faults", "a fault that is not an object: not batchcheck's protocol");
      OpFault f;
      f.id = text(o, "id");
      if (!kIds.count(f.id)) throw InputError(display_, "faults", "a fault of no known kind: not batchcheck's protocol");
      if (const auto s = o.find("site"); s != o.end() && s->is_object()) {
        f.site.op = text(*s, "op");
        f.site.module = text(*s, "module");
        f.site.file = text(*s, "file");
        f.site.source_line = text(*s, "source_line");
        f.library_caller = text(*s, "library");
        const double line = number(*s, "line");
        f.site.line = line > 0 ? static_cast<uint64_t>(line) : 0;
      }
      f.module_type = text(o, "module_type");
      f.what = text(o, "what");
      f.bound_name = text(o, "bound_name");
      f.loss = text(o, "loss");
      f.value = static_cast<int64_t>(number(o, "value"));
      f.bound = static_cast<int64_t>(number(o, "bound"));
      if (const auto it = o.find("smallest"); it != o.end() && it->is_number_integer()) f.smallest = it->get<int64_t>();
      f.lo = number(o, "lo");
      f.hi = number(o, "hi");
      f.min = number(o, "min");
      f.max = number(o, "max");
      f.outside = static_cast<uint64_t>(std::max(0.0, number(o, "outside")));
      f.nonfinite = static_cast<uint64_t>(std::max(0.0, number(o, "nonfinite")));
      f.elements = static_cast<uint64_t>(std::max(0.0, number(o, "elements")));
      f.contract = text(o, "contract");
      f.text = text(o, "text");
      f.consequence = text(o, "consequence");
      if (const auto d = o.find("detail"); d != o.end()) {
        if (!d->is_object() || d->size() > 16) throw InputError(display_, "detail", "not an object of a few numbers: not batchcheck's protocol");
        for (const auto& [key, value] : d->items()) {
          // Numbers, flags and short lists of numbers only: the report quotes them.
          const bool list = value.is_array() && value.size() <= 64 &&
                            std::all_of(value.begin(), value.end(), [](const json& v) { return v.is_number(); });
          if (value.is_number() || value.is_boolean() || list) f.detail[single_line(key)] = value;
        }
      }
      if (f.id == "loss-nonfinite" && f.contract.empty()) throw InputError(display_, "faults", "a loss fault of no contract: not batchcheck's protocol");
      f.input_shape = ints(o, "input_shape");
      f.target_shape = ints(o, "target_shape");
      for (int64_t r : ints(o, "rows")) {
        if (r >= 0) f.rows.push_back(static_cast<uint64_t>(r));
      }
      const auto fatal = o.find("fatal");
      f.fatal = fatal == o.end() || !fatal->is_boolean() || fatal->get<bool>();
      g.stopped = g.stopped || f.fatal;
      g.faults.push_back(std::move(f));
    }
  }

  // Localization's fields (core/findings/root_cause.h), read by type: a value of another type
  // is left out, an object of the wrong shape is the protocol's error.
  Localization read_localization(const json& o) const {
    if (!o.is_object()) throw InputError(display_, "root_cause", "not an object: not batchcheck's protocol");
    auto text = [](const json& j, const char* key) {
      const auto it = j.find(key);
      return it != j.end() && it->is_string() ? single_line(it->get<std::string>()) : std::string();
    };
    auto count = [](const json& j, const char* key) {
      const auto it = j.find(key);
      return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : uint64_t{0};
    };
    auto site = [&](const json& j) {
      OpSite s;
      if (!j.is_object()) return s;
      s.op = text(j, "op");
      s.module = text(j, "module");
      s.file = text(j, "file");
      s.source_line = text(j, "source_line");
      s.line = count(j, "line");
      return s;
    };
    auto summary = [&](const json& j) {
      TensorSummary t;
      if (!j.is_object()) return t;
      t.name = text(j, "name");
      if (const auto s = j.find("shape"); s != j.end() && s->is_array() && s->size() <= 64) {
        for (const json& d : *s) {
          if (d.is_number_integer()) t.shape.push_back(d.get<int64_t>());
        }
      }
      t.elements = count(j, "elements");
      t.nan = count(j, "nan");
      t.pos_inf = count(j, "pos_inf");
      t.neg_inf = count(j, "neg_inf");
      t.negative = count(j, "negative");
      t.zero = count(j, "zero");
      t.outside_unit = count(j, "outside_unit");
      for (auto [key, field] : {std::pair<const char*, std::optional<double>*>{"min", &t.min}, {"max", &t.max}}) {
        const auto it = j.find(key);
        if (it != j.end() && it->is_number()) *field = it->get<double>();
      }
      return t;
    };
    Localization l;
    l.origin = text(o, "origin");
    if (l.origin != "op" && l.origin != "input" && l.origin != "parameter") {
      throw InputError(display_, "root_cause", "an origin of no known kind: not batchcheck's protocol");
    }
    l.kind = "nonfinite";
    l.name = text(o, "name");
    if (const auto s = o.find("site"); s != o.end()) l.site = site(*s);
    if (const auto in = o.find("inputs"); in != o.end() && in->is_array()) {
      for (std::size_t k = 0; k < in->size() && k < 8; ++k) l.inputs.push_back(summary((*in)[k]));
    }
    if (const auto out = o.find("output"); out != o.end()) l.output = summary(*out);
    if (const auto inf = o.find("inf_from"); inf != o.end() && inf->is_object()) l.inf_from = site(*inf);
    // Half precision's: the op's output dtype, its float32 value, the peak, the rows that hold it.
    l.dtype = text(o, "dtype");
    for (auto [key, field] : {std::pair<const char*, std::optional<double>*>{"fp32_max", &l.fp32_max}, {"peak", &l.peak}}) {
      const auto it = o.find(key);
      if (it != o.end() && it->is_number() && std::isfinite(it->get<double>())) *field = it->get<double>();
    }
    if (const auto rows = o.find("rows"); rows != o.end() && rows->is_array() && rows->size() <= (uint64_t{1} << 20)) {
      for (const json& r : *rows) {
        if (r.is_number_unsigned()) l.origin_rows.push_back(r.get<uint64_t>());
      }
    }
    l.forwards = 1;
    return l;
  }

  // {"dtype", "peak", "overflow": a localization, "peak_site": one}: HalfCheck's fields.
  HalfCheck read_half(const json& o) const {
    if (!o.is_object()) throw InputError(display_, "half", "not an object: not batchcheck's protocol");
    HalfCheck h;
    const auto dtype = o.find("dtype");
    h.dtype = dtype != o.end() && dtype->is_string() ? dtype->get<std::string>() : std::string();
    if (h.dtype != "float16" && h.dtype != "bfloat16") throw InputError(display_, "half", "a dtype of no known kind: not batchcheck's protocol");
    h.ran = true;
    const auto peak = o.find("peak");
    h.peak = peak != o.end() && peak->is_number() ? peak->get<double>() : 0.0;
    if (const auto it = o.find("overflow"); it != o.end()) {
      h.overflow = read_localization(*it);
      if (!h.overflow->fp32_max) h.overflow.reset();  // an overflow is measured against float32's value
    }
    if (const auto it = o.find("peak_site"); it != o.end()) {
      h.peak_site = read_localization(*it);
      if (!h.peak_site->peak) h.peak_site.reset();
    }
    return h;
  }

  void read_gradients(const json& grads, GivenForward& g) const {
    if (!grads.is_array()) throw InputError(display_, "gradients", "not a list: not batchcheck's protocol");
    std::vector<GradStats> out;
    for (const json& o : grads) {
      if (!o.is_object()) throw InputError(display_, "gradients", "an entry that is not an object: not batchcheck's protocol");
      GradStats s;
      const auto name = o.find("name");
      if (name != o.end() && name->is_string()) s.name = single_line(name->get<std::string>());
      for (auto [key, field] : {std::pair<const char*, uint64_t*>{"elements", &s.elements}, {"nan", &s.nan}, {"inf", &s.inf}}) {
        const auto it = o.find(key);
        *field = it != o.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
      }
      out.push_back(std::move(s));
    }
    g.gradients = std::move(out);
  }

  // Another shape's capture: a file name in the model's own folder, never a path.
  std::string capture_name(const json& c) const {
    const std::string name = c.is_string() ? c.get<std::string>() : std::string();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." || name.size() > 255) {
      throw InputError(display_, "capture", "not a file name beside the model: not batchcheck's protocol");
    }
    return name;
  }

  // The user's own collate_fn or Dataset raised: the batch's load failure, as with files. Where
  // their collate_fn raised: every sample of the batch is named (it is not known which one it took
  // exception to).
  [[noreturn]] void throw_failure(const json& f, std::size_t batch_size) const {
    // Read by type: a malformed failure is the protocol's error, not a JSON exception.
    auto text = [&f](const char* key, const char* fallback) {
      const auto it = f.find(key);
      return it != f.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
    };
    auto number = [&f](const char* key) {
      const auto it = f.find(key);
      return it != f.end() && it->is_number_integer() ? it->get<int64_t>() : int64_t{0};
    };
    const std::string message = text("message", "");
    if (text("error", "") == "dataset") {
      UnreadableSample s;
      const int64_t row = number("row");
      if (row < 0 || static_cast<uint64_t>(row) >= batch_size) throw InputError(display_, "", "a failing sample outside its batch: not batchcheck's protocol");
      s.row = static_cast<uint64_t>(row);
      s.dataset = true;
      s.index = number("index");
      s.file = text("file", "");  // as the exception or the Dataset named it: never opened here
      s.error = message;
      throw UnreadableError{{s}};
    }
    CollateFailure c;
    c.field = text("field", "batch");
    c.error = message;
    c.users = text("collate", "") == "yours";
    // The rows whose sample alone makes the user's collate_fn raise the same, where scan() found them.
    if (const auto it = f.find("rows"); it != f.end() && it->is_array() && !it->empty()) {
      for (const json& r : *it) {
        if (!r.is_number_unsigned() || r.get<uint64_t>() >= batch_size) {
          throw InputError(display_, "", "a failing row outside its batch: not batchcheck's protocol");
        }
        c.rows.push_back(r.get<uint64_t>());
      }
    } else {
      for (std::size_t r = 0; r < batch_size; ++r) c.rows.push_back(r);
    }
    throw CollateError{c};
  }

  std::string display_;
  int fd_ = -1;
  uint64_t samples_ = 0;
  uint64_t bytes_ = 0;
  std::string target_name_;
  bool has_targets_ = false;
  std::vector<std::string> inputs_;
  std::vector<std::string> libraries_;
  ForwardCall call_;
  std::map<std::string, TensorMeta> metas_;
  mutable std::mutex mu_;
  mutable std::vector<int64_t> cached_indices_;
  mutable std::optional<Batch> cached_;
  mutable std::map<std::vector<int64_t>, Batch> pushed_;  // batches pushed ahead, not yet wanted
  mutable std::size_t outstanding_ = 0;  // pushes asked for and not yet received
};

}  // namespace

std::unique_ptr<DataSource> open_stream_source(const Config& cfg) { return std::make_unique<StreamSource>(cfg); }

}  // namespace batchcheck
