#include "model/kv_prefix_index.h"

#include <algorithm>
#include <functional>

#include "kernels/common/page.h"

namespace mlaserve::model {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  // splitmix64's finalizer over the running value: every input bit reaches every output bit.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

std::span<const int32_t> PageTokens(std::span<const int32_t> tokens, int i) {
  return tokens.subspan(static_cast<size_t>(i) * kernels::kPageSize, kernels::kPageSize);
}

}  // namespace

KvPrefixIndex::KvPrefixIndex(int num_pages) : nodes_(num_pages) {}

uint64_t KvPrefixIndex::Key(int32_t parent, uint32_t parent_generation, std::string_view salt,
                            std::span<const int32_t> tokens) {
  uint64_t h = Mix(static_cast<uint32_t>(parent), parent_generation);
  if (!salt.empty()) h = Mix(h, std::hash<std::string_view>{}(salt));
  for (int32_t t : tokens) h = Mix(h, static_cast<uint32_t>(t));
  return h;
}

int32_t KvPrefixIndex::Find(uint64_t hash, int32_t parent, uint32_t parent_generation,
                            std::string_view salt, std::span<const int32_t> tokens) const {
  auto [begin, end] = by_key_.equal_range(hash);
  for (auto it = begin; it != end; ++it) {
    const Node& n = nodes_[it->second];
    if (n.parent == parent && n.parent_generation == parent_generation && n.salt == salt &&
        std::equal(tokens.begin(), tokens.end(), n.tokens.begin(), n.tokens.end())) {
      return it->second;
    }
  }
  return -1;
}

std::vector<int32_t> KvPrefixIndex::Match(std::span<const int32_t> tokens, int max_pages,
                                          std::string_view salt) const {
  std::vector<int32_t> pages;
  const int whole = static_cast<int>(tokens.size() / kernels::kPageSize);
  int32_t parent = -1;
  uint32_t generation = 0;
  for (int i = 0; i < std::min(whole, max_pages); ++i) {
    const std::span<const int32_t> t = PageTokens(tokens, i);
    const std::string_view s = i == 0 ? salt : std::string_view();
    const int32_t page = Find(Key(parent, generation, s, t), parent, generation, s, t);
    if (page < 0) break;
    pages.push_back(page);
    parent = page;
    generation = nodes_[page].generation;
  }
  return pages;
}

void KvPrefixIndex::Insert(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                           int full_pages, std::string_view salt, KvPrefixCursor* cursor) {
  const int n = std::min({full_pages, static_cast<int>(pages.size()),
                          static_cast<int>(tokens.size() / kernels::kPageSize)});
  KvPrefixCursor scratch;
  std::vector<KvPrefixCursor::Link>& chain = (cursor != nullptr ? cursor : &scratch)->chain_;
  // A walk from page 0 would find these pages again, one by one, while each is still cached
  // under the registration it had (a page's fields change only with a new generation, and a
  // cached key has one page); it resumes after the first that is not.
  size_t valid = 0;
  while (valid < chain.size() && nodes_[chain[valid].page].cached &&
         nodes_[chain[valid].page].generation == chain[valid].generation) {
    ++valid;
  }
  chain.resize(valid);
  int32_t parent = chain.empty() ? -1 : chain.back().page;
  uint32_t generation = chain.empty() ? 0 : chain.back().generation;
  for (int i = static_cast<int>(chain.size()); i < n; ++i) {
    const std::span<const int32_t> t = PageTokens(tokens, i);
    const std::string_view s = i == 0 ? salt : std::string_view();
    const uint64_t hash = Key(parent, generation, s, t);
    int32_t page = Find(hash, parent, generation, s, t);
    if (page < 0) {
      page = pages[i];
      Node& node = nodes_[page];
      if (node.cached) break;  // caches another prefix: not this caller's to take
      node.cached = true;
      node.parent = parent;
      node.parent_generation = generation;
      node.generation += 1;
      node.hash = hash;
      node.tokens.assign(t.begin(), t.end());
      node.salt.assign(s);
      by_key_.emplace(hash, page);
      ++size_;
    }
    parent = page;
    generation = nodes_[page].generation;
    chain.push_back({page, generation});
  }
}

void KvPrefixIndex::Erase(int32_t page) {
  Node& node = nodes_[page];
  if (!node.cached) return;
  auto [begin, end] = by_key_.equal_range(node.hash);
  for (auto it = begin; it != end; ++it) {
    if (it->second == page) {
      by_key_.erase(it);
      break;
    }
  }
  node.cached = false;
  node.tokens.clear();
  node.tokens.shrink_to_fit();
  node.salt.clear();
  node.salt.shrink_to_fit();
  --size_;
}

}  // namespace mlaserve::model
