#include "model/tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/tokenizer_json.h"
#include "model/tokenizer/utf8.h"

namespace mlaserve::model {
namespace {

using tokenizer_json::BoolField;
using tokenizer_json::Json;
using tokenizer_json::StringField;

constexpr std::string_view kDeepseekBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kDeepseekEos = "<｜end▁of▁sentence｜>";

absl::StatusOr<Json> ParseJson(std::string_view text, const std::string& what) {
  // nlohmann::json throws on syntax errors; the exception stays inside this function.
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not valid JSON: ", e.what()));
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return std::move(ss).str();
}

// Normalizers that leave text unchanged: null, or a Sequence of such.
absl::Status CheckIdentityNormalizer(const Json& j, const std::string& path) {
  if (j.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, StringField(j, "type", path));
  if (type == "Sequence") {
    auto list = j.find("normalizers");
    if (list == j.end() || !list->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: ", path, ".normalizers must be an array"));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(CheckIdentityNormalizer((*list)[i], absl::StrCat(path, ".normalizers[", i, "]")));
    }
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("tokenizer.json: ", path, ".type is \"", type,
                   "\"; only null or an empty Sequence normalizer is supported"));
}

// The decoder must be ByteLevel (alone or as the only element of a Sequence).
absl::Status CheckDecoder(const Json& j) {
  const Json* d = &j;
  if (d->is_object() && d->value("type", "") == "Sequence") {
    auto list = d->find("decoders");
    if (list != d->end() && list->is_array() && list->size() == 1) d = &(*list)[0];
  }
  if (d->is_object() && d->value("type", "") == "ByteLevel") return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      "tokenizer.json: decoder is ", j.dump(), "; only the ByteLevel decoder is supported"));
}

// A token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> ConfigToken(const Json& config, const std::string& key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

// tokenizer.json's encoder: added tokens cut out, the rest pre-tokenized and BPE-merged.
class HfBpeEncoder final : public TextEncoder {
 public:
  HfBpeEncoder(std::unique_ptr<BpeModel> model, AddedVocabulary added, PreTokenizer pre_tokenizer)
      : model_(std::move(model)), added_(std::move(added)), pre_tokenizer_(std::move(pre_tokenizer)) {
    for (const AddedToken& t : added_.tokens()) added_token_ids_.emplace(t.content, t.id);
  }

  absl::Status Encode(std::string_view text, std::vector<int32_t>* ids) const override {
    std::vector<TextSegment> raw;
    RETURN_IF_ERROR(added_.Split(text, /*normalized_pass=*/false, &raw));
    std::vector<TextSegment> segments;
    for (const TextSegment& s : raw) {
      if (s.token_id) {
        segments.push_back(s);
      } else {
        RETURN_IF_ERROR(added_.Split(s.text, /*normalized_pass=*/true, &segments));
      }
    }
    std::vector<std::string> words;
    for (const TextSegment& s : segments) {
      if (s.token_id) {
        ids->push_back(*s.token_id);
        continue;
      }
      words.clear();
      RETURN_IF_ERROR(pre_tokenizer_.Split(s.text, &words));
      for (const std::string& w : words) model_->Tokenize(w, ids);
    }
    return absl::OkStatus();
  }

  std::optional<int32_t> TokenId(std::string_view token) const override {
    if (auto it = added_token_ids_.find(token); it != added_token_ids_.end()) return it->second;
    return model_->TokenToId(token);
  }

  const BpeModel& model() const { return *model_; }
  const AddedVocabulary& added() const { return added_; }

