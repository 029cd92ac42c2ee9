#include "kvtransfer/layout.h"

#include <cstdio>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/mla_dims.h"

namespace mlaserve::kvtransfer {
namespace {

// FNV-1a, 64 bit: stable across processes and builds (std::hash is not).
class Fnv64 {
 public:
  void Add(std::string_view s) {
    for (unsigned char c : s) {
      h_ ^= c;
      h_ *= 0x100000001b3ULL;
    }
    Add(static_cast<int64_t>(s.size()));  // length-delimit so ("ab","c") != ("a","bc")
  }
  void Add(int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h_ ^= static_cast<uint8_t>(v >> (8 * i));
      h_ *= 0x100000001b3ULL;
    }
  }
  void Add(double v) { Add(absl::StrFormat("%.17g", v)); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

}  // namespace

uint64_t ModelFingerprint(const model::ModelConfig& c) {
  Fnv64 h;
  h.Add(c.model_type_name);
  for (int64_t v : std::initializer_list<int64_t>{c.vocab_size, c.hidden_size, c.intermediate_size, c.moe_intermediate_size,
                    c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
                    static_cast<int64_t>(c.q_lora_rank.value_or(-1)), c.kv_lora_rank,
                    c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.n_routed_experts,
                    c.n_shared_experts, c.num_experts_per_tok, c.n_group, c.topk_group,
                    static_cast<int64_t>(c.has_indexer), c.index_n_heads, c.index_head_dim,
                    c.index_topk, static_cast<int64_t>(c.rope_interleave)}) {
    h.Add(v);
  }
  h.Add(c.rope.type);
  h.Add(c.rope.theta);
  h.Add(c.rope.factor);
  h.Add(c.softmax_scale);
  for (bool moe : c.layer_is_moe) h.Add(static_cast<int64_t>(moe));
  return h.value();
}

std::string KvLayout::CompatHash() const {
  Fnv64 h;
  h.Add(model_type);
  h.Add(static_cast<int64_t>(model_fingerprint));
  for (int64_t v : std::initializer_list<int64_t>{num_layers, latent_dim, index_dim, static_cast<int>(dtype), page_size,
                    tp_size}) {
    h.Add(v);
  }
  if (kv_protocol >= 2) h.Add(static_cast<int64_t>(kv_protocol));
  return absl::StrFormat("%016x", h.value());
}

std::string KvLayout::Describe() const {
  return absl::StrFormat(
      "%s fingerprint=%016x layers=%d latent=%d index=%d dtype=%s page=%d tp=%d kv_protocol=%d",
      model_type, model_fingerprint, num_layers, latent_dim, index_dim, kernels::DTypeName(dtype),
      page_size, tp_size, kv_protocol);
}

absl::StatusOr<KvLayout> MakeKvLayout(const model::ModelConfig& config,
                                      const model::KvPoolOptions& pool, int tp_size) {
  if (pool.num_layers != config.num_hidden_layers) {
    return absl::InvalidArgumentError(absl::StrCat("KV pool has ", pool.num_layers,
                                                   " layers; the model has ",
                                                   config.num_hidden_layers));
  }
  // The engine stores latent entries with its padded widths (model/mla_dims.h).
  const int latent_dim = model::StoredMlaDims(config).latent();
  if (pool.latent_dim != latent_dim) {
    return absl::InvalidArgumentError(absl::StrCat("KV pool latent_dim is ", pool.latent_dim,
                                                   "; the model's stored entry is ", latent_dim));
  }
  if (tp_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tp_size is ", tp_size, "; must be >= 1"));
  }
  KvLayout l;
  l.model_type = config.model_type_name;
  l.model_fingerprint = ModelFingerprint(config);
  l.num_layers = pool.num_layers;
  l.latent_dim = pool.latent_dim;
  l.index_dim = pool.index_dim;
  l.dtype = pool.cache_format == model::KvCacheFormat::kFp8Ds ? kernels::DType::kFP8E4M3 : pool.dtype;
  l.page_size = kernels::kPageSize;
  l.tp_size = tp_size;
  return l;
}

absl::Status CheckCompatible(const KvLayout& local, const KvLayout& peer) {
  auto differ = [&](absl::string_view field, const auto& ours, const auto& theirs) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV layouts are incompatible: ", field, " is ", theirs, " on the peer but ",
                     ours, " here (peer: ", peer.Describe(), "; here: ", local.Describe(), ")"));
  };
  if (local.model_type != peer.model_type) {
    return differ("model_type", local.model_type, peer.model_type);
  }
  if (local.model_fingerprint != peer.model_fingerprint) {
    return differ("model fingerprint", absl::StrFormat("%016x", local.model_fingerprint),
                  absl::StrFormat("%016x", peer.model_fingerprint));
  }
  if (local.num_layers != peer.num_layers) return differ("num_layers", local.num_layers, peer.num_layers);
  if (local.latent_dim != peer.latent_dim) return differ("latent_dim", local.latent_dim, peer.latent_dim);
  if (local.index_dim != peer.index_dim) return differ("index_dim", local.index_dim, peer.index_dim);
  if (local.dtype != peer.dtype) {
    const absl::Status s =
        differ("dtype", kernels::DTypeName(local.dtype), kernels::DTypeName(peer.dtype));
    return absl::FailedPreconditionError(
        absl::StrCat(s.message(), "; both workers need the same --kv-cache-dtype"));
  }
  if (local.page_size != peer.page_size) return differ("page_size", local.page_size, peer.page_size);
  if (local.tp_size != peer.tp_size) return differ("tp_size", local.tp_size, peer.tp_size);
  if (local.kv_protocol != peer.kv_protocol) {
    const absl::Status s = differ("kv_protocol", local.kv_protocol, peer.kv_protocol);
    return absl::FailedPreconditionError(absl::StrCat(
        s.message(), "; the prefill and decode workers must be builds that speak the same KV "
                     "transfer protocol"));
  }
  return absl::OkStatus();
}

absl::StatusOr<kernels::DType> ParseDType(const std::string& name) {
  for (kernels::DType t : {kernels::DType::kF32, kernels::DType::kBF16, kernels::DType::kF16,
                           kernels::DType::kFP8E4M3, kernels::DType::kI32, kernels::DType::kI64,
                           kernels::DType::kU8}) {
    if (name == kernels::DTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown KV dtype \"", name, "\""));
}

}  // namespace mlaserve::kvtransfer
