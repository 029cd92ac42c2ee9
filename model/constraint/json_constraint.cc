#include "model/constraint/json_constraint.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <tuple>
#include <list>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "model/constraint/json_recognizer.h"
#include "model/constraint/json_schema.h"
#include "model/constraint/schema_choices.h"
#include "model/constraint/schema_recognizer.h"
#include "model/tokenizer/tokenizer.h"

namespace mlaserve::model {
namespace {

using json_internal::JsonNeedsByte;
using json_internal::JsonState;
using json_internal::Lex;
using json_internal::Step;
using choice_internal::ChoiceRead;
using choice_internal::ChoiceSet;
using schema_internal::CompiledSchema;
using schema_internal::SchemaState;

// ~16 MB of masks at DeepSeek's 129k ids; enough for the states a few hundred concurrent
// requests revisit (in a string, after a value, in a number... at their depths).
constexpr size_t kMaskCacheEntries = 1024;
// Masks before the start marker, one per (marker, progress): a marker of n bytes has n, and a
// deployment uses one or two markers ("</think>": 8).
constexpr size_t kFreeMaskCacheEntries = 256;
// Masks while a schema choice's prefix is written, one per (choice set, text so far): a
// request's tool names and separators, a few hundred bytes.
constexpr size_t kChoiceMaskCacheEntries = 512;

using Mask = std::vector<uint64_t>;

// Masks by key, least recently used last, at most `capacity`. Thread-safe. A miss is computed
// outside the lock (a few ms), so two requests may both compute one; the second insert is
// dropped.
template <typename Key>
class MaskCache {
 public:
  explicit MaskCache(size_t capacity) : capacity_(capacity) {}

  template <typename Compute>
  std::shared_ptr<const Mask> Get(const Key& key, Compute compute) const {
    {
      absl::MutexLock lock(&mu_);
      if (auto it = by_key_.find(key); it != by_key_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        return it->second->second;
      }
    }
    std::shared_ptr<const Mask> mask = compute();
    absl::MutexLock lock(&mu_);
    if (by_key_.contains(key)) return mask;
    lru_.emplace_front(key, mask);
    by_key_.emplace(key, lru_.begin());
    if (lru_.size() > capacity_) {
      by_key_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return mask;
  }

 private:
  using Lru = std::list<std::pair<Key, std::shared_ptr<const Mask>>>;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  mutable Lru lru_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_map<Key, typename Lru::iterator> by_key_ ABSL_GUARDED_BY(mu_);
};

// The text JSON mode starts after, found in the output byte by byte as Knuth-Morris-Pratt
// does, so that it may span tokens: progress is the length of the longest prefix of the
// marker that ends the output so far.
class StartMarker {
 public:
  explicit StartMarker(std::string text) : text_(std::move(text)), border_(text_.size(), 0) {
    for (size_t i = 1, k = 0; i < text_.size(); ++i) {
      while (k > 0 && text_[i] != text_[k]) k = border_[k - 1];
      if (text_[i] == text_[k]) ++k;
      border_[i] = k;
    }
  }
  const std::string& text() const { return text_; }
  size_t size() const { return text_.size(); }
  // The progress after byte `b`, from `progress` < size(); size() when `b` completes it.
  size_t Next(size_t progress, uint8_t b) const {
    while (progress > 0 && static_cast<uint8_t>(text_[progress]) != b) {
      progress = border_[progress - 1];
    }
    return static_cast<uint8_t>(text_[progress]) == b ? progress + 1 : progress;
  }

