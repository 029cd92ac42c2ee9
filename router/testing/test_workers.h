// Test helpers: the model and the worker descriptors that registry, routing and placement tests
// register (a tiny deepseek_v3, decode pools of 100 pages).
#pragma once

#include <string>

#include "router/worker_types.h"

namespace mlaserve::router::testing {

inline ModelIdentity TestModel() {
  ModelIdentity m;
  m.model_name = "tiny";
  m.model_type = "deepseek_v3";
  m.vocab_size = 1000;
  m.hidden_size = 64;
  m.num_hidden_layers = 2;
  m.kv_lora_rank = 32;
  m.qk_rope_head_dim = 16;
  m.max_position_embeddings = 512;
  return m;
}

// A decode worker at `address` reporting `free_pages` of 100 pages free; one of this version
// (remote_prefill_reuse: it keeps its cached pages for a remote prefill when asked).
inline WorkerDescriptor TestDecodeWorker(const std::string& address, int free_pages) {
  WorkerDescriptor d;
  d.role = WorkerRole::kDecode;
  d.address = address;
  d.model = TestModel();
  d.load.kv_pages_total = 100;
  d.load.kv_pages_free = free_pages;
  d.remote_prefill_reuse = true;
  return d;
}

// A prefill worker at `address` whose KV compatibility hash is "hash-<address>".
inline WorkerDescriptor TestPrefillWorker(const std::string& address) {
  WorkerDescriptor d;
  d.role = WorkerRole::kPrefill;
  d.address = address;
  d.model = TestModel();
  d.model.kv_compat_hash = "hash-" + address;
  return d;
}

}  // namespace mlaserve::router::testing
