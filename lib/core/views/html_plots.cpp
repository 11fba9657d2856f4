#include "core/views/html_plots.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "core/base/text.h"
#include "core/views/view_text.h"

namespace batchcheck {

namespace {

using Json = nlohmann::ordered_json;

constexpr std::size_t kMaxStripRanks = 16;  // rows of the strip; the rest are counted
constexpr std::size_t kMaxPlotRanks = 8;    // lines per plot
const char* const kRankColors[kMaxPlotRanks] = {"#2563eb", "#7c3aed", "#0891b2", "#db2777",
                                                "#65a30d", "#ea580c", "#4b5563", "#0d9488"};

// SVG coordinates: one decimal is finer than a pixel.
std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// An axis label: four significant digits fit the margin.
std::string label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

uint64_t u64(const Json& j, const char* key, uint64_t fallback = 0) {
  return j.is_object() && j.contains(key) && j[key].is_number_unsigned() ? j[key].get<uint64_t>() : fallback;
}

std::optional<double> number_at(const Json& arr, std::size_t i) {
  if (!arr.is_array() || i >= arr.size() || !arr[i].is_number()) return std::nullopt;
  return arr[i].get<double>();
}

// A column of a rank's series; null when a saved report lacks it (never operator[] on a
// missing key of a const object).
const Json& column(const Json& rank, const char* key) {
  static const Json none;
  const auto it = rank.find(key);
  return it == rank.end() ? none : *it;
}

// The series' ranks, each with its points' batch, batches, errors and warnings.
struct RankSeries {
  uint64_t rank = 0;
  const Json* j = nullptr;
  std::size_t points() const { return column(*j, "batch").size(); }
  const Json& col(const char* key) const { return column(*j, key); }
  uint64_t at(const char* key, std::size_t i) const {
    const Json& a = col(key);
    return a.is_array() && i < a.size() && a[i].is_number_unsigned() ? a[i].get<uint64_t>() : 0;
  }
};

std::vector<RankSeries> series_ranks(const Json& report) {
  std::vector<RankSeries> out;
  if (!report.contains("series") || !report["series"].is_object()) return out;
  const Json& series = report["series"];
  if (!series.contains("ranks") || !series["ranks"].is_array()) return out;
  for (const auto& r : series["ranks"]) {
    if (!r.is_object() || !r.contains("batch") || !r["batch"].is_array()) continue;
    out.push_back({u64(r, "rank"), &r});
  }
  return out;
}

}  // namespace

std::string strip_svg(const Json& report) {
  const Json g = report.value("geometry", Json::object());
  if (!g.is_object() || !g.contains("batches_per_rank")) return "<p>This report has no batch geometry.</p>";
  const uint64_t b = std::max<uint64_t>(u64(g, "batch_size", 1), 1), nb = u64(g, "batches_per_rank");
  const uint64_t world = std::max<uint64_t>(u64(g, "world_size", 1), 1), padded = u64(g, "padded_samples");
  const uint64_t last = u64(g, "last_batch_size", b);
  // A recorded order's batches vary in size: its strip counts batches, not samples.
  const bool recorded = field_text(g, "sampler") == "recorded";
  const uint64_t unit = recorded ? 1 : b;
  const uint64_t delivered = recorded ? nb : (nb ? (nb - 1) * b + last : 0);
  const uint64_t spr = recorded ? nb : std::max(u64(g, "samples_per_rank"), delivered);
  const double total = static_cast<double>(std::max<uint64_t>(spr, 1));

  std::vector<uint64_t> ranks;
  if (report.contains("batches") && report["batches"].is_object() && report["batches"].contains("ranks") &&
      report["batches"]["ranks"].is_array()) {
    for (const auto& r : report["batches"]["ranks"]) {
      if (r.is_number_unsigned()) ranks.push_back(r.get<uint64_t>());
    }
  }
  if (ranks.empty()) {
    for (uint64_t r = 0; r < world && r < kMaxStripRanks; ++r) ranks.push_back(r);
  }
  const std::size_t shown = std::min(ranks.size(), kMaxStripRanks);
  const std::vector<RankSeries> series = series_ranks(report);
  const uint64_t bucket = report.contains("series") ? u64(report["series"], "bucket", 1) : 1;

  const double left = 70, width = 920, top = 26, row = 16, gap = 8;
  const double height = top + static_cast<double>(shown) * (row + gap) + 22;
  auto x = [&](double samples) { return left + width * std::min(samples, total) / total; };
  std::ostringstream s;
  s << "<svg id=\"strip\" class=\"strip\" viewBox=\"0 0 1000 " << px(height) << "\" role=\"img\" aria-label=\"batches per rank\">"
    << "<defs><pattern id=\"hatch\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
    << "<rect width=\"2\" height=\"4\" fill=\"#6b7280\"/></pattern></defs>";
  const bool separate = bucket == 1 && nb <= 400;  // batch borders while each is wide enough to see
  for (std::size_t k = 0; k < shown; ++k) {
    const uint64_t rank = ranks[k];
    const double y = top + static_cast<double>(k) * (row + gap);
    s << "<text x=\"0\" y=\"" << px(y + 12) << "\" class=\"lbl\">rank " << rank << "</text>"
      << "<rect class=\"unchecked\" x=\"" << px(left) << "\" y=\"" << px(y) << "\" width=\"" << px(x(static_cast<double>(delivered)) - left)
      << "\" height=\"" << px(row) << "\" fill=\"#e5e7eb\"><title>not checked</title></rect>";
    if (spr > delivered) {
      s << "<rect class=\"dropped\" x=\"" << px(x(static_cast<double>(delivered))) << "\" y=\"" << px(y) << "\" width=\""
        << px(std::max(2.0, x(total) - x(static_cast<double>(delivered)))) << "\" height=\"" << px(row)
        << "\" fill=\"url(#hatch)\"><title>" << plural(spr - delivered, "sample") << " dropped (drop_last=True)</title></rect>";
    }
    const auto sr = std::find_if(series.begin(), series.end(), [&](const RankSeries& r) { return r.rank == rank; });
    if (sr != series.end()) {
      for (std::size_t i = 0; i < sr->points(); ++i) {
        const uint64_t first = sr->at("batch", i), count = std::max<uint64_t>(sr->at("batches", i), 1);
        const double x0 = x(static_cast<double>(first * unit));
        const double x1 = first + count >= nb ? x(static_cast<double>(delivered)) : x(static_cast<double>((first + count) * unit));
        const bool err = sr->at("errors", i) > 0, warn = sr->at("warnings", i) > 0;
        const double w = std::max(x1 - x0, err || warn ? 2.0 : 0.3);
        s << "<rect class=\"" << (err ? "b-error" : warn ? "b-warning" : "b-ok") << "\" x=\"" << px(x0) << "\" y=\"" << px(y)
          << "\" width=\"" << px(w) << "\" height=\"" << px(row) << "\" fill=\"" << (err ? "#dc2626" : warn ? "#f59e0b" : "#16a34a")
          << "\"" << (separate ? " stroke=\"#fff\" stroke-width=\"0.5\"" : "");
        if (err || warn) {
          s << "><title>" << (count > 1 ? "batches " + std::to_string(first) + "-" + std::to_string(first + count - 1)
                                        : "batch " + std::to_string(first))
            << ": " << (err ? "error" : "warning") << "</title></rect>";
        } else {
          s << "/>";
        }
      }
    }
    if (!recorded && padded > 0 && world - rank <= padded && spr > 0) {
      // DistributedSampler repeats the first samples so every rank gets as many: the last
      // `padded` ranks end on a repeated sample.
      const double x0 = x(static_cast<double>(spr - 1));
      s << "<rect class=\"padded\" x=\"" << px(std::min(x0, left + width - 3)) << "\" y=\"" << px(y) << "\" width=\""
        << px(std::max(3.0, x(total) - x0)) << "\" height=\"" << px(row) << "\" fill=\"url(#hatch)\" stroke=\"#111\" stroke-width=\"0.5\">"
        << "<title>1 padded sample: DistributedSampler repeats a sample so that every rank gets as many</title></rect>";
    }
    if (!recorded && nb > 0 && last != b) {
      // The tail batch: outlined, at least a few pixels wide, however small.
      const double x0 = x(static_cast<double>((nb - 1) * b)), x1 = x(static_cast<double>(delivered));
      s << "<rect class=\"tail\" x=\"" << px(std::min(x0, x1 - 3)) << "\" y=\"" << px(y - 1) << "\" width=\"" << px(std::max(3.0, x1 - x0))
        << "\" height=\"" << px(row + 2) << "\" fill=\"none\" stroke=\"#111\" stroke-width=\"1.2\"><title>tail batch " << nb - 1 << ": "
        << plural(last, "sample") << "</title></rect>";
      if (k == 0) {
        const std::string label = "tail: batch " + std::to_string(nb - 1) + " holds " + plural(last, "sample");
        const bool right = x1 > left + width * 0.6;
        s << "<path d=\"M" << px(x1 - 1.5) << " " << px(y - 3) << " l-4 -7 h8 z\" fill=\"#111\"/>"
          << "<text x=\"" << px(right ? x1 - 8 : x1 + 8) << "\" y=\"" << px(y - 6) << "\" class=\"lbl\" text-anchor=\""
          << (right ? "end" : "start") << "\">" << xml_escape(label) << "</text>";
      }
    }
  }
  const double ly = top + static_cast<double>(shown) * (row + gap) + 8;
  double lx = left;
  auto key = [&](const char* fill, const char* label) {
    s << "<rect x=\"" << px(lx) << "\" y=\"" << px(ly) << "\" width=\"10\" height=\"10\" fill=\"" << fill << "\"/><text x=\""
      << px(lx + 14) << "\" y=\"" << px(ly + 9) << "\" class=\"lbl\">" << label << "</text>";
    lx += 22 + 7.0 * static_cast<double>(std::char_traits<char>::length(label));
  };
  key("#16a34a", "passed");
  key("#f59e0b", "warning");
  key("#dc2626", "error");
  key("#e5e7eb", "not checked");
  if (spr > delivered || padded > 0) key("url(#hatch)", spr > delivered ? "dropped" : "padded");
  s << "</svg>";
  if (ranks.size() > shown) s << "<p class=\"muted\">" << ranks.size() - shown << " more ranks not drawn.</p>";
  return s.str();
}

namespace {

struct Plot {
  const char* id;
  std::string caption;  // text, escaped where it is written
  const char* lo_key;
  const char* hi_key;
  bool band = false;            // draw the loss contract's band
  bool mark_no_value = false;   // mark points with no finite value but non-finite ones
  bool bars = false;            // counts: a bar per point above zero, from zero
};

// A plot of one quantity, its min/max envelope per point for every rank, failing points shaded.
std::string plot_svg(const Plot& p, const std::vector<RankSeries>& ranks, const Json& band) {
  const double left = 70, right = 990, top = 10, bottom = 125;
  uint64_t end = 1;
  std::optional<double> lo, hi;
  auto widen = [&](std::optional<double> v) {
    if (!v || !std::isfinite(*v)) return;
    lo = lo ? std::min(*lo, *v) : *v;
    hi = hi ? std::max(*hi, *v) : *v;
  };
  std::optional<double> band_lo, band_hi;
  if (p.band && band.is_array() && band.size() == 2) {
    band_lo = number_at(band, 0);
    band_hi = number_at(band, 1);
  }
  std::map<uint64_t, std::pair<uint64_t, bool>> flagged;  // first batch -> (batches, error)
  for (const auto& r : ranks) {
    for (std::size_t i = 0; i < r.points(); ++i) {
      end = std::max(end, r.at("batch", i) + std::max<uint64_t>(r.at("batches", i), 1));
      widen(number_at(r.col(p.lo_key), i));
      widen(number_at(r.col(p.hi_key), i));
      if (r.at("errors", i) || r.at("warnings", i)) {
        auto& f = flagged[r.at("batch", i)];
        f.first = std::max<uint64_t>(r.at("batches", i), 1);
        f.second = f.second || r.at("errors", i) > 0;
      }
    }
  }
  if (lo) {
    widen(band_lo);
    widen(band_hi);
  }
  if (p.bars && lo) widen(0.0);
  std::ostringstream s;
  s << "<figure class=\"plot\" id=\"" << p.id << "\"><figcaption>" << xml_escape(p.caption) << "</figcaption>"
    << "<svg viewBox=\"0 0 1000 150\" role=\"img\" aria-label=\"" << xml_escape(p.caption) << "\">";
  auto x = [&](double batch) { return left + (right - left) * batch / static_cast<double>(end); };
  for (const auto& [first, f] : flagged) {
    const double x0 = x(static_cast<double>(first)), x1 = x(static_cast<double>(first + f.first));
    s << "<rect class=\"" << (f.second ? "hl-error" : "hl-warning") << "\" x=\"" << px(x0) << "\" y=\"" << px(top) << "\" width=\""
      << px(std::max(2.0, x1 - x0)) << "\" height=\"" << px(bottom - top) << "\" fill=\"" << (f.second ? "#dc2626" : "#f59e0b")
      << "\" fill-opacity=\"0.2\"/>";
  }
  s << "<rect x=\"" << px(left) << "\" y=\"" << px(top) << "\" width=\"" << px(right - left) << "\" height=\"" << px(bottom - top)
    << "\" fill=\"none\" stroke=\"#d1d5db\"/>";
  if (!lo) {
    s << "<text x=\"500\" y=\"72\" class=\"lbl\" text-anchor=\"middle\">no values in this scan</text></svg></figure>";
    return s.str();
  }
  double y_lo = *lo, y_hi = *hi;
  if (y_hi - y_lo < 1e-12) {
    const double pad = std::max(1.0, std::fabs(y_hi) * 0.1);
    y_lo -= pad;
    y_hi += pad;
  }
  const double span = y_hi - y_lo;
  y_lo -= span * 0.05;
  y_hi += span * 0.05;
  auto y = [&](double v) { return bottom - (bottom - top) * (v - y_lo) / (y_hi - y_lo); };
  if (band_lo || band_hi) {
    const double b0 = band_hi ? y(*band_hi) : top, b1 = band_lo ? y(*band_lo) : bottom;
    s << "<rect class=\"band\" x=\"" << px(left) << "\" y=\"" << px(b0) << "\" width=\"" << px(right - left) << "\" height=\""
      << px(std::max(0.0, b1 - b0)) << "\" fill=\"#16a34a\" fill-opacity=\"0.08\" stroke=\"#16a34a\" stroke-dasharray=\"4 3\"/>";
  }
  for (std::size_t k = 0; k < ranks.size() && k < kMaxPlotRanks; ++k) {
    const RankSeries& r = ranks[k];
    const char* color = kRankColors[k];
    // Runs of points with values; a missing value breaks the line.
    std::vector<std::vector<std::pair<double, std::pair<double, double>>>> runs(1);
    if (p.bars) {
      for (std::size_t i = 0; i < r.points(); ++i) {
        const auto v = number_at(r.col(p.hi_key), i);
        if (!v || *v <= 0) continue;
        const double x0 = x(static_cast<double>(r.at("batch", i)));
        const double x1 = x(static_cast<double>(r.at("batch", i) + std::max<uint64_t>(r.at("batches", i), 1)));
        s << "<rect class=\"bar\" x=\"" << px(x0) << "\" y=\"" << px(y(*v)) << "\" width=\"" << px(std::max(1.5, x1 - x0))
          << "\" height=\"" << px(std::max(1.0, y(0) - y(*v))) << "\" fill=\"" << color << "\"/>";
      }
      continue;
    }
    for (std::size_t i = 0; i < r.points(); ++i) {
      const auto a = number_at(r.col(p.lo_key), i), b = number_at(r.col(p.hi_key), i);
      const double cx = x(static_cast<double>(r.at("batch", i)) + static_cast<double>(std::max<uint64_t>(r.at("batches", i), 1)) / 2);
      if (!a || !b) {
        if (!runs.back().empty()) runs.emplace_back();
        if (p.mark_no_value && r.at("nonfinite", i) > 0) {
          s << "<path class=\"no-value\" d=\"M" << px(cx) << " " << px(top + 9) << " l-5 -8 h10 z\" fill=\"#dc2626\"><title>batch "
            << r.at("batch", i) << ": no finite value</title></path>";
        }
        continue;
      }
      runs.back().push_back({cx, {y(*a), y(*b)}});
    }
    for (const auto& run : runs) {
      if (run.empty()) continue;
      if (run.size() == 1) {
        s << "<circle cx=\"" << px(run[0].first) << "\" cy=\"" << px(run[0].second.second) << "\" r=\"2\" fill=\"" << color << "\"/>";
        continue;
      }
      bool envelope = false;
      for (const auto& pt : run) envelope = envelope || std::fabs(pt.second.first - pt.second.second) > 0.05;
      std::ostringstream upper, lower;
      for (const auto& pt : run) upper << px(pt.first) << "," << px(pt.second.second) << " ";
      for (auto it = run.rbegin(); it != run.rend(); ++it) lower << px(it->first) << "," << px(it->second.first) << " ";
      if (envelope) {
        s << "<polygon points=\"" << upper.str() << lower.str() << "\" fill=\"" << color << "\" fill-opacity=\"0.25\" stroke=\"none\"/>";
      }
      s << "<polyline points=\"" << upper.str() << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.2\"/>";
      if (envelope) {
        s << "<polyline points=\"" << lower.str() << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.2\"/>";
      }
    }
  }
  s << "<text x=\"" << px(left - 6) << "\" y=\"" << px(top + 8) << "\" class=\"lbl\" text-anchor=\"end\">" << label(*hi)
    << "</text><text x=\"" << px(left - 6) << "\" y=\"" << px(bottom) << "\" class=\"lbl\" text-anchor=\"end\">" << label(*lo)
    << "</text><text x=\"" << px(left) << "\" y=\"143\" class=\"lbl\">batch 0</text><text x=\"" << px(right) << "\" y=\"143\" class=\"lbl\" "
    << "text-anchor=\"end\">batch " << end - 1 << "</text></svg></figure>";
  return s.str();
}

}  // namespace

std::string plots_html(const Json& report) {
  const std::vector<RankSeries> ranks = series_ranks(report);
  if (ranks.empty()) return "<p>This report has no per-batch statistics (it was written before batchcheck kept them).</p>";
  const Json& series = report["series"];
  const uint64_t bucket = u64(series, "bucket", 1);
  const Json band = series.value("band", Json());
  std::string band_text = "no bounds";
  if (band.is_array() && band.size() == 2) {
    auto end_text = [](const Json& v) { return v.is_number() ? format_number(v.get<double>()) : std::string("∞"); };
    band_text = "[" + (band[0].is_number() ? end_text(band[0]) : "-∞") + ", " + end_text(band[1]) + "]";
  }
  std::ostringstream s;
  s << "<p class=\"muted\">"
    << (bucket > 1 ? "Each point summarizes " + std::to_string(bucket) + " consecutive batches (their minimum and maximum). "
                   : std::string("One point per batch. "))
    << "Shaded columns: batches with an error (red) or a warning (orange).";
  if (ranks.size() > 1) {
    s << " Ranks:";
    for (std::size_t k = 0; k < ranks.size() && k < kMaxPlotRanks; ++k) {
      s << " <span class=\"swatch\" style=\"background:" << kRankColors[k] << "\"></span>" << ranks[k].rank;
    }
    if (ranks.size() > kMaxPlotRanks) s << " (" << ranks.size() - kMaxPlotRanks << " more not drawn)";
  }
  s << "</p>";
  s << plot_svg({"plot-size", "Batch size (samples)", "size_min", "size_max"}, ranks, band);
  s << plot_svg({"plot-prediction", "Prediction: smallest and largest finite value, against the loss contract " + band_text,
                 "pred_min", "pred_max", true, true},
                ranks, band);
  s << plot_svg({"plot-nonfinite", "Non-finite prediction values (NaN, Inf)", "nonfinite", "nonfinite", false, false, true}, ranks, band);
  s << plot_svg({"plot-loss", "Loss (batches whose loss was computed)", "loss_min", "loss_max"}, ranks, band);
  return s.str();
}

}  // namespace batchcheck