 private:
  std::unique_ptr<BpeModel> model_;
  AddedVocabulary added_;
  PreTokenizer pre_tokenizer_;
  StringMap<int32_t> added_token_ids_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromModelDir(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const std::string json_path = (dir / "tokenizer.json").string();
  const std::string tiktoken_path = (dir / "tiktoken.model").string();
  const std::string config_path = (dir / "tokenizer_config.json").string();
  std::error_code ec;
  if (std::filesystem::exists(json_path, ec)) return FromFile(json_path);
  if (!std::filesystem::exists(tiktoken_path, ec)) {
    return absl::NotFoundError(absl::StrCat(model_dir, " has no tokenizer (neither tokenizer.json nor ",
                                            "tiktoken.model)"));
  }
  if (!std::filesystem::exists(config_path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        tiktoken_path, " needs tokenizer_config.json beside it (its added_tokens_decoder, "
                       "bos_token and eos_token name the special tokens)"));
  }
  ASSIGN_OR_RETURN(const std::string model_text, ReadFile(tiktoken_path));
  ASSIGN_OR_RETURN(const std::string config_text, ReadFile(config_path));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = FromTiktoken(model_text, config_text);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(), absl::StrCat(tiktoken_path, ": ", tok.status().message()));
  }
  return tok;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  std::string config;
  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    ASSIGN_OR_RETURN(config, ReadFile(config_path.string()));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = FromJson(text, config);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(), absl::StrCat(path, ": ", tok.status().message()));
  }
  return tok;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                              std::string_view config_json) {
  ASSIGN_OR_RETURN(const Json j, ParseJson(tokenizer_json, "tokenizer.json"));
  if (!j.is_object()) return absl::InvalidArgumentError("tokenizer.json must be a JSON object");
  auto tok = std::unique_ptr<Tokenizer>(new Tokenizer());

  ASSIGN_OR_RETURN(const Json* model_json, tokenizer_json::Field(j, "model", "tokenizer.json"));
  ASSIGN_OR_RETURN(std::unique_ptr<BpeModel> model, BpeModel::FromJson(*model_json));
  ASSIGN_OR_RETURN(AddedVocabulary added, AddedVocabulary::FromJson(j.value("added_tokens", Json())));
  RETURN_IF_ERROR(CheckIdentityNormalizer(j.value("normalizer", Json()), "normalizer"));
  ASSIGN_OR_RETURN(PreTokenizer pre_tokenizer, PreTokenizer::FromJson(j.value("pre_tokenizer", Json())));
  RETURN_IF_ERROR(CheckDecoder(j.value("decoder", Json())));
  auto encoder = std::make_unique<HfBpeEncoder>(std::move(model), std::move(added), std::move(pre_tokenizer));

  // The id table: model vocabulary, then added tokens (which take precedence for an id both
  // name, as in `tokenizers`' id_to_token).
  size_t size = 0;
  for (const auto& [token, id] : encoder->model().vocab()) size = std::max(size, size_t(id) + 1);
  for (const AddedToken& t : encoder->added().tokens()) size = std::max(size, size_t(t.id) + 1);
  tok->id_to_token_.resize(size);
  for (const auto& [token, id] : encoder->model().vocab()) {
    tok->id_to_token_[id].token = token;
    tok->id_to_token_[id].has_token = true;
  }
  for (const AddedToken& t : encoder->added().tokens()) {
    IdInfo& info = tok->id_to_token_[t.id];
    info.token = t.content;
    info.has_token = true;
    info.special = t.special;
    info.added = true;
  }
  tok->encoder_ = std::move(encoder);
  for (IdInfo& info : tok->id_to_token_) {
    if (info.has_token) info.bytes = byte_level::DecodeToken(info.token);
  }

  RETURN_IF_ERROR(tok->LoadPostProcessor(j.value("post_processor", Json()), "post_processor"));
  tok->bos_id_ = tok->TokenId(kDeepseekBos);
  tok->eos_id_ = tok->TokenId(kDeepseekEos);
  if (!config_json.empty()) {
    ASSIGN_OR_RETURN(const Json config, ParseJson(config_json, "tokenizer_config.json"));
    RETURN_IF_ERROR(tok->ApplyTokenizerConfig(config));
  }
  return tok;
}

