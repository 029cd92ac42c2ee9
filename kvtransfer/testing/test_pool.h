// Test helpers: small KV pools and layouts, random page contents.
#pragma once

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvtransfer/layout.h"
#include "model/kv_pool.h"

namespace mlaserve::kvtransfer::testing {

inline model::KvPoolOptions SmallPoolOptions(int num_pages = 16, int num_layers = 3) {
  model::KvPoolOptions o;
  o.num_layers = num_layers;
  o.num_pages = num_pages;
  o.latent_dim = 8;  // 64 tokens x 8 f32 = 2 KiB per layer page
  o.index_dim = 0;
  return o;
}

inline KvLayout SmallLayout(const model::KvPoolOptions& o) {
  KvLayout l;
  l.model_type = "deepseek_v3";
  l.model_fingerprint = 0x1234;
  l.num_layers = o.num_layers;
  l.latent_dim = o.latent_dim;
  l.index_dim = o.index_dim;
  l.dtype = o.dtype;
  return l;
}

inline std::unique_ptr<model::KvPool> MakePool(const model::KvPoolOptions& o) {
  auto pool = model::KvPool::Create(o);
  return pool.ok() ? std::move(*pool) : nullptr;
}

inline std::string RandomBytes(size_t n, std::mt19937& rng) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

inline std::string ReadLayerPage(const model::KvPool& pool, int layer, int32_t page) {
  std::string s(pool.layer_page_bytes(), '\0');
  (void)pool.ReadPage(layer, page, s.data());
  return s;
}

}  // namespace mlaserve::kvtransfer::testing
