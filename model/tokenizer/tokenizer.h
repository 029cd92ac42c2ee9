// Tokenizer: a checkpoint's tokenizer, giving the ids its own Python tokenizer gives. Two kinds:
//   * tokenizer.json (DeepSeek's checkpoints): byte-level BPE as Hugging Face `tokenizers` runs
//     it (below);
//   * tiktoken.model + tokenizer_config.json (Moonshot's Moonlight and Kimi-K2): the tiktoken
//     BPE of their TikTokenTokenizer class (tiktoken_tokenizer.h says what it does).
// FromModelDir picks the one the checkpoint has; everything else (the id table, special and
// added tokens, Decode, TokenBytes) is the same for both. Only the text encoder differs
// (TextEncoder, text_encoder.h).
//
// tokenizer.json's encode pipeline, as in `tokenizers`:
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
#include "model/tokenizer/text_encoder.h"

namespace mlaserve::model {

class Tokenizer {
 public:
  // The checkpoint's tokenizer: <model_dir>/tokenizer.json when present, else
  // <model_dir>/tiktoken.model with tokenizer_config.json (required then). NOT_FOUND naming
  // both files when there is neither; other errors as FromFile / FromTiktoken, prefixed with
  // the file.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromModelDir(const std::string& model_dir);

  // A Moonshot tiktoken tokenizer from the contents of tiktoken.model and tokenizer_config.json.
  // INVALID_ARGUMENT naming the line or field for malformed files, a special token name that
  // is not in the reserved block, an added_tokens_decoder id outside it; UNIMPLEMENTED for a
  // tokenizer_class / auto_map tokenizer other than Moonshot's TikTokenTokenizer (its pattern
  // and special-token rules are the only ones implemented). (tiktoken_tokenizer.cc)
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromTiktoken(std::string_view tiktoken_model,
                                                                 std::string_view tokenizer_config_json);

  // Loads `tokenizer_json_path` and, when present, tokenizer_config.json in the same folder.
  // NOT_FOUND if the file is missing; INVALID_ARGUMENT naming the field for a malformed file;
  // UNIMPLEMENTED naming the component for a feature this implementation does not have.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& tokenizer_json_path);

  // From file contents. `tokenizer_config_json` may be empty (no config).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view tokenizer_json, std::string_view tokenizer_config_json = "");

  // INVALID_ARGUMENT with the byte offset if `text` is not valid UTF-8. Special tokens written
  // in the text become their ids. add_special_tokens adds what the checkpoint's class adds
  // (tokenizer.json: BOS per its post-processor / tokenizer_config.json; tiktoken: nothing).
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
  // What skip_special_tokens drops. tokenizer.json: added tokens marked special. tiktoken:
  // transformers' all_special_ids (bos, eos, unk, pad, additional_special_tokens).
  bool IsSpecial(int32_t id) const;
  // tokenizer.json's added_tokens, special or not (DeepSeek's <think>, tool-call markers);
  // tiktoken: every id of the special block, named or reserved. Never text a model writes.
  bool IsAddedToken(int32_t id) const;

  // From tokenizer_config.json's bos_token / eos_token when given; otherwise DeepSeek's
  // "<｜begin▁of▁sentence｜>" / "<｜end▁of▁sentence｜>" if the vocabulary has them
  // (tiktoken: the class's defaults "[BOS]" / "[EOS]").
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }

 private:
  Tokenizer() = default;
  absl::Status LoadPostProcessor(const nlohmann::json& j, const std::string& path);
  absl::Status ApplyTokenizerConfig(const nlohmann::json& config);

  // Text to ids (no prefix / suffix ids); set once by the factory.
  std::unique_ptr<TextEncoder> encoder_;

  // Indexed by id; ids with no token have has_token false.
  struct IdInfo {
    std::string token;
    std::string bytes;  // what the decoder turns the token into
    bool has_token = false;
    bool special = false;
    bool added = false;  // from added_tokens / the tiktoken special block
  };
  std::vector<IdInfo> id_to_token_;

  // Ids the post-processor puts around the sequence when add_special_tokens is true.
  std::vector<int32_t> prefix_ids_;
  std::vector<int32_t> suffix_ids_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
};

}  // namespace mlaserve::model
