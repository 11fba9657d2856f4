#pragma once
// The pictures of the HTML report, as inline SVG: the batch strip (each rank's batches as
// the loader delivers them, the tail batch marked, padded and dropped samples shown, failing
// batches coloured) and the per-batch plots of the report's `series` (batch size, prediction
// range against the loss contract's band, non-finite values, loss), failing batches
// highlighted. Pure functions of the JSON report; bounded in size whatever its length.
#include <string>

#include <nlohmann/json.hpp>

namespace batchcheck {

// <svg id="strip">, or a sentence when the report has no geometry.
std::string strip_svg(const nlohmann::ordered_json& report);

// The figures of the per-batch plots (ids plot-size, plot-prediction, plot-nonfinite,
// plot-loss), or a sentence when the report has no series (an older report).
std::string plots_html(const nlohmann::ordered_json& report);

}  // namespace batchcheck
