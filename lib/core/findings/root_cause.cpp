#include "core/findings/root_cause.h"

#include <algorithm>
#include <cstdio>

#include "core/base/text.h"

namespace batchcheck {

Halving halve_failing_rows(uint64_t n, const std::function<bool(const std::vector<uint64_t>&)>& fails,
                           uint64_t max_forwards) {
  Halving h;
  for (uint64_t r = 0; r < n; ++r) h.rows.push_back(r);
  auto test = [&](const std::vector<uint64_t>& rows) {
    ++h.forwards;
    return fails(rows);
  };
  // Halve while a half fails alone: one sample's problem spread by the batch.
  while (h.rows.size() > 1 && h.forwards + 2 <= max_forwards) {
    const auto mid = h.rows.begin() + static_cast<std::ptrdiff_t>(h.rows.size() / 2);
    std::vector<uint64_t> first(h.rows.begin(), mid), second(mid, h.rows.end());
    if (test(first)) {
      h.rows = std::move(first);
    } else if (test(second)) {
      h.rows = std::move(second);
    } else {
      break;
    }
  }
  if (h.rows.size() <= 1 || h.forwards >= max_forwards) return h;
  // Neither half fails alone: the rows fail together. Find the ones needed, one at a time:
  // the shortest prefix that still fails with those found so far ends with a needed row.
  std::vector<uint64_t> found, rest = h.rows;
  auto with = [&](std::size_t k) {  // found plus rest[0..k]
    std::vector<uint64_t> r = found;
    r.insert(r.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(k + 1));
    return r;
  };
  while (!rest.empty()) {
    std::size_t lo = 0, hi = rest.size() - 1;  // found + rest[0..hi] fails
    while (lo < hi) {
      if (h.forwards >= max_forwards) return h;  // out of budget: the superset stands
      const std::size_t mid = (lo + hi) / 2;
      if (test(with(mid))) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    found.push_back(rest[lo]);
    rest.resize(lo);
    if (rest.empty()) break;
    if (h.forwards >= max_forwards) return h;
    if (test(found)) break;
  }
  std::sort(found.begin(), found.end());
  h.rows = std::move(found);
  h.batch_dependent = h.rows.size() > 1;
  return h;
}

namespace {

using json = nlohmann::ordered_json;

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string short_op(const std::string& op) {
  const auto p = op.rfind("::");
  std::string s = p == std::string::npos ? op : op.substr(p + 2);
  // In-place and out variants read as the op (log_ is log).
  while (!s.empty() && s.back() == '_') s.pop_back();
  return s;
}

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

std::string range_text(const TensorSummary& t) {
  if (!t.min || !t.max) return "no finite value";
  return "[" + num(*t.min) + ", " + num(*t.max) + "]";
}

std::string where_text(const OpSite& s) {
  std::string out = s.op;
  if (!s.file.empty()) {
    const auto slash = s.file.find_last_of('/');
    out += " at " + (slash == std::string::npos ? s.file : s.file.substr(slash + 1)) + ":" + std::to_string(s.line);
  }
  if (!s.module.empty()) out += " in " + s.module;
  return out;
}

// What the first bad op was given, in the words its domain needs.
std::string given_text(const Localization& l) {
  const std::string op = short_op(l.site.op);
  if (l.inputs.empty()) return "";
  const TensorSummary& a = l.inputs.front();
  std::string out = op + " of values in " + range_text(a);
  std::vector<std::string> counts;
  if (one_of(op, {"log", "log2", "log10", "sqrt", "rsqrt", "pow", "lgamma", "digamma", "float_power"}) && a.negative) {
    counts.push_back(std::to_string(a.negative) + " negative");
  }
  if (one_of(op, {"log", "log2", "log10", "rsqrt", "reciprocal"}) && a.zero) counts.push_back(plural(a.zero, "zero"));
  if (op == "log1p" && a.min && *a.min < -1) counts.push_back("values below -1");
  if (one_of(op, {"acos", "asin", "atanh", "arccos", "arcsin"}) && a.outside_unit) {
    counts.push_back(std::to_string(a.outside_unit) + " outside [-1, 1]");
  }
  if (one_of(op, {"div", "true_divide", "divide", "remainder", "fmod", "floor_divide"}) && l.inputs.size() > 1) {
    const TensorSummary& d = l.inputs[1];
    out = "division of values in " + range_text(a) + " by values in " + range_text(d);
    if (d.zero) counts.push_back(plural(d.zero, "zero divisor"));
    if (a.zero && d.zero) counts.push_back("0/0");
  }
  uint64_t inf = 0;
  for (const auto& t : l.inputs) inf += t.pos_inf + t.neg_inf;
  if (inf) counts.push_back(plural(inf, "infinite input"));
  if (one_of(op, {"std", "var", "std_mean", "var_mean"})) {
    std::vector<std::string> d;
    for (auto s : a.shape) d.push_back(std::to_string(s));
    out = op + " of a tensor of shape [" + join(d, ", ") + "] with values in " + range_text(a);
  }
  if (!counts.empty()) out += ": " + join(counts, ", ");
  return out;
}

std::string samples_text(const Localization& l, const std::vector<int64_t>& indices) {
  if (!l.halved || l.rows.empty()) return "";
  std::vector<std::string> s;
  for (std::size_t i = 0; i < l.rows.size() && i < 8; ++i) {
    s.push_back(l.rows[i] < indices.size() ? std::to_string(indices[l.rows[i]]) : "row " + std::to_string(l.rows[i]));
  }
  std::string list = join(s, ", ") + (l.rows.size() > 8 ? " and " + std::to_string(l.rows.size() - 8) + " more" : "");
  if (l.batch_dependent) {
    return "; batch-dependent: samples " + list + " fail together, no smaller part of them alone";
  }
  return "; from sample" + std::string(l.rows.size() > 1 ? "s " : " ") + list;
}

json summary_json(const TensorSummary& t) {
  json j = {{"name", t.name}, {"shape", t.shape}, {"elements", t.elements}};
  j["min"] = t.min ? json(*t.min) : json();
  j["max"] = t.max ? json(*t.max) : json();
  j["nan"] = t.nan;
  j["inf"] = t.pos_inf;
  j["-inf"] = t.neg_inf;
  j["negative"] = t.negative;
  j["zero"] = t.zero;
  if (t.above || t.below) {
    j["above"] = t.above;
    j["below"] = t.below;
  }
  return j;
}

json site_json(const OpSite& s) {
  json j = {{"op", s.op}, {"module", s.module}};
  if (!s.file.empty()) {
    j["file"] = s.file;
    j["line"] = s.line;
    // A traced archive holds no source text: the file and line alone.
    if (!s.source_line.empty()) j["source_line"] = s.source_line;
  }
  return j;
}

}  // namespace

std::string op_site_text(const OpSite& s) { return where_text(s); }
nlohmann::ordered_json op_site_json(const OpSite& s) { return site_json(s); }

std::string root_cause_summary(const Localization& l, const std::vector<int64_t>& indices) {
  std::string what;
  if (l.kind == "range") {
    const std::string band = "[" + (l.lo ? num(*l.lo) : "-inf") + ", " + (l.hi ? num(*l.hi) : "inf") + "]";
    if (l.origin == "op") {
      what = "out of " + band + ": " + where_text(l.site);
      if (!l.inputs.empty()) what += " took values in " + range_text(l.inputs.front());
      what += " to " + range_text(l.output);
      std::vector<std::string> c;
      if (l.output.above) c.push_back(std::to_string(l.output.above) + " above " + num(*l.hi));
      if (l.output.below) c.push_back(std::to_string(l.output.below) + " below " + num(*l.lo));
      if (!c.empty()) what += " (" + join(c, ", ") + ")";
    } else if (l.origin == "input") {
      what = "out of " + band + ": the model's input " + l.name + " is already in " + range_text(l.output) +
             " and no operation brings it into the range";
    } else {
      return "";
    }
  } else {
    const char* value = l.output.nan ? "NaN" : "Inf";
    if (l.origin == "op") {
      what = std::string("first ") + value + ": " + where_text(l.site);
      const std::string given = given_text(l);
      if (!given.empty()) what += ", on " + given;
      if (l.inf_from) what += "; the Inf came from " + where_text(*l.inf_from);
    } else if (l.origin == "input") {
      // An argument named "input" would read "the model's input input".
      const bool plain = l.name.empty() || l.name == "input" || l.name == "inputs";
      what = std::string("first ") + value + ": the model's input " + (plain ? "" : l.name + " ") + "already holds it (" +
             plural(l.output.nan + l.output.pos_inf + l.output.neg_inf, "non-finite value") + ")";
    } else if (l.origin == "parameter") {
      what = std::string("first ") + value + ": the model's " + l.name + " holds it" +
             (l.site.module.empty() ? "" : " (in " + l.site.module + ")");
    } else {
      return "";
    }
  }
  return what + samples_text(l, indices);
}

json root_cause_json(const Localization& l, const std::vector<int64_t>& indices) {
  const std::string summary = root_cause_summary(l, indices);
  if (summary.empty()) return nullptr;
  json j = {{"kind", l.origin}, {"summary", summary}, {"value", l.kind == "range" ? "out of range" : l.output.nan ? "NaN" : "Inf"}};
  if (l.origin == "op") {
    const json site = site_json(l.site);
    for (auto& [k, v] : site.items()) j[k] = v;
  } else {
    j["name"] = l.name;
    if (!l.site.module.empty()) j["module"] = l.site.module;
  }
  if (l.lo || l.hi) j["band"] = {l.lo ? json(*l.lo) : json(), l.hi ? json(*l.hi) : json()};
  json in = json::array();
  for (const auto& t : l.inputs) in.push_back(summary_json(t));
  if (l.origin == "op") j["inputs"] = in;
  j["output"] = summary_json(l.output);
  json chain = json::array();
  for (const auto& s : l.chain) chain.push_back(site_json(s));
  j["chain"] = chain;
  if (l.inf_from) j["inf_from"] = site_json(*l.inf_from);
  j["chain_total"] = l.chain_total;
  if (l.halved) {
    std::vector<int64_t> samples;
    for (uint64_t r : l.rows) {
      if (r < indices.size()) samples.push_back(indices[r]);
    }
    j["samples"] = samples;
    j["batch_dependent"] = l.batch_dependent;
  }
  j["forwards"] = l.forwards;
  return j;
}

}  // namespace batchcheck