 private:
  std::string text_;
  std::vector<size_t> border_;  // border_[i]: the longest proper prefix of text_[0, i] ending it
};

std::string Escaped(std::string_view s) {
  return absl::CHexEscape(absl::string_view(s.data(), s.size()));
}

// The two recognizers behind one walk: JSON mode's 24-byte state, and a compiled schema's
// thread set. Step(in, b, out) writes the state after `b` to `out`, false when `b` is refused.
struct JsonWalker {
  using State = JsonState;
  State Start() const { return JsonState{}; }
  bool Step(const State& in, uint8_t b, State& out) const {
    out = in;
    return json_internal::Step(out, b);
  }
  bool CanEnd(const State& s) const { return s.lex == Lex::kDone; }
};

struct SchemaWalker {
  const CompiledSchema& schema;
  using State = SchemaState;
  State Start() const { return schema_internal::StartState(schema); }
  bool Step(const State& in, uint8_t b, State& out) const {
    return schema_internal::Step(schema, in, b, out);
  }
  bool CanEnd(const State& s) const { return schema_internal::CanEnd(schema, s); }
};

// Feeds `bytes` to `state` (a walker's state): the index of the first byte refused, or
// bytes.size(); `state` then holds the state after the bytes taken.
template <typename Walker>
size_t Feed(const Walker& walker, std::string_view bytes, typename Walker::State& state) {
  typename Walker::State next;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!walker.Step(state, static_cast<uint8_t>(bytes[i]), next)) return i;
    std::swap(state, next);
  }
  return bytes.size();
}

std::string SchemaKey(uint64_t serial, const SchemaState& state) {
  std::string key(sizeof(serial), '\0');
  std::memcpy(key.data(), &serial, sizeof(serial));
  key += schema_internal::StateBytes(state);
  return key;
}

// A node of the token-byte trie, stored in preorder: the node's children follow it and its
// subtree ends at `subtree_end`, so the walk is a forward scan that jumps over pruned subtrees.
struct TrieNode {
  uint32_t subtree_end;
  uint32_t first_token;  // tokens ending here: trie_tokens[first_token, next node's first_token)
  uint32_t depth;        // bytes from the root (the root itself is not stored)
  uint8_t byte;
};

}  // namespace

struct ConstraintVocabulary::Impl {
  // kAdded: an added token's text, drawn only before the start marker.
  enum class Kind : uint8_t { kNever, kText, kAdded, kEos };
  int vocab_size = 0;
  std::vector<Kind> kinds;
  std::vector<uint32_t> offsets;  // token t's bytes: bytes[offsets[t], offsets[t + 1])
  std::string bytes;
  std::vector<int32_t> eos_ids;
  choice_internal::AddedTokenTexts added_texts;  // how schema choices' prefixes are written
  // Every token with text and EOS: after a schema choice without a schema.
  std::shared_ptr<const Mask> any_text_mask;
  std::vector<TrieNode> trie;  // plus a sentinel, whose first_token ends the last range
  std::vector<int32_t> trie_tokens;
  uint32_t max_token_bytes = 0;

  MaskCache<JsonState> json_masks{kMaskCacheEntries};
  // Schema masks: (schema serial, state bytes).
  MaskCache<std::string> schema_masks{kMaskCacheEntries};
  // (marker, progress, schema serial or 0 for JSON mode).
  MaskCache<std::tuple<std::string, size_t, uint64_t>> free_masks{kFreeMaskCacheEntries};
  // While a choice's prefix is written: (ChoiceSet::key, units written so far).
  MaskCache<std::pair<std::string, std::string>> choice_masks{kChoiceMaskCacheEntries};

  std::string_view TokenBytes(int32_t t) const {
    return std::string_view(bytes).substr(offsets[t], offsets[t + 1] - offsets[t]);
  }

