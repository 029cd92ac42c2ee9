#include "router/testing/byte_codec.h"

namespace mlaserve::router::testing {
namespace {

// Length of the UTF-8 character whose lead byte is `b` (1 for ASCII and stray bytes).
size_t CharLength(unsigned char b) {
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

class ByteDetokenizer final : public StreamingDetokenizer {
 public:
  explicit ByteDetokenizer(bool skip_special) : skip_special_(skip_special) {}
  std::string Push(int32_t id) override {
    if (id == ByteCodec::kBos || id == ByteCodec::kEos) {
      std::string out = Finish();
      if (!skip_special_) out += id == ByteCodec::kBos ? "<bos>" : "<eos>";
      return out;
    }
    if (id < 0 || id >= 256) return "?";
    pending_.push_back(static_cast<char>(id));
    if (pending_.size() < CharLength(static_cast<unsigned char>(pending_[0]))) return "";
    std::string out = std::move(pending_);
    pending_.clear();
    return out;
  }
  std::string Finish() override {
    std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
    pending_.clear();
    return out;
  }

 private:
  bool skip_special_;
  std::string pending_;
};

}  // namespace

std::vector<int32_t> BytesToIds(std::string_view text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

absl::StatusOr<std::vector<int32_t>> ByteCodec::Encode(std::string_view text) const {
  std::vector<int32_t> ids = {kBos};
  for (int32_t id : BytesToIds(text)) ids.push_back(id);
  return ids;
}

absl::StatusOr<std::vector<int32_t>> ByteCodec::EncodeVerbatim(std::string_view text) const {
  std::vector<int32_t> ids;
  while (!text.empty()) {
    if (text.starts_with("<bos>") || text.starts_with("<eos>")) {
      ids.push_back(text.starts_with("<bos>") ? kBos : kEos);
      text.remove_prefix(5);
    } else {
      ids.push_back(static_cast<unsigned char>(text[0]));
      text.remove_prefix(1);
    }
  }
  return ids;
}

std::optional<std::string> ByteCodec::TokenBytes(int32_t id) const {
  if (id >= 0 && id < 256) return std::string(1, static_cast<char>(id));
  if (id == kBos) return std::string("<bos>");
  if (id == kEos) return std::string("<eos>");
  return std::nullopt;
}

std::unique_ptr<StreamingDetokenizer> ByteCodec::NewDetokenizer(std::span<const int32_t>,
                                                                bool skip_special_tokens) const {
  return std::make_unique<ByteDetokenizer>(skip_special_tokens);
}

}  // namespace mlaserve::router::testing
