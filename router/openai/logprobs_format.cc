#include "router/openai/logprobs_format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace mlaserve::router::openai {
namespace {

using Json = nlohmann::ordered_json;

constexpr double kMinLogprob = -9999.0;

double Clamped(float logprob) { return std::max<double>(logprob, kMinLogprob); }

// Characters as Python counts them: every byte that does not continue a UTF-8 sequence.
int64_t CodePoints(const std::string& s) {
  return std::count_if(s.begin(), s.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

void Append(Json& into, const Json& more) {
  for (const auto& item : more) into.push_back(item);
}

}  // namespace

LogprobsFormat::LogprobsFormat(Endpoint endpoint, const TextCodec* codec)
    : endpoint_(endpoint), codec_(codec), all_(Empty()) {}

Json LogprobsFormat::Empty() const {
  if (endpoint_ == Endpoint::kChat) return Json{{"content", Json::array()}};
  return Json{{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
}

std::string TokenString(const TextCodec& codec, int32_t id, Json* bytes) {
  std::optional<std::string> raw = codec.TokenBytes(id);
  if (!raw.has_value()) {
    if (bytes != nullptr) *bytes = nullptr;
    return absl::StrCat("token_id:", id);
  }
  if (bytes != nullptr) {
    *bytes = Json::array();
    for (char c : *raw) bytes->push_back(static_cast<int>(static_cast<unsigned char>(c)));
  }
  return model::utf8::Lossy(*raw);
}

Json PromptLogprobsJson(const TextCodec& codec, std::span<const v1::PromptTokenLogprobs> entries,
                        int top_n) {
  Json out = Json::array();
  for (const v1::PromptTokenLogprobs& e : entries) {
    if (!e.has_logprob()) {
      out.push_back(nullptr);
      continue;
    }
    Json position = Json::object();
    position[std::to_string(e.token_id())] = Json{{"logprob", Clamped(e.logprob())},
                                                  {"rank", e.rank()},
                                                  {"decoded_token", TokenString(codec, e.token_id())}};
    const int kept = std::min(top_n, e.top_logprobs_size());
    for (int k = 0; k < kept; ++k) {
      const v1::TopLogprob& t = e.top_logprobs(k);
      const std::string key = std::to_string(t.token_id());
      if (position.contains(key)) continue;
      position[key] = Json{{"logprob", Clamped(t.logprob())},
                           {"rank", k + 1},
                           {"decoded_token", TokenString(codec, t.token_id())}};
    }
    out.push_back(std::move(position));
  }
  return out;
}

Json LogprobsFormat::AddPrompt(std::span<const v1::PromptTokenLogprobs> entries, int top_n) {
  Json piece = Empty();
  for (const v1::PromptTokenLogprobs& e : entries) {
    const std::string token = TokenString(*codec_, e.token_id());
    piece["tokens"].push_back(token);
    if (!e.has_logprob()) {
      piece["token_logprobs"].push_back(nullptr);
      piece["top_logprobs"].push_back(nullptr);
    } else {
      Json top = Json::object();
      top[token] = Clamped(e.logprob());
      const int kept = std::min(top_n, e.top_logprobs_size());
      for (int k = 0; k < kept; ++k) {
        const std::string alt = TokenString(*codec_, e.top_logprobs(k).token_id());
        if (!top.contains(alt)) top[alt] = Clamped(e.top_logprobs(k).logprob());
      }
      piece["token_logprobs"].push_back(Clamped(e.logprob()));
      piece["top_logprobs"].push_back(std::move(top));
    }
    piece["text_offset"].push_back(text_offset_);
    text_offset_ += CodePoints(token);
  }
  for (auto& [key, value] : piece.items()) Append(all_[key], value);
  return piece;
}

Json LogprobsFormat::Add(std::span<const int32_t> ids,
                         const google::protobuf::RepeatedPtrField<v1::TokenLogprobs>& logprobs) {
  Json piece = Empty();
  const size_t n = std::min<size_t>(ids.size(), logprobs.size());
  for (size_t i = 0; i < n; ++i) {
    const v1::TokenLogprobs& lp = logprobs[static_cast<int>(i)];
    if (endpoint_ == Endpoint::kChat) {
      Json bytes;
      Json entry{{"token", TokenString(*codec_, ids[i], &bytes)}, {"logprob", Clamped(lp.logprob())}};
      entry["bytes"] = std::move(bytes);
      Json top = Json::array();
      for (const v1::TopLogprob& t : lp.top_logprobs()) {
        Json top_bytes;
        Json alt{{"token", TokenString(*codec_, t.token_id(), &top_bytes)},
                 {"logprob", Clamped(t.logprob())}};
        alt["bytes"] = std::move(top_bytes);
        top.push_back(std::move(alt));
      }
      entry["top_logprobs"] = std::move(top);
      piece["content"].push_back(std::move(entry));
      continue;
    }
    const std::string token = TokenString(*codec_, ids[i]);
    Json top = Json::object();
    top[token] = Clamped(lp.logprob());
    for (const v1::TopLogprob& t : lp.top_logprobs()) {
      const std::string alt = TokenString(*codec_, t.token_id());
      if (!top.contains(alt)) top[alt] = Clamped(t.logprob());
    }
    piece["tokens"].push_back(token);
    piece["token_logprobs"].push_back(Clamped(lp.logprob()));
    piece["top_logprobs"].push_back(std::move(top));
    piece["text_offset"].push_back(text_offset_);
    text_offset_ += CodePoints(token);
  }
  for (auto& [key, value] : piece.items()) Append(all_[key], value);
  return piece;
}

}  // namespace mlaserve::router::openai
