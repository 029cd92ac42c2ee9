// Moonshot's tiktoken tokenizer (tiktoken_tokenizer.h): the encoder and Tokenizer::FromTiktoken.
#include "model/tokenizer/tiktoken_tokenizer.h"

#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/tokenizer/added_vocabulary.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/regex.h"
#include "model/tokenizer/tiktoken_bpe.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace mlaserve::model {
namespace tiktoken {

const std::string& KimiPattern() {
  // One character of [<classes>&&[^\p{Han}]].
  auto not_han = [](const char* classes) {
    return absl::StrCat("(?:(?!\\p{sc:Han})[", classes, "])");
  };
  const std::string upper = not_han("\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}");
  const std::string lower = not_han("\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}");
  const std::string contraction = "(?i:'s|'t|'re|'ve|'m|'ll|'d)?";
  static const std::string* pattern = new std::string(absl::StrCat(
      "\\p{sc:Han}+",
      "|[^\\r\\n\\p{L}\\p{N}]?", upper, "*", lower, "+", contraction,
      "|[^\\r\\n\\p{L}\\p{N}]?", upper, "+", lower, "*", contraction,
      "|\\p{N}{1,3}",
      "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*",
      "|\\s*[\\r\\n]+",
      "|\\s+(?!\\S)",
      "|\\s+"));
  return *pattern;
}

bool PythonIsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

std::vector<std::string_view> EncodeSubstrings(std::string_view text) {
  std::vector<std::string_view> out;
  // Chunks of kMaxEncodeChars characters, each cut into runs of at most kMaxRunChars
  // characters of one kind (the class's _split_whitespaces_or_nonwhitespaces).
  size_t pos = 0;
  do {
    const size_t chunk_begin = pos;
    size_t chars = 0;
    size_t piece_begin = chunk_begin;
    size_t run_len = 0;
    bool run_is_space = false;
    while (pos < text.size() && chars < kMaxEncodeChars) {
      const size_t at = pos;
      const bool space = PythonIsSpace(utf8::DecodeAt(text, &pos));
      if (chars == 0) run_is_space = space;
      ++chars;
      if (space != run_is_space) {
        run_len = 1;
        run_is_space = space;
      } else if (++run_len > kMaxRunChars) {
        out.push_back(text.substr(piece_begin, at - piece_begin));
        piece_begin = at;
        run_len = 1;
      }
    }
    out.push_back(text.substr(piece_begin, pos - piece_begin));
  } while (pos < text.size());
  return out;
}

}  // namespace tiktoken

namespace {

using Json = nlohmann::json;

constexpr std::string_view kDefaultBos = "[BOS]";
constexpr std::string_view kDefaultEos = "[EOS]";
// The class's additional_special_tokens when tokenizer_config.json gives none.
constexpr std::string_view kDefaultAdditionalSpecial[] = {
    "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
    "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"};
// The tokenizer modules whose TikTokenTokenizer this implements (auto_map's AutoTokenizer).
constexpr std::string_view kKnownModules[] = {"tokenization_kimi.TikTokenTokenizer",
                                              "tokenization_moonshot.TikTokenTokenizer"};

class TiktokenEncoder final : public TextEncoder {
 public:
  TiktokenEncoder(std::unique_ptr<TiktokenBpe> bpe, std::unique_ptr<Regex> pattern,
                  AddedVocabulary specials, StringMap<int32_t> special_ids)
      : bpe_(std::move(bpe)),
        pattern_(std::move(pattern)),
        specials_(std::move(specials)),
        special_ids_(std::move(special_ids)) {}

  absl::Status Encode(std::string_view text, std::vector<int32_t>* ids) const override {
    std::vector<TextSegment> segments;
    for (std::string_view sub : tiktoken::EncodeSubstrings(text)) {
      segments.clear();
      RETURN_IF_ERROR(specials_.Split(sub, /*normalized_pass=*/false, &segments));
      for (const TextSegment& s : segments) {
        if (s.token_id) {
          ids->push_back(*s.token_id);
          continue;
        }
        ASSIGN_OR_RETURN(const std::vector<Regex::Match> pieces, pattern_->FindAll(s.text));
        for (const auto& [begin, end] : pieces) bpe_->Encode(s.text.substr(begin, end - begin), ids);
      }
    }
    return absl::OkStatus();
  }

