#pragma once
// The config parser's sections that describe the data pipeline (config_pipeline.cpp):
// model.inputs, the loader (collate, recorded order), and model.inputs against the data's
// fields. Internal to config.cpp.
#include <string>

#include "core/base/json_input.h"
#include "core/config/config.h"

namespace batchcheck {

// `p` against the config file's folder (absolute paths unchanged).
std::string resolve_path(const std::string& base_dir, const std::string& p);

void parse_inputs(const JsonObject& m, ModelConfig& out);
// data.transform of an image folder: {"resize", "interpolation", "center_crop", "normalize"}.
void parse_image_transform(const JsonObject& d, ImageTransform& out);
void parse_loader(const JsonObject& l, const std::string& base, LoaderConfig& out);
// loss.target: which data field is the target (a .pt key, or a field of the .npy map, which
// then leaves the inputs). Before check_fields.
void apply_loss_target(const JsonObject& top, Config& cfg);
// model.inputs against the data's fields, where the config alone says them (.npy files);
// the keys of a .pt file are checked when it is read.
void check_fields(const JsonObject& top, const Config& cfg);

}  // namespace batchcheck