absl::Status Tokenizer::LoadPostProcessor(const Json& j, const std::string& path) {
  if (j.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, StringField(j, "type", path));
  if (type == "ByteLevel") return absl::OkStatus();  // adjusts offsets only
  if (type == "Sequence") {
    auto list = j.find("processors");
    if (list == j.end() || !list->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: ", path, ".processors must be an array"));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(LoadPostProcessor((*list)[i], absl::StrCat(path, ".processors[", i, "]")));
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.json: ", path, ".type is \"", type,
                     "\"; supported post-processors are TemplateProcessing, ByteLevel, Sequence"));
  }
  // single: [{"SpecialToken": {"id": name}} ..., {"Sequence": {"id": "A"}}, ...]; each name's
  // ids come from special_tokens[name].ids. A later processor in a Sequence wraps the result
  // of an earlier one.
  auto single = j.find("single");
  auto specials = j.find("special_tokens");
  if (single == j.end() || !single->is_array() || specials == j.end() || !specials->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.json: ", path, " (TemplateProcessing) needs \"single\" and \"special_tokens\""));
  }
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& piece = (*single)[i];
    const std::string piece_path = absl::StrCat(path, ".single[", i, "]");
    if (piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", "") != "A" || seen_sequence) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenizer.json: ", piece_path, " is ", piece.dump(),
            "; a single-sequence template has exactly one sequence, $A"));
      }
      seen_sequence = true;
      continue;
    }
    auto special = piece.find("SpecialToken");
    if (special == piece.end() || !special->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: ", piece_path, " is ", piece.dump()));
    }
    ASSIGN_OR_RETURN(const std::string name, StringField(*special, "id", piece_path));
    auto entry = specials->find(name);
    if (entry == specials->end() || !entry->contains("ids") || !(*entry)["ids"].is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", piece_path, " names \"",
                                                     name, "\", which ", path,
                                                     ".special_tokens does not define"));
    }
    for (const Json& id : (*entry)["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size()) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", path,
                                                       ".special_tokens[\"", name, "\"] has id ",
                                                       id.dump(), " outside the vocabulary"));
      }
      (seen_sequence ? suffix : prefix).push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (!seen_sequence) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: ", path, ".single has no {\"Sequence\": {\"id\": \"A\"}}"));
  }
  prefix.insert(prefix.end(), prefix_ids_.begin(), prefix_ids_.end());
  prefix_ids_ = std::move(prefix);
  suffix_ids_.insert(suffix_ids_.end(), suffix.begin(), suffix.end());
  return absl::OkStatus();
}

absl::Status Tokenizer::ApplyTokenizerConfig(const Json& config) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError("tokenizer_config.json must be a JSON object");
  }
  std::optional<int32_t> bos, eos;
  for (auto [key, slot] : {std::pair{"bos_token", &bos}, std::pair{"eos_token", &eos}}) {
    std::optional<std::string> name = ConfigToken(config, key);
    if (!name) continue;
    *slot = TokenId(*name);
    if (!*slot) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer_config.json: ", key, " \"", *name, "\" is not in the vocabulary"));
    }
  }
  if (bos) bos_id_ = bos;
  if (eos) eos_id_ = eos;

  const std::string cls = config.value("tokenizer_class", "");
  if (cls != "LlamaTokenizerFast" && cls != "LlamaTokenizer") return absl::OkStatus();
  // transformers' Llama tokenizers replace the post-processor with "[bos] $A [eos]".
  ASSIGN_OR_RETURN(const bool add_bos, BoolField(config, "add_bos_token", true, "tokenizer_config"));
  ASSIGN_OR_RETURN(const bool add_eos, BoolField(config, "add_eos_token", false, "tokenizer_config"));
  if ((add_bos && !bos) || (add_eos && !eos)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer_config.json: add_", add_bos && !bos ? "bos" : "eos",
        "_token is true but no ", add_bos && !bos ? "bos" : "eos", "_token is given"));
  }
  prefix_ids_.clear();
  suffix_ids_.clear();
  if (add_bos) prefix_ids_.push_back(*bos);
  if (add_eos) suffix_ids_.push_back(*eos);
  return absl::OkStatus();
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view token) const {
  return encoder_->TokenId(token);
}

std::optional<std::string_view> Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !id_to_token_[id].has_token) return std::nullopt;
  return id_to_token_[id].token;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && id_to_token_[id].special;
}

bool Tokenizer::IsAddedToken(int32_t id) const {
  return id >= 0 && id < vocab_size() && id_to_token_[id].added;
}

std::optional<std::string_view> Tokenizer::TokenBytes(int32_t id, bool skip_special_tokens) const {
  if (id < 0 || id >= vocab_size() || !id_to_token_[id].has_token) return std::nullopt;
  const IdInfo& info = id_to_token_[id];
  if (skip_special_tokens && info.special) return std::string_view();
  return std::string_view(info.bytes);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       bool add_special_tokens) const {
  if (std::optional<size_t> bad = utf8::FirstInvalidByte(text)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "text to encode is not valid UTF-8: byte 0x",
        absl::Hex(static_cast<uint8_t>(text[*bad]), absl::kZeroPad2), " at offset ", *bad,
        " of ", text.size()));
  }
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  RETURN_IF_ERROR(encoder_->Encode(text, &ids));
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::optional<std::string_view> b = TokenBytes(ids[i], skip_special_tokens);
    if (!b) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " has no token; vocab size is ",
                                                     vocab_size()));
    }
    bytes.append(*b);
  }
  return utf8::Lossy(bytes);
}

}  // namespace mlaserve::model