  std::optional<int32_t> TokenId(std::string_view token) const override {
    // Special names first: the class's encoder map is built in id order, so a special token
    // wins over a base token spelled the same.
    if (auto it = special_ids_.find(token); it != special_ids_.end()) return it->second;
    std::string bytes;
    size_t pos = 0;
    while (pos < token.size()) {
      if (utf8::ScanAt(token, pos).kind != utf8::Step::kValid) return std::nullopt;
      const std::optional<uint8_t> b = byte_level::CharToByte(utf8::DecodeAt(token, &pos));
      if (!b) return std::nullopt;
      bytes.push_back(static_cast<char>(*b));
    }
    return bpe_->Rank(bytes);
  }

 private:
  std::unique_ptr<TiktokenBpe> bpe_;
  std::unique_ptr<Regex> pattern_;
  AddedVocabulary specials_;
  StringMap<int32_t> special_ids_;
};

// A token named in tokenizer_config.json: a string or {"content": ...}; nullopt when absent or
// null.
absl::StatusOr<std::optional<std::string>> ConfigToken(const Json& value, const std::string& where) {
  if (value.is_null()) return std::optional<std::string>();
  if (value.is_string()) return std::optional<std::string>(value.get<std::string>());
  if (value.is_object()) {
    auto content = value.find("content");
    if (content != value.end() && content->is_string()) {
      return std::optional<std::string>(content->get<std::string>());
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", where,
                                                 " must be a string or {\"content\": ...}, got ",
                                                 value.dump()));
}

absl::Status CheckTokenizerClass(const Json& config) {
  const auto cls = config.find("tokenizer_class");
  if (cls == config.end() || !cls->is_string() || cls->get<std::string>() != "TikTokenTokenizer") {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer_config.json: tokenizer_class is ",
        cls == config.end() ? std::string("absent") : cls->dump(),
        "; with tiktoken.model mlaserve implements Moonshot's TikTokenTokenizer only"));
  }
  const auto auto_map = config.find("auto_map");
  if (auto_map == config.end() || !auto_map->is_object()) return absl::OkStatus();
  const auto entry = auto_map->find("AutoTokenizer");
  if (entry == auto_map->end()) return absl::OkStatus();
  const Json& name = entry->is_array() && !entry->empty() ? (*entry)[0] : *entry;
  if (name.is_string()) {
    for (std::string_view known : kKnownModules) {
      if (name.get<std::string>().ends_with(known)) return absl::OkStatus();
    }
  }
  return absl::UnimplementedError(absl::StrCat(
      "tokenizer_config.json: auto_map.AutoTokenizer is ", entry->dump(),
      "; mlaserve implements tokenization_kimi / tokenization_moonshot's TikTokenTokenizer only "
      "(another module may split text with another pattern)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromTiktoken(std::string_view tiktoken_model,
                                                                   std::string_view tokenizer_config_json) {
  Json config;
  try {
    config = Json::parse(tokenizer_config_json.begin(), tokenizer_config_json.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json is not valid JSON: ", e.what()));
  }
  if (!config.is_object()) return absl::InvalidArgumentError("tokenizer_config.json must be a JSON object");
  RETURN_IF_ERROR(CheckTokenizerClass(config));
  ASSIGN_OR_RETURN(std::unique_ptr<TiktokenBpe> bpe, TiktokenBpe::Parse(tiktoken_model));
  const int32_t n_base = bpe->size();
  const int32_t vocab = n_base + tiktoken::kNumReservedSpecialTokens;

  // The special block: names from added_tokens_decoder, else <|reserved_token_ID|>.
  std::vector<std::string> names(tiktoken::kNumReservedSpecialTokens);
  for (int32_t i = 0; i < tiktoken::kNumReservedSpecialTokens; ++i) {
    names[static_cast<size_t>(i)] = absl::StrCat("<|reserved_token_", n_base + i, "|>");
  }
  if (auto decoder = config.find("added_tokens_decoder"); decoder != config.end() && !decoder->is_null()) {
    if (!decoder->is_object()) {
      return absl::InvalidArgumentError("tokenizer_config.json: added_tokens_decoder must be an object");
    }
    for (const auto& [key, value] : decoder->items()) {
      int64_t id = -1;
      const std::string where = absl::StrCat("added_tokens_decoder[\"", key, "\"]");
      if (!absl::SimpleAtoi(key, &id)) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", where, " is not an id"));
      }
      if (id < n_base || id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenizer_config.json: ", where, " is outside the special block ", n_base, "..",
            vocab - 1, " after tiktoken.model's ", n_base,
            " tokens; the TikTokenTokenizer class only names ids there"));
      }
      ASSIGN_OR_RETURN(std::optional<std::string> name, ConfigToken(value, where));
      if (!name || name->empty()) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", where, " has no content"));
      }
      names[static_cast<size_t>(id - n_base)] = *std::move(name);
    }
  }
  StringMap<int32_t> special_ids;
  Json specials_json = Json::array();
  for (int32_t i = 0; i < tiktoken::kNumReservedSpecialTokens; ++i) {
    const std::string& name = names[static_cast<size_t>(i)];
    if (!special_ids.emplace(name, n_base + i).second) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: the special token \"", name,
                                                     "\" names two ids, ", special_ids[name], " and ",
                                                     n_base + i));
    }
    specials_json.push_back({{"id", n_base + i}, {"content", name}, {"special", true}});
  }
  ASSIGN_OR_RETURN(AddedVocabulary specials, AddedVocabulary::FromJson(specials_json));

  // The id table.
  auto tok = std::unique_ptr<Tokenizer>(new Tokenizer());
  tok->id_to_token_.resize(static_cast<size_t>(vocab));
  for (int32_t id = 0; id < n_base; ++id) {
    IdInfo& info = tok->id_to_token_[static_cast<size_t>(id)];
    info.bytes = std::string(bpe->TokenBytes(id));
    info.token = byte_level::Encode(info.bytes);
    info.has_token = true;
  }
  for (int32_t i = 0; i < tiktoken::kNumReservedSpecialTokens; ++i) {
    IdInfo& info = tok->id_to_token_[static_cast<size_t>(n_base + i)];
    info.token = info.bytes = names[static_cast<size_t>(i)];
    info.has_token = true;
    info.added = true;
  }

  // bos / eos (required by the class), unk / pad and additional_special_tokens: each must be a
  // name of the special block (the class looks them up there); together they are what
  // skip_special_tokens drops.
  auto special_id = [&](const std::string& name, const std::string& where) -> absl::StatusOr<int32_t> {
    auto it = special_ids.find(name);
    if (it == special_ids.end()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", where, " \"", name,
                                                     "\" is not a special token (ids ", n_base, "..",
                                                     vocab - 1, ")"));
    }
    return it->second;
  };
  std::vector<int32_t> all_special;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    std::optional<std::string> name;
    if (auto it = config.find(key); it != config.end()) {
      ASSIGN_OR_RETURN(name, ConfigToken(*it, key));
    } else if (key == std::string_view("bos_token")) {
      name = std::string(kDefaultBos);
    } else if (key == std::string_view("eos_token")) {
      name = std::string(kDefaultEos);
    }
    if (!name) continue;
    ASSIGN_OR_RETURN(const int32_t id, special_id(*name, key));
    all_special.push_back(id);
    if (key == std::string_view("bos_token")) tok->bos_id_ = id;
    if (key == std::string_view("eos_token")) tok->eos_id_ = id;
  }
  if (auto it = config.find("additional_special_tokens"); it != config.end() && !it->is_null()) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError("tokenizer_config.json: additional_special_tokens must be a list");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = absl::StrCat("additional_special_tokens[", i, "]");
      ASSIGN_OR_RETURN(std::optional<std::string> name, ConfigToken((*it)[i], where));
      if (!name) continue;
      ASSIGN_OR_RETURN(const int32_t id, special_id(*name, where));
      all_special.push_back(id);
    }
  } else {
    for (std::string_view name : kDefaultAdditionalSpecial) {
      ASSIGN_OR_RETURN(const int32_t id, special_id(std::string(name),
                                                    "additional_special_tokens (the class's default)"));
      all_special.push_back(id);
    }
  }
  for (int32_t id : all_special) tok->id_to_token_[static_cast<size_t>(id)].special = true;

  ASSIGN_OR_RETURN(std::unique_ptr<Regex> pattern, Regex::Compile(tiktoken::KimiPattern()));
  tok->encoder_ = std::make_unique<TiktokenEncoder>(std::move(bpe), std::move(pattern), std::move(specials),
                                                    std::move(special_ids));
  return tok;
}

}  // namespace mlaserve::model
