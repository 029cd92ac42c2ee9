#include "model/tokenizer/tiktoken_bpe.h"

#include <limits>
#include <queue>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::model {
namespace {

// absl here has its own string_view type.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// The whitespace-separated fields of `line` (Python's bytes.split()).
std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; };
  while (i < line.size()) {
    while (i < line.size() && space(line[i])) ++i;
    const size_t begin = i;
    while (i < line.size() && !space(line[i])) ++i;
    if (i > begin) out.push_back(line.substr(begin, i - begin));
  }
  return out;
}

// A decimal rank of at most 9 digits.
std::optional<int64_t> ParseRank(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TiktokenBpe>> TiktokenBpe::Parse(std::string_view file_text) {
  auto bpe = std::unique_ptr<TiktokenBpe>(new TiktokenBpe());
  std::vector<std::pair<int64_t, std::string>> entries;
  // Lines end at \n, \r\n or \r (Python's bytes.splitlines); empty lines are skipped.
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < file_text.size()) {
    size_t end = file_text.find_first_of("\r\n", pos);
    if (end == std::string_view::npos) end = file_text.size();
    const std::string_view line = file_text.substr(pos, end - pos);
    pos = end + (file_text.compare(end, 2, "\r\n") == 0 ? 2 : 1);
    ++line_no;
    if (line.empty()) continue;
    const std::vector<std::string_view> fields = Fields(line);
    std::string bytes;
    const std::optional<int64_t> rank = fields.size() == 2 ? ParseRank(fields[1]) : std::nullopt;
    if (!rank || !absl::Base64Unescape(Absl(fields[0]), &bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tiktoken.model line ", line_no, " is \"", absl::CHexEscape(Absl(line.substr(0, 80))),
          "\"; each line must be \"<base64 token bytes> <rank>\""));
    }
    entries.emplace_back(*rank, std::move(bytes));
  }
  bpe->bytes_.resize(entries.size());
  std::vector<bool> seen(entries.size(), false);
  for (auto& [rank, bytes] : entries) {
    if (rank >= static_cast<int64_t>(entries.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tiktoken.model has ", entries.size(), " tokens but a rank of ", rank,
          "; ranks must be 0..", entries.size() - 1, " (the special tokens are numbered from ",
          entries.size(), ")"));
    }
    if (seen[static_cast<size_t>(rank)]) {
      return absl::InvalidArgumentError(absl::StrCat("tiktoken.model has rank ", rank, " twice"));
    }
    seen[static_cast<size_t>(rank)] = true;
    if (!bpe->ranks_.emplace(bytes, static_cast<int32_t>(rank)).second) {
      return absl::InvalidArgumentError(absl::StrCat("tiktoken.model has the token \"",
                                                     absl::CHexEscape(Absl(bytes)), "\" twice"));
    }
    bpe->bytes_[static_cast<size_t>(rank)] = std::move(bytes);
  }
  if (entries.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2)) {
    return absl::InvalidArgumentError("tiktoken.model has too many tokens");
  }
  for (int b = 0; b < 256; ++b) {
    if (!bpe->Rank(std::string_view(std::string(1, static_cast<char>(b))))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tiktoken.model has no token for the single byte 0x", absl::Hex(b, absl::kZeroPad2),
          "; every byte must be a token"));
    }
  }
  return bpe;
}

std::optional<int32_t> TiktokenBpe::Rank(std::string_view bytes) const {
  auto it = ranks_.find(bytes);
  if (it == ranks_.end()) return std::nullopt;
  return it->second;
}

void TiktokenBpe::Encode(std::string_view piece, std::vector<int32_t>* ids) const {
  if (std::optional<int32_t> whole = Rank(piece)) {
    ids->push_back(*whole);
    return;
  }
  // Parts as a linked list over byte offsets: part i covers [start[i], start[next[i]]).
  const size_t n = piece.size();
  std::vector<size_t> start(n + 1), next(n + 1), prev(n + 1);
  for (size_t i = 0; i <= n; ++i) {
    start[i] = i;
    next[i] = i + 1;
    prev[i] = i == 0 ? 0 : i - 1;
  }
  std::vector<bool> alive(n + 1, true);
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  // rank[i]: the rank of the bytes of part i joined with the part after it (kNone if none).
  std::vector<int32_t> rank(n + 1, kNone);
  auto pair_rank = [&](size_t i) -> int32_t {
    if (i >= n || next[i] >= n) return kNone;
    return RankOf(piece, start[i], start[next[next[i]]]).value_or(kNone);
  };
  using Entry = std::pair<int32_t, size_t>;  // (rank, part); part order = position order
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (size_t i = 0; i + 1 < n; ++i) {
    rank[i] = pair_rank(i);
    if (rank[i] != kNone) heap.emplace(rank[i], i);
  }
  while (!heap.empty()) {
    const auto [r, i] = heap.top();
    heap.pop();
    if (!alive[i] || rank[i] != r) continue;  // stale entry
    // Merge part i with the part after it.
    const size_t j = next[i];
    alive[j] = false;
    next[i] = next[j];
    if (next[j] <= n) prev[next[j]] = i;
    rank[i] = pair_rank(i);
    if (rank[i] != kNone) heap.emplace(rank[i], i);
    if (i > 0) {
      const size_t p = prev[i];
      rank[p] = pair_rank(p);
      if (rank[p] != kNone) heap.emplace(rank[p], p);
    }
  }
  for (size_t i = 0; i < n; i = next[i]) {
    // Every part is a token: single bytes are, and a merge only makes tokens.
    ids->push_back(*RankOf(piece, start[i], start[next[i]]));
  }
}

}  // namespace mlaserve::model