  void BuildTrie();
  template <typename Walker>
  std::shared_ptr<const Mask> ComputeMask(const Walker& walker,
                                          const typename Walker::State& root) const;
  std::shared_ptr<const Mask> MaskFor(const JsonState& state) const {
    return json_masks.Get(state, [&] { return ComputeMask(JsonWalker{}, state); });
  }
  std::shared_ptr<const Mask> MaskFor(const JsonSchema& schema, const SchemaState& state) const {
    return schema_masks.Get(SchemaKey(schema.serial(), state), [&] {
      return ComputeMask(SchemaWalker{schema.compiled()}, state);
    });
  }
  // Before the marker, `progress` bytes of it matched: every token with text but those that
  // complete it and go on with bytes the JSON text cannot start with.
  template <typename Walker>
  std::shared_ptr<const Mask> ComputeFreeMask(const Walker& walker, const StartMarker& marker,
                                              size_t progress) const;
  std::shared_ptr<const Mask> FreeMaskFor(const JsonSchema* schema, const StartMarker& marker,
                                          size_t progress) const {
    return free_masks.Get(
        std::tuple(marker.text(), progress, schema != nullptr ? schema->serial() : 0), [&] {
          return schema != nullptr
                     ? ComputeFreeMask(SchemaWalker{schema->compiled()}, marker, progress)
                     : ComputeFreeMask(JsonWalker{}, marker, progress);
        });
  }
  // Token t's units (schema_choices.h): an added token's one, a text token's bytes.
  void AppendUnits(std::string& units, int32_t t) const {
    if (kinds[t] == Kind::kAdded) return choice_internal::AppendAddedUnit(units, t);
    choice_internal::AppendByteUnits(units, TokenBytes(t));
  }
  // While `written` (units) of `choices`' prefixes is written: every token that keeps it a
  // prefix of one, or completes one and goes on with bytes that choice's value can start with.
  std::shared_ptr<const Mask> ChoiceMaskFor(const ChoiceSet& choices,
                                            const std::string& written) const {
    return choice_masks.Get(std::pair(choices.key, written),
                            [&] { return ComputeChoiceMask(choices, written); });
  }
  std::shared_ptr<const Mask> ComputeChoiceMask(const ChoiceSet& choices,
                                                const std::string& written) const;
  // Where `token`'s bytes complete `marker` from `progress`: the index past the marker's last
  // byte, or npos; `progress` is moved along.
  size_t MarkerEnd(const StartMarker& marker, size_t& progress, int32_t token) const {
    const std::string_view s = TokenBytes(token);
    for (size_t i = 0; i < s.size(); ++i) {
      progress = marker.Next(progress, static_cast<uint8_t>(s[i]));
      if (progress == marker.size()) return i + 1;
    }
    return std::string_view::npos;
  }
};

void ConstraintVocabulary::Impl::BuildTrie() {
  std::vector<int32_t> order;
  for (int32_t t = 0; t < vocab_size; ++t) {
    if (kinds[t] == Kind::kText) order.push_back(t);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return std::pair(TokenBytes(a), a) < std::pair(TokenBytes(b), b);
  });
  // Sorted, a token's prefixes come before it, so each token lands on the path of open nodes
  // right after the nodes it shares with the previous token.
  std::vector<uint32_t> path;
  std::string_view prev;
  for (int32_t t : order) {
    const std::string_view s = TokenBytes(t);
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    while (path.size() > common) {
      trie[path.back()].subtree_end = static_cast<uint32_t>(trie.size());
      path.pop_back();
    }
    for (size_t k = common; k < s.size(); ++k) {
      path.push_back(static_cast<uint32_t>(trie.size()));
      trie.push_back(TrieNode{0, static_cast<uint32_t>(trie_tokens.size()),
                              static_cast<uint32_t>(k + 1), static_cast<uint8_t>(s[k])});
    }
    trie_tokens.push_back(t);
    max_token_bytes = std::max(max_token_bytes, static_cast<uint32_t>(s.size()));
    prev = s;
  }
  for (uint32_t node : path) trie[node].subtree_end = static_cast<uint32_t>(trie.size());
  trie.push_back(TrieNode{0, static_cast<uint32_t>(trie_tokens.size()), 0, 0});
}

template <typename Walker>
std::shared_ptr<const Mask> ConstraintVocabulary::Impl::ComputeMask(
    const Walker& walker, const typename Walker::State& root) const {
  auto mask = std::make_shared<Mask>((vocab_size + 63) / 64, 0);
  uint64_t* words = mask->data();
  // state_at[d]: the state after the first d bytes of the current trie path (each keeps its
  // buffers across nodes, so a schema state's step does not allocate).
  std::vector<typename Walker::State> state_at(max_token_bytes + 1);
  state_at[0] = root;
  const size_t nodes = trie.size() - 1;
  for (size_t i = 0; i < nodes;) {
    const TrieNode& node = trie[i];
    if (!walker.Step(state_at[node.depth - 1], node.byte, state_at[node.depth])) {
      i = node.subtree_end;
      continue;
    }
    for (uint32_t k = node.first_token; k < trie[i + 1].first_token; ++k) {
      const int32_t t = trie_tokens[k];
      words[t >> 6] |= uint64_t{1} << (t & 63);
    }
    ++i;
  }
  if (walker.CanEnd(root)) {
    for (int32_t t : eos_ids) words[t >> 6] |= uint64_t{1} << (t & 63);
  }
  return mask;
}

