#include "core/journal/clean_rows.h"

#include <cctype>
#include <charconv>
#include <cstring>

#include "core/base/errors.h"

namespace batchcheck {

const char* const kCleanColumns =
    "step rank batch probe size forward_ok pred_min pred_max pred_nonfinite loss loss_nonfinite band_lo band_hi";

namespace {

constexpr int kFields = 13;

void put(std::string& out, uint64_t v) {
  char b[24];
  auto r = std::to_chars(b, b + sizeof b, v);
  out.append(b, r.ptr);
}

void put(std::string& out, double v) {
  char b[32];
  auto r = std::to_chars(b, b + sizeof b, v);  // shortest form that reads back as the same double
  out.append(b, r.ptr);
}

template <typename T>
void put(std::string& out, const std::optional<T>& v) {
  if (v) {
    put(out, *v);
  } else {
    out += '-';
  }
}

// One row's fields, split in place.
class Row {
 public:
  Row(const char* p, const char* end, std::size_t number, const std::string& from) : p_(p), end_(end), n_(number), from_(from) {}

  std::optional<uint64_t> count() {
    const auto [b, e] = field();
    if (e - b == 1 && *b == '-') return std::nullopt;
    uint64_t v = 0;
    auto r = std::from_chars(b, e, v);
    if (r.ec != std::errc() || r.ptr != e) bad("\"" + std::string(b, e) + "\" is not a count");
    return v;
  }
  uint64_t needed_count() {
    auto v = count();
    if (!v) bad("a missing count");
    return *v;
  }
  bool flag() {
    const uint64_t v = needed_count();
    if (v > 1) bad("a flag of " + std::to_string(v));
    return v == 1;
  }
  std::optional<double> number() {
    const auto [b, e] = field();
    if (e - b == 1 && *b == '-') return std::nullopt;
    double v = 0;
    auto r = std::from_chars(b, e, v);
    if (r.ec != std::errc() || r.ptr != e) bad("\"" + std::string(b, e) + "\" is not a number");
    return v;
  }
  bool at_end() const { return p_ == end_; }
  [[noreturn]] void bad(const std::string& what) const {
    throw InputError(from_, "clean", "row " + std::to_string(n_) + ": " + what + ": the part was edited or truncated");
  }

 private:
  std::pair<const char*, const char*> field() {
    if (p_ == end_) bad("fewer than " + std::to_string(kFields) + " fields");
    const char* b = p_;
    const char* e = static_cast<const char*>(std::memchr(b, ' ', static_cast<std::size_t>(end_ - b)));
    if (!e) e = end_;
    p_ = e == end_ ? e : e + 1;
    if (b == e) bad("an empty field");
    return {b, e};
  }
  const char* p_;
  const char* end_;
  std::size_t n_;
  const std::string& from_;
};

}  // namespace

std::string encode_clean_rows(const std::vector<const CleanStep*>& steps) {
  std::string out;
  out.reserve(steps.size() * 64);
  for (const CleanStep* c : steps) {
    put(out, c->at.step);
    out += ' ';
    put(out, c->at.rank);
    out += ' ';
    put(out, c->at.batch);
    out += c->at.probe ? " 1 " : " 0 ";
    put(out, c->at.size);
    out += c->forward_ok ? " 1 " : " 0 ";
    const std::optional<BatchStats>& s = c->stats;
    if (!s) {
      out += "- - - - - - -\n";
      continue;
    }
    put(out, s->pred_min);
    out += ' ';
    put(out, s->pred_max);
    out += ' ';
    put(out, s->pred_nonfinite);
    out += ' ';
    put(out, s->loss);
    out += s->loss_nonfinite ? " 1 " : " 0 ";
    put(out, s->band_lo);
    out += ' ';
    put(out, s->band_hi);
    out += '\n';
  }
  return out;
}

std::vector<CleanStep> decode_clean_rows(const std::string& rows, const std::string& from, bool escaped) {
  std::vector<CleanStep> out;
  out.reserve(rows.size() / 48);  // a row is 50-90 characters
  const char* p = rows.data();
  const char* const end = p + rows.size();
  const char eol_char = escaped ? '\\' : '\n';
  const std::size_t eol_size = escaped ? 2 : 1;
  std::size_t number = 0;
  while (p != end) {
    const char* eol = static_cast<const char*>(std::memchr(p, eol_char, static_cast<std::size_t>(end - p)));
    Row r(p, eol ? eol : end, ++number, from);
    if (!eol || (escaped && (eol + 1 == end || eol[1] != 'n'))) r.bad("no end of line");
    CleanStep& c = out.emplace_back();
    c.at.step = r.needed_count();
    c.at.rank = r.count();
    c.at.batch = r.count();
    c.at.probe = r.flag();
    c.at.size = r.needed_count();
    c.forward_ok = r.flag();
    const auto pred_min = r.number();
    const auto pred_max = r.number();
    const auto pred_nonfinite = r.count();
    const auto loss = r.number();
    const auto loss_nonfinite = r.count();
    const auto band_lo = r.number();
    const auto band_hi = r.number();
    if (!r.at_end()) r.bad("more than " + std::to_string(kFields) + " fields");
    if (pred_nonfinite.has_value() != loss_nonfinite.has_value()) r.bad("statistics in part");
    if (pred_nonfinite) {
      if (*loss_nonfinite > 1) r.bad("a flag of " + std::to_string(*loss_nonfinite));
      c.stats = BatchStats{pred_min, pred_max, *pred_nonfinite, loss, *loss_nonfinite == 1, band_lo, band_hi};
    } else if (pred_min || pred_max || loss || band_lo || band_hi) {
      r.bad("statistics in part");
    }
    p = eol + eol_size;
  }
  return out;
}

std::optional<std::string> take_clean_rows(std::string& text) {
  // From the end: `"rows":"...."}}`, whitespace allowed between the tokens.
  auto skip_back = [&](std::size_t& i) {
    while (i > 0 && std::isspace(static_cast<unsigned char>(text[i - 1]))) --i;
  };
  auto expect_back = [&](std::size_t& i, char c) {
    skip_back(i);
    if (i == 0 || text[i - 1] != c) return false;
    --i;
    return true;
  };
  std::size_t i = text.size();
  if (!expect_back(i, '}') || !expect_back(i, '}') || !expect_back(i, '"')) return std::nullopt;
  const std::size_t close = i;
  // rows hold no quote (memrchr: rfind goes a character at a time)
  const void* q = memrchr(text.data(), '"', close);
  if (!q) return std::nullopt;
  const std::size_t open = static_cast<std::size_t>(static_cast<const char*>(q) - text.data());
  std::size_t k = open;
  const std::string key = "\"rows\"";
  if (!expect_back(k, ':')) return std::nullopt;
  skip_back(k);
  if (k < key.size() || text.compare(k - key.size(), key.size(), key) != 0) return std::nullopt;
  std::string rows = text.substr(open + 1, close - open - 1);
  text.erase(open + 1, close - open - 1);
  return rows;
}

}  // namespace batchcheck
