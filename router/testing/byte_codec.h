// ByteCodec: a TextCodec for tests. Token id b in [0, 256) is the byte b; kBos and kEos are
// special tokens that render as "<bos>" / "<eos>" unless skip_special_tokens. Encode prepends
// kBos. The detokenizer holds bytes of incomplete UTF-8 characters like the real one.
#pragma once

#include "router/text_codec.h"

namespace mlaserve::router::testing {

class ByteCodec final : public TextCodec {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int32_t kVocabSize = 300;

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  // The bytes as ids; "<bos>" and "<eos>" written in the text are kBos / kEos.
  absl::StatusOr<std::vector<int32_t>> EncodeVerbatim(std::string_view text) const override;
  std::unique_ptr<StreamingDetokenizer> NewDetokenizer(std::span<const int32_t> prompt_ids,
                                                       bool skip_special_tokens) const override;
  // Byte b for ids below 256, "<bos>" / "<eos>", nullopt for the rest.
  std::optional<std::string> TokenBytes(int32_t id) const override;
};

// Token ids for `text` without BOS (what a fake worker "generates").
std::vector<int32_t> BytesToIds(std::string_view text);

}  // namespace mlaserve::router::testing
