// Tokenizer: byte-level BPE from a checkpoint's tokenizer.json, giving the same ids as
// Hugging Face `tokenizers` (what DeepSeek checkpoints ship and transformers loads).
//
// Encode pipeline, as in `tokenizers`:
//   1. added tokens with normalized=false are cut out of the raw text (AddedVocabulary);
//   2. the rest is normalized (only identity normalizers are supported: null or an empty
//      Sequence, which is what DeepSeek-V2/V3/V3.2 use) and added tokens with
//      normalized=true are cut out;
//   3. each remaining piece is pre-tokenized into words (PreTokenizer: Split regexes,
//      ByteLevel, Digits) and each word is merged by BPE (BpeModel);
//   4. with add_special_tokens, the post-processor's tokens are added around the ids.
// Decode maps each id to its token, turns byte-level characters back into bytes (the
// ByteLevel decoder), concatenates, and replaces invalid UTF-8 by U+FFFD exactly as
// `tokenizers` does. Special tokens are rendered unless skip_special_tokens.
//
// Special tokens on encode: tokenizer.json's post_processor (TemplateProcessing, ByteLevel or
// a Sequence of them). DeepSeek's tokenizer.json has only a ByteLevel post-processor; its BOS
// comes from tokenizer_config.json, whose tokenizer_class LlamaTokenizerFast makes
// transformers prepend bos_token (add_bos_token, default true) and append eos_token
// (add_eos_token, default false). FromFile reads tokenizer_config.json beside tokenizer.json
// and does the same, so Encode(text, true) starts with BOS as transformers 4.x does.
// (transformers 5.x rebuilds this tokenizer as a SentencePiece-style Llama tokenizer and
// gives different ids; mlaserve follows tokenizer.json, the checkpoint's own definition.)
//
// Thread-safety: all methods are const and may run concurrently (the BPE word cache has its
// own lock).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/tokenizer/added_vocabulary.h"
#include "model/tokenizer/bpe.h"
#include "model/tokenizer/pretokenizer.h"

namespace mlaserve::model {

class Tokenizer {
 public:
  // Loads `tokenizer_json_path` and, when present, tokenizer_config.json in the same folder.
  // NOT_FOUND if the file is missing; INVALID_ARGUMENT naming the field for a malformed file;
  // UNIMPLEMENTED naming the component for a feature this implementation does not have.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& tokenizer_json_path);

  // From file contents. `tokenizer_config_json` may be empty (no config).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view tokenizer_json, std::string_view tokenizer_config_json = "");

  // INVALID_ARGUMENT with the byte offset if `text` is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special_tokens) const;

  // INVALID_ARGUMENT naming the id if an id has no token.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids,
                                     bool skip_special_tokens) const;

  // The bytes token `id` decodes to (before UTF-8 repair), or nullopt for an id with no
  // token. For a special token with skip_special_tokens, the empty string.
  std::optional<std::string_view> TokenBytes(int32_t id, bool skip_special_tokens) const;

  // One past the largest id (model vocab and added tokens), i.e. the embedding rows needed.
  int vocab_size() const { return static_cast<int>(id_to_token_.size()); }
  std::optional<int32_t> TokenId(std::string_view token) const;
  std::optional<std::string_view> IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // tokenizer.json's added_tokens, special or not (DeepSeek's <think>, tool-call markers).
  bool IsAddedToken(int32_t id) const;

  // From tokenizer_config.json's bos_token / eos_token when given; otherwise DeepSeek's
  // "<｜begin▁of▁sentence｜>" / "<｜end▁of▁sentence｜>" if the vocabulary has them.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }

 private:
  Tokenizer() = default;
  absl::Status LoadPostProcessor(const nlohmann::json& j, const std::string& path);
  absl::Status ApplyTokenizerConfig(const nlohmann::json& config);
  absl::Status EncodeText(std::string_view text, std::vector<int32_t>* ids) const;

  std::unique_ptr<BpeModel> model_;
  AddedVocabulary added_;
  PreTokenizer pre_tokenizer_;

  // Indexed by id; ids with no token have has_token false.
  struct IdInfo {
    std::string token;
    std::string bytes;  // what the decoder turns the token into
    bool has_token = false;
    bool special = false;
    bool added = false;  // from added_tokens
  };
  std::vector<IdInfo> id_to_token_;
  StringMap<int32_t> added_token_ids_;

  // Ids the post-processor puts around the sequence when add_special_tokens is true.
  std::vector<int32_t> prefix_ids_;
  std::vector<int32_t> suffix_ids_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
};

}  // namespace mlaserve::model
