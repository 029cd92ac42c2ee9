// BpeModel: the "model" section of a tokenizer.json of type BPE (vocab + ranked merges), and
// the merge of one pre-tokenized word into token ids, as Hugging Face `tokenizers` does it.
//
// Merging: the word starts as one symbol per character; the adjacent pair with the lowest
// merge rank (ties: leftmost) is merged repeatedly until no pair has a rank. Symbols form a
// linked list and candidate pairs sit in a min-heap, so a word of n characters costs
// O(n log n), not O(n^2) per word. Results for words shorter than kMaxCachedWordBytes are
// cached (up to kCacheCapacity words; once full, new words are not cached).
//
// Supported fields: vocab, merges ("a b" strings or [a, b] pairs), unk_token, fuse_unk,
// byte_fallback, ignore_merges. dropout (other than null/0), continuing_subword_prefix and
// end_of_word_suffix are UNIMPLEMENTED, naming the field.
//
// Thread-safety: Tokenize may run concurrently; the cache has its own lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace mlaserve::model {

// A hash map from std::string that std::string_view can look up without a copy (absl's
// own transparent hashing takes absl::string_view, which is not std::string_view here).
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
struct StringViewEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};
template <typename V>
using StringMap = absl::flat_hash_map<std::string, V, StringViewHash, StringViewEq>;

class BpeModel {
 public:
  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kCacheCapacity = 10000;

  // Parses tokenizer.json's "model" object.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model);

  // Appends the ids of `word` (one pre-tokenized word) to `ids`.
  void Tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Every (token, id) of the vocabulary.
  const StringMap<int32_t>& vocab() const { return vocab_; }

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  // The initial symbols of a word (characters looked up in the vocab, with byte fallback and
  // unknown-token handling), then all merges.
  std::vector<int32_t> MergeWord(std::string_view word) const;
  void MergeAll(std::vector<int32_t>* symbols) const;

  StringMap<int32_t> vocab_;
  absl::flat_hash_map<uint64_t, MergeTarget> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  mutable absl::Mutex cache_mu_;
  mutable StringMap<std::vector<int32_t>> cache_
      ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace mlaserve::model
