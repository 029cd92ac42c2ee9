// config.json's quantization_config, as transformers 5.17's FineGrainedFP8Config reads it (the
// only method served: DeepSeek's block-scaled fp8). Part of the config parser (config.cc); see
// config_reader.h.
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/loader/config.h"
#include "model/loader/config_reader.h"

namespace mlaserve::model::config_internal {

absl::Status ParseQuantization(FieldReader& r, ModelConfig& c) {
  const Json* q = r.Take("quantization_config");
  if (q == nullptr || q->is_null()) return absl::OkStatus();
  if (!q->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: quantization_config must be an object, got ", ShortDump(*q)));
  }
  FieldReader d(*q, "quantization_config");
  std::string method, fmt = "e4m3", activation = "dynamic", scale_fmt;
  RETURN_IF_ERROR(d.String("quant_method", &method, true));
  if (method != "fp8") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: quantization_config.quant_method '", method,
                     "' is not supported; expected fp8"));
  }
  RETURN_IF_ERROR(d.String("fmt", &fmt));
  if (fmt != "e4m3") {
    return absl::InvalidArgumentError(absl::StrCat("config.json: quantization_config.fmt '", fmt,
                                                   "' is not supported; expected e4m3"));
  }
  RETURN_IF_ERROR(d.String("activation_scheme", &activation));
  activation = absl::AsciiStrToLower(activation);  // FineGrainedFP8Config lowercases it
  if (activation != "dynamic") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: quantization_config.activation_scheme '", activation,
                     "' is not supported; expected dynamic"));
  }
  // "float" (f32 scales) or "ue8m0" (powers of two: DeepSeek-V3.1 stores them as f32, which
  // dequantizes the same; a checkpoint storing them as F8_E8M0 is refused by the loader,
  // naming the tensor's dtype). FineGrainedFP8Config raises on any other value.
  RETURN_IF_ERROR(d.String("scale_fmt", &scale_fmt));
  if (!scale_fmt.empty() && scale_fmt != "float" && scale_fmt != "ue8m0") {
    return absl::InvalidArgumentError(absl::StrCat("config.json: quantization_config.scale_fmt '",
                                                   scale_fmt, "' is not supported; expected "
                                                   "float or ue8m0"));
  }
  const Json* block = d.Take("weight_block_size");
  // HF reads a null weight_block_size as per-tensor quantization (one scalar scale per
  // weight), not as the [128, 128] default an absent one takes.
  if (block != nullptr && block->is_null()) {
    return absl::InvalidArgumentError(
        "config.json: quantization_config.weight_block_size is null (per-tensor fp8 scales); "
        "only block-scaled fp8 weights are supported (e.g. [128, 128])");
  }
  if (block != nullptr) {
    if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
        !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 ||
        (*block)[1].get<int64_t>() <= 0 || (*block)[0].get<int64_t>() > 65536 ||
        (*block)[1].get<int64_t>() > 65536) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: quantization_config.weight_block_size must be two positive integers "
          "[out, in], got ",
          ShortDump(*block)));
    }
    c.weight_block_n = static_cast<int>((*block)[0].get<int64_t>());
    c.weight_block_k = static_cast<int>((*block)[1].get<int64_t>());
  }
  // Which modules stay unquantized is visible in the checkpoint's dtypes; the loader goes by
  // them.
  d.Take("modules_to_not_convert");
  d.Take("dequantize");
  // transformers 5.x writes modules_to_convert (modules such as the embedding that HF
  // quantizes beyond the linear layers) into every FineGrainedFP8Config it saves, null by
  // default. HF's fp8 embedding path is not checked against the engine: refuse a list.
  if (const Json* extra = d.Take("modules_to_convert");
      extra != nullptr && !extra->is_null() && !(extra->is_array() && extra->empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: quantization_config.modules_to_convert is ",
                     ShortDump(*extra), "; fp8 modules beyond the linear layers are not "
                     "supported (null or [] is)"));
  }
  if (const std::vector<std::string> unused = d.Unused(); !unused.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: unknown field 'quantization_config.", unused[0], "'"));
  }
  c.fp8_block_weights = true;
  return absl::OkStatus();
}

}  // namespace mlaserve::model::config_internal