template <typename Walker>
std::shared_ptr<const Mask> ConstraintVocabulary::Impl::ComputeFreeMask(
    const Walker& walker, const StartMarker& marker, size_t progress) const {
  auto mask = std::make_shared<Mask>((vocab_size + 63) / 64, 0);
  uint64_t* words = mask->data();
  const typename Walker::State start = walker.Start();
  typename Walker::State state;
  for (int32_t t = 0; t < vocab_size; ++t) {
    if (kinds[t] != Kind::kText && kinds[t] != Kind::kAdded) continue;
    size_t p = progress;
    if (const size_t end = MarkerEnd(marker, p, t); end != std::string_view::npos) {
      const std::string_view rest = TokenBytes(t).substr(end);
      state = start;
      if (Feed(walker, rest, state) != rest.size()) continue;
    }
    words[t >> 6] |= uint64_t{1} << (t & 63);
  }
  return mask;
}

std::shared_ptr<const Mask> ConstraintVocabulary::Impl::ComputeChoiceMask(
    const ChoiceSet& choices, const std::string& written) const {
  auto mask = std::make_shared<Mask>((vocab_size + 63) / 64, 0);
  uint64_t* words = mask->data();
  std::string text = written;
  SchemaState state;
  for (int32_t t = 0; t < vocab_size; ++t) {
    if (kinds[t] != Kind::kText && kinds[t] != Kind::kAdded) continue;
    text.resize(written.size());
    AppendUnits(text, t);
    size_t chosen;
    switch (ReadChoice(choices, text, chosen)) {
      case ChoiceRead::kRefused: continue;
      case ChoiceRead::kOpen: break;
      case ChoiceRead::kChosen: {
        if (choices.sorted[chosen].schema == nullptr) break;  // any text after the prefix
        const std::optional<std::string> rest =
            choice_internal::BytesOf(std::string_view(text).substr(choices.units[chosen].size()));
        if (!rest.has_value()) continue;  // an added token is never the value's
        const SchemaWalker walker{choices.sorted[chosen].schema->compiled()};
        state = walker.Start();
        if (Feed(walker, *rest, state) != rest->size()) continue;
        break;
      }
    }
    words[t >> 6] |= uint64_t{1} << (t & 63);
  }
  return mask;
}

ConstraintVocabulary::ConstraintVocabulary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConstraintVocabulary::~ConstraintVocabulary() = default;
int ConstraintVocabulary::vocab_size() const { return impl_->vocab_size; }

absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> ConstraintVocabulary::FromTokens(
    std::vector<std::optional<std::string>> tokens, std::vector<int32_t> eos_ids,
    const std::vector<int32_t>& added_ids) {
  if (tokens.empty() || tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a constraint vocabulary needs 1 to 2^31-1 ids; got ", tokens.size()));
  }
  if (eos_ids.empty()) {
    return absl::InvalidArgumentError(
        "JSON mode needs an end-of-sequence id to end a complete object; none was given");
  }
  auto impl = std::make_unique<Impl>();
  impl->vocab_size = static_cast<int>(tokens.size());
  impl->kinds.assign(tokens.size(), Impl::Kind::kNever);
  for (int32_t id : eos_ids) {
    if (id < 0 || id >= impl->vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("end-of-sequence id ", id,
                                                     " is outside the vocabulary of ",
                                                     impl->vocab_size, " ids"));
    }
    impl->kinds[id] = Impl::Kind::kEos;
  }
  impl->eos_ids = std::move(eos_ids);
  std::vector<bool> added(tokens.size(), false);
  for (int32_t id : added_ids) {
    if (id < 0 || id >= impl->vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("added token id ", id,
                                                     " is outside the vocabulary of ",
                                                     impl->vocab_size, " ids"));
    }
    added[id] = true;
  }
  impl->offsets.reserve(tokens.size() + 1);
  bool single_byte[256] = {};
  for (size_t t = 0; t < tokens.size(); ++t) {
    impl->offsets.push_back(static_cast<uint32_t>(impl->bytes.size()));
    // An empty token would let the sampler loop without adding text; EOS ids are only EOS.
    if (!tokens[t].has_value() || tokens[t]->empty() || impl->kinds[t] == Impl::Kind::kEos) {
      continue;
    }
    impl->kinds[t] = added[t] ? Impl::Kind::kAdded : Impl::Kind::kText;
    if (added[t]) impl->added_texts.Add(*tokens[t], static_cast<int32_t>(t));
    impl->bytes += *tokens[t];
    if (tokens[t]->size() == 1 && !added[t]) {
      single_byte[static_cast<uint8_t>((*tokens[t])[0])] = true;
    }
    if (impl->bytes.size() > UINT32_MAX) {
      return absl::InvalidArgumentError("the vocabulary's tokens hold more than 4 GiB of bytes");
    }
  }
  impl->offsets.push_back(static_cast<uint32_t>(impl->bytes.size()));
  for (int b = 0; b < 256; ++b) {
    if (JsonNeedsByte(b) && !single_byte[b]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the vocabulary has no single-byte text token for byte 0x%02x, which JSON text can "
          "need; JSON mode needs a byte-level vocabulary",
          b));
    }
  }
  impl->BuildTrie();
  auto any_text = std::make_shared<Mask>((impl->vocab_size + 63) / 64, 0);
  for (int32_t t = 0; t < impl->vocab_size; ++t) {
    if (impl->kinds[t] != Impl::Kind::kNever) (*any_text)[t >> 6] |= uint64_t{1} << (t & 63);
  }
  impl->any_text_mask = std::move(any_text);
  return std::shared_ptr<const ConstraintVocabulary>(new ConstraintVocabulary(std::move(impl)));
}

absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> ConstraintVocabulary::FromTokenizer(
    const Tokenizer& tokenizer, int vocab_size, std::vector<int32_t> eos_ids) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size must be positive; got ", vocab_size));
  }
  std::vector<std::optional<std::string>> tokens(vocab_size);
  std::vector<int32_t> added_ids;
  for (int32_t id = 0; id < vocab_size; ++id) {
    std::optional<std::string_view> bytes = tokenizer.TokenBytes(id, /*skip_special_tokens=*/false);
    if (!bytes.has_value()) continue;
    // Added tokens (special or not: <think>, the tool-call markers) mean more than their text:
    // never JSON, but a reasoning model ends its thinking with one (</think>).
    if (tokenizer.IsAddedToken(id)) added_ids.push_back(id);
    tokens[id] = std::string(*bytes);
  }
  return FromTokens(std::move(tokens), std::move(eos_ids), added_ids);
}

struct JsonConstraint::State {
  State(std::string start_after, std::shared_ptr<const JsonSchema> schema_in)
      : marker(std::move(start_after)),
        in_json(marker.size() == 0),
        schema(std::move(schema_in)) {
    if (schema != nullptr) schema_state = schema_internal::StartState(schema->compiled());
  }
  State(std::vector<SchemaChoice> choices_in, const choice_internal::AddedTokenTexts& added)
      : marker(std::string()),
        in_json(false),
        choices(choice_internal::MakeChoiceSet(std::move(choices_in), added)) {}
  StartMarker marker;
  bool in_json;                      // the marker has appeared (or there is none)
  size_t progress = 0;               // before it: bytes of it that end the output
  ChoiceSet choices;                 // with choices: in_json once one's prefix is written
  std::string written;               // before that: the units so far (schema_choices.h)
  std::optional<size_t> chosen;      // after: its index as given
  bool free = false;                 // the chosen one has no schema: any text from here
  std::shared_ptr<const JsonSchema> schema;  // null: JSON mode; with choices, the chosen one's
  JsonState json;                    // once in_json, JSON mode
  SchemaState schema_state;          // once in_json, with a schema
  std::shared_ptr<const Mask> mask;  // for the above, once asked for
};

JsonConstraint::JsonConstraint(std::shared_ptr<const ConstraintVocabulary> vocab,
                               std::string start_after, std::shared_ptr<const JsonSchema> schema)
    : vocab_(std::move(vocab)),
      state_(std::make_unique<State>(std::move(start_after), std::move(schema))) {}
