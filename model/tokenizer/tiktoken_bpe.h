// TiktokenBpe: a tiktoken vocabulary (a checkpoint's `tiktoken.model`: one "base64(bytes) rank"
// line per token, as tiktoken's load_tiktoken_bpe reads it) and tiktoken's byte-pair encoding
// of one pre-tokenized piece.
//
// Encoding a piece, as tiktoken's CoreBPE does: a piece that is itself a token is that token;
// otherwise it starts as single bytes and the adjacent pair whose concatenated bytes have the
// lowest rank is merged (ties: leftmost) until no adjacent pair's bytes are a token. Unlike
// tokenizer.json's BPE there is no merge list: a merge's priority is the rank of its result.
// (tiktoken's _byte_pair_merge rescans the parts after every merge, O(n^2) in the piece; this
// keeps candidate pairs in a heap ordered by (rank, position), which picks the same pair.)
//
// The ranks must be 0..n-1 (the Moonshot tokenizer numbers its special tokens from n) and every
// single byte must be a token (tiktoken's encoder indexes single bytes unchecked).
//
// Thread-safety: immutable after Parse; Encode may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/bpe.h"

namespace mlaserve::model {

class TiktokenBpe {
 public:
  // INVALID_ARGUMENT naming the line for a malformed line, a duplicate token or rank, ranks
  // that are not 0..n-1, or a missing single byte.
  static absl::StatusOr<std::unique_ptr<TiktokenBpe>> Parse(std::string_view file_text);

  // Appends the ids of `piece` (one match of the pre-tokenizer; not empty) to `ids`.
  void Encode(std::string_view piece, std::vector<int32_t>* ids) const;

  // Number of tokens (ranks 0..size()-1).
  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  // The bytes of token `rank` (0 <= rank < size()).
  std::string_view TokenBytes(int32_t rank) const { return bytes_[static_cast<size_t>(rank)]; }
  std::optional<int32_t> Rank(std::string_view bytes) const;

 private:
  TiktokenBpe() = default;
  std::optional<int32_t> RankOf(std::string_view piece, size_t begin, size_t end) const {
    return Rank(piece.substr(begin, end - begin));
  }

  StringMap<int32_t> ranks_;
  std::vector<std::string> bytes_;  // indexed by rank
};

}  // namespace mlaserve::model
