#include "model/tokenizer/bpe.h"

#include <cstdio>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/tokenizer/tokenizer_json.h"
#include "model/tokenizer/utf8.h"

namespace mlaserve::model {
namespace {

using tokenizer_json::BoolField;
using tokenizer_json::Json;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", what));
}

// One merge entry as (left, right) token strings, from "a b" or ["a", "b"].
absl::StatusOr<std::pair<std::string, std::string>> ParseMerge(const Json& m, size_t index) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return Bad(absl::StrCat("model.merges[", index, "] is \"", s,
                              "\"; a merge string must be two tokens separated by one space"));
    }
    return std::make_pair(s.substr(0, space), s.substr(space + 1));
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::make_pair(m[0].get<std::string>(), m[1].get<std::string>());
  }
  return Bad(absl::StrCat("model.merges[", index, "] is ", m.dump(),
                          "; expected \"a b\" or [\"a\", \"b\"]"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& model) {
  if (!model.is_object()) return Bad("model must be an object");
  if (auto type = model.find("type"); type != model.end() && *type != "BPE") {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer.json: model.type is ", type->dump(), "; only BPE models are supported"));
  }
  if (auto dropout = model.find("dropout");
      dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return absl::UnimplementedError(absl::StrCat("tokenizer.json: model.dropout is ",
                                                 dropout->dump(), "; only null or 0 is supported"));
  }
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(field);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      return absl::UnimplementedError(absl::StrCat("tokenizer.json: model.", field, " is ",
                                                   it->dump(), "; only null is supported"));
    }
  }

  auto bpe = std::unique_ptr<BpeModel>(new BpeModel());
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    return Bad("model.vocab must be an object mapping token to id");
  }
  bpe->vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX) {
      return Bad(absl::StrCat("model.vocab[\"", it.key(), "\"] is ", it.value().dump(),
                              "; expected a non-negative integer id"));
    }
    bpe->vocab_.emplace(it.key(), static_cast<int32_t>(it.value().get<int64_t>()));
  }

  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) return Bad("model.merges must be an array");
  bpe->merges_.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    ASSIGN_OR_RETURN(auto pair, ParseMerge((*merges)[i], i));
    auto left = bpe->vocab_.find(pair.first);
    auto right = bpe->vocab_.find(pair.second);
    auto merged = bpe->vocab_.find(pair.first + pair.second);
    const std::string* missing = left == bpe->vocab_.end()    ? &pair.first
                                 : right == bpe->vocab_.end() ? &pair.second
                                                              : nullptr;
    if (missing != nullptr) {
      return Bad(absl::StrCat("model.merges[", i, "] (\"", pair.first, " ", pair.second,
                              "\") uses token \"", *missing, "\", which is not in model.vocab"));
    }
    if (merged == bpe->vocab_.end()) {
      return Bad(absl::StrCat("model.merges[", i, "] (\"", pair.first, " ", pair.second,
                              "\") produces \"", pair.first, pair.second,
                              "\", which is not in model.vocab"));
    }
    // A later duplicate replaces an earlier one, as when `tokenizers` builds its merge map.
    bpe->merges_[PairKey(left->second, right->second)] =
        MergeTarget{static_cast<int32_t>(i), merged->second};
  }

  if (auto unk = model.find("unk_token"); unk != model.end() && !unk->is_null()) {
    if (!unk->is_string()) return Bad(absl::StrCat("model.unk_token is ", unk->dump()));
    auto id = bpe->vocab_.find(unk->get<std::string>());
    if (id == bpe->vocab_.end()) {
      return Bad(absl::StrCat("model.unk_token \"", unk->get<std::string>(),
                              "\" is not in model.vocab"));
    }
    bpe->unk_id_ = id->second;
  }
  ASSIGN_OR_RETURN(bpe->fuse_unk_, BoolField(model, "fuse_unk", false, "model"));
  ASSIGN_OR_RETURN(bpe->byte_fallback_, BoolField(model, "byte_fallback", false, "model"));
  ASSIGN_OR_RETURN(bpe->ignore_merges_, BoolField(model, "ignore_merges", false, "model"));
  return bpe;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable) {
    absl::ReaderMutexLock lock(&cache_mu_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> merged = MergeWord(word);
  ids->insert(ids->end(), merged.begin(), merged.end());
  if (cacheable) {
    absl::MutexLock lock(&cache_mu_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(word, std::move(merged));
  }
}

std::vector<int32_t> BpeModel::MergeWord(std::string_view word) const {
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  // A pending unknown-token symbol; with fuse_unk, consecutive unknown characters share one.
  bool pending_unk = false;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t len = utf8::ScanAt(word, pos).length;
    const std::string_view ch = word.substr(pos, len);
    pos += len;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk) symbols.push_back(*unk_id_);
      pending_unk = false;
      symbols.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (char b : ch) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(b));
        auto it = vocab_.find(std::string_view(name));
        if (it == vocab_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == ch.size()) {
        // `tokenizers` leaves a pending unknown symbol in place across byte-fallback tokens.
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_) symbols.push_back(*unk_id_);
      pending_unk = true;
    }
    // Without an unknown token the character is dropped, as in `tokenizers`.
  }
  if (pending_unk) symbols.push_back(*unk_id_);
  MergeAll(&symbols);
  return symbols;
}

void BpeModel::MergeAll(std::vector<int32_t>* symbols) const {
  const int n = static_cast<int>(symbols->size());
  if (n < 2) return;
  std::vector<int32_t>& id = *symbols;
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
    // Min-heap on (rank, pos): lowest rank first, leftmost among equal ranks.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  auto push_pair = [&](int left) {
    const int right = next[left];
    if (right < 0) return;
    auto it = merges_.find(PairKey(id[left], id[right]));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    // Entries go stale when a neighbour merged first; the pair at `pos` must still be the
    // one this entry was made for.
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const int right = next[top.pos];
    auto it = merges_.find(PairKey(id[top.pos], id[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    id[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0) push_pair(prev[top.pos]);
    push_pair(top.pos);
  }
  int out = 0;
  for (int i = 0; i < n; ++i) {
    if (alive[i]) id[out++] = id[i];
  }
  id.resize(out);
}

}  // namespace mlaserve::model