JsonConstraint::JsonConstraint(std::shared_ptr<const ConstraintVocabulary> vocab,
                               std::vector<SchemaChoice> choices)
    : vocab_(std::move(vocab)),
      state_(std::make_unique<State>(std::move(choices), vocab_->impl_->added_texts)) {}
JsonConstraint::~JsonConstraint() = default;
JsonConstraint::JsonConstraint(JsonConstraint&&) noexcept = default;
JsonConstraint& JsonConstraint::operator=(JsonConstraint&&) noexcept = default;

std::span<const uint64_t> JsonConstraint::AllowedTokens() {
  State& st = *state_;
  if (st.mask == nullptr) {
    const ConstraintVocabulary::Impl& vocab = *vocab_->impl_;
    if (st.free) {
      st.mask = vocab.any_text_mask;
    } else if (!st.in_json && !st.choices.sorted.empty()) {
      st.mask = vocab.ChoiceMaskFor(st.choices, st.written);
    } else if (!st.in_json) {
      st.mask = vocab.FreeMaskFor(st.schema.get(), st.marker, st.progress);
    } else if (st.schema != nullptr) {
      st.mask = vocab.MaskFor(*st.schema, st.schema_state);
    } else {
      st.mask = vocab.MaskFor(st.json);
    }
  }
  return *st.mask;
}

bool JsonConstraint::JsonStarted() const { return state_->in_json; }
std::optional<size_t> JsonConstraint::Chosen() const { return state_->chosen; }
bool JsonConstraint::Complete() const {
  const State& st = *state_;
  if (!st.in_json) return false;
  if (st.free) return true;
  if (st.schema != nullptr) return schema_internal::CanEnd(st.schema->compiled(), st.schema_state);
  return st.json.lex == Lex::kDone;
}

absl::Status JsonConstraint::Advance(int32_t token) {
  const ConstraintVocabulary::Impl& vocab = *vocab_->impl_;
  using Kind = ConstraintVocabulary::Impl::Kind;
  if (token < 0 || token >= vocab.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token ", token, " is outside the vocabulary of ", vocab.vocab_size, " ids"));
  }
  if (state_->free) {
    if (vocab.kinds[token] != Kind::kNever) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("token ", token, " has no text (an empty or unknown token)"));
  }
  if (!state_->in_json && !state_->choices.sorted.empty()) return AdvanceChoosing(token);
  if (!state_->in_json) return AdvanceBeforeMarker(token);
  switch (vocab.kinds[token]) {
    case Kind::kEos:
      if (Complete()) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " (end of sequence) is not allowed: the JSON object is not complete"));
    case Kind::kNever:
    case Kind::kAdded:
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " is not text (an added, special or empty token); JSON mode never "
          "allows it"));
    case Kind::kText:
      break;
  }
  const std::string_view bytes = vocab.TokenBytes(token);
  State& st = *state_;
  size_t taken;
  if (st.schema != nullptr) {
    SchemaState next = st.schema_state;
    taken = Feed(SchemaWalker{st.schema->compiled()}, bytes, next);
    if (taken == bytes.size()) st.schema_state = std::move(next);
  } else {
    JsonState next = st.json;
    taken = Feed(JsonWalker{}, bytes, next);
    if (taken == bytes.size()) st.json = next;
  }
  if (taken != bytes.size()) {
    const char* what = st.schema != nullptr ? " cannot continue a JSON value the schema admits"
                                            : " cannot continue a JSON object";
    return absl::InvalidArgumentError(absl::StrCat(
        "token ", token, " (\"", Escaped(bytes), "\") is not allowed: its byte ", taken,
        Complete() && st.schema == nullptr ? " follows the complete JSON object" : what));
  }
  st.mask.reset();
  return absl::OkStatus();
}

absl::Status JsonConstraint::AdvanceBeforeMarker(int32_t token) {
  const ConstraintVocabulary::Impl& vocab = *vocab_->impl_;
  using Kind = ConstraintVocabulary::Impl::Kind;
  const std::string& marker = state_->marker.text();
  switch (vocab.kinds[token]) {
    case Kind::kEos:
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " (end of sequence) is not allowed before \"", Escaped(marker),
          "\": the JSON object after it has not started"));
    case Kind::kNever:
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " has no text (an empty or unknown token); JSON mode never allows it"));
    case Kind::kText:
    case Kind::kAdded:
      break;
  }
  size_t progress = state_->progress;
  const std::string_view bytes = vocab.TokenBytes(token);
  if (const size_t end = vocab.MarkerEnd(state_->marker, progress, token);
      end != std::string_view::npos) {
    const std::string_view rest = bytes.substr(end);
    State& st = *state_;
    size_t refused;
    JsonState json;
    SchemaState schema_state;
    if (st.schema != nullptr) {
      const SchemaWalker walker{st.schema->compiled()};
      schema_state = walker.Start();
      refused = Feed(walker, rest, schema_state);
    } else {
      refused = Feed(JsonWalker{}, rest, json);
    }
    if (refused != rest.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " (\"", Escaped(bytes), "\") is not allowed: it completes \"",
          Escaped(marker), "\" and its byte ", end + refused, " cannot start the JSON ",
          st.schema != nullptr ? "value" : "object"));
    }
    st.schema_state = std::move(schema_state);
    state_->in_json = true;
    state_->json = json;
  }
  state_->progress = progress;
  state_->mask.reset();
  return absl::OkStatus();
}

absl::Status JsonConstraint::AdvanceChoosing(int32_t token) {
  const ConstraintVocabulary::Impl& vocab = *vocab_->impl_;
  using Kind = ConstraintVocabulary::Impl::Kind;
  State& st = *state_;
  const std::string written = vocab.added_texts.Text(st.written);
  if (vocab.kinds[token] == Kind::kEos || vocab.kinds[token] == Kind::kNever) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token ", token, vocab.kinds[token] == Kind::kEos ? " (end of sequence)" : " (no text)",
        " is not allowed after \"", Escaped(written),
        "\": the text must go on with one of the choices' prefixes"));
  }
  const std::string_view bytes = vocab.TokenBytes(token);
  std::string text = st.written;
  vocab.AppendUnits(text, token);
  size_t chosen = 0;
  switch (ReadChoice(st.choices, text, chosen)) {
    case ChoiceRead::kRefused:
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " (\"", Escaped(bytes), "\") is not allowed after \"", Escaped(written),
          "\": no choice's prefix goes on with it (an added token's text in a prefix is that "
          "token's)"));
    case ChoiceRead::kOpen:
      st.written = std::move(text);
      break;
    case ChoiceRead::kChosen: {
      const SchemaChoice& choice = st.choices.sorted[chosen];
      if (choice.schema == nullptr) {  // any text after the prefix
        st.chosen = st.choices.given_index[chosen];
        st.in_json = true;
        st.free = true;
        st.written.clear();
        break;
      }
      const std::optional<std::string> rest =
          choice_internal::BytesOf(std::string_view(text).substr(st.choices.units[chosen].size()));
      const SchemaWalker walker{choice.schema->compiled()};
      SchemaState state = walker.Start();
      const size_t taken = rest.has_value() ? Feed(walker, *rest, state) : 0;
      if (!rest.has_value() || taken != rest->size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token ", token, " (\"", Escaped(bytes), "\") is not allowed: it completes \"",
            Escaped(choice.prefix), "\" and its byte ",
            rest.has_value() ? bytes.size() - rest->size() + taken : 0,
            " cannot start a value that choice's schema admits"));
      }
      st.schema = choice.schema;
      st.schema_state = std::move(state);
      st.chosen = st.choices.given_index[chosen];
      st.in_json = true;
      st.written.clear();
      break;
    }
  }
  st.mask.reset();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SchemaChoice>> CompileSchemaChoices(
    const std::vector<common::SchemaChoice>& choices) {
  std::vector<SchemaChoice> out;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].schema.empty()) {
      out.push_back(SchemaChoice{choices[i].prefix, nullptr});
      continue;
    }
    absl::StatusOr<std::shared_ptr<const JsonSchema>> schema =
        JsonSchema::Get(choices[i].schema, choices[i].strict);
    if (!schema.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("response_format_choices[", i, "] (prefix \"",
                                                     Escaped(choices[i].prefix), "\"): ",
                                                     schema.status().message()));
    }
    out.push_back(SchemaChoice{choices[i].prefix, std::move(*schema)});
  }
  return out;
}

}  // namespace mlaserve::model
