#include "router/admin_conversion.h"

#include "absl/strings/str_cat.h"

namespace mlaserve::router {

absl::StatusOr<WorkerRole> RoleFromProto(v1::WorkerRole role) {
  switch (role) {
    case v1::WORKER_ROLE_PREFILL: return WorkerRole::kPrefill;
    case v1::WORKER_ROLE_DECODE: return WorkerRole::kDecode;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "worker role ", v1::WorkerRole_Name(role).empty() ? absl::StrCat(static_cast<int>(role))
                                                            : v1::WorkerRole_Name(role),
          " is not a role; use WORKER_ROLE_PREFILL or WORKER_ROLE_DECODE"));
  }
}

v1::WorkerRole RoleToProto(WorkerRole role) {
  return role == WorkerRole::kPrefill ? v1::WORKER_ROLE_PREFILL : v1::WORKER_ROLE_DECODE;
}

v1::WorkerState StateToProto(WorkerState state) {
  switch (state) {
    case WorkerState::kStarting: return v1::WORKER_STATE_STARTING;
    case WorkerState::kHealthy: return v1::WORKER_STATE_HEALTHY;
    case WorkerState::kUnhealthy: return v1::WORKER_STATE_UNHEALTHY;
    case WorkerState::kDraining: return v1::WORKER_STATE_DRAINING;
    case WorkerState::kIncompatible: return v1::WORKER_STATE_INCOMPATIBLE;
  }
  return v1::WORKER_STATE_UNSPECIFIED;
}

v1::WorkerSource SourceToProto(WorkerSource source) {
  switch (source) {
    case WorkerSource::kStatic: return v1::WORKER_SOURCE_STATIC;
    case WorkerSource::kAdmin: return v1::WORKER_SOURCE_ADMIN;
    case WorkerSource::kSelfRegistered: return v1::WORKER_SOURCE_SELF_REGISTERED;
  }
  return v1::WORKER_SOURCE_UNSPECIFIED;
}

WorkerLoad LoadFromProto(const v1::WorkerLoad& p) {
  WorkerLoad l;
  l.kv_pages_total = p.kv_pages_total();
  l.kv_pages_free = p.kv_pages_free();
  l.running_requests = p.running_requests();
  l.pending_requests = p.pending_requests();
  l.pending_prefill_tokens = p.pending_prefill_tokens();
  l.max_running_requests = p.max_running_requests();
  for (const v1::RankLoad& r : p.ranks()) {
    l.ranks.push_back(RankLoad{.kv_pages_total = r.kv_pages_total(),
                               .kv_pages_free = r.kv_pages_free(),
                               .running_requests = r.running_requests(),
                               .pending_requests = r.pending_requests()});
  }
  return l;
}

v1::WorkerLoad LoadToProto(const WorkerLoad& l) {
  v1::WorkerLoad p;
  p.set_kv_pages_total(l.kv_pages_total);
  p.set_kv_pages_free(l.kv_pages_free);
  p.set_running_requests(l.running_requests);
  p.set_pending_requests(l.pending_requests);
  p.set_pending_prefill_tokens(l.pending_prefill_tokens);
  p.set_max_running_requests(l.max_running_requests);
  for (const RankLoad& r : l.ranks) {
    v1::RankLoad* rank = p.add_ranks();
    rank->set_kv_pages_total(r.kv_pages_total);
    rank->set_kv_pages_free(r.kv_pages_free);
    rank->set_running_requests(r.running_requests);
    rank->set_pending_requests(r.pending_requests);
  }
  return p;
}

WorkerProfile ProfileFromProto(const v1::WorkerProfile& p) {
  WorkerProfile w;
  w.gpu_name = p.gpu_name();
  w.source = p.source();
  w.local_prefill_threshold = p.local_prefill_threshold();
  w.chunk_size = p.chunk_size();
  w.profile_json = p.profile_json();
  w.prefill_estimate = PrefillEstimateFromProfileJson(w.profile_json);
  return w;
}

v1::WorkerProfile ProfileToProto(const WorkerProfile& w) {
  v1::WorkerProfile p;
  p.set_gpu_name(w.gpu_name);
  p.set_source(w.source);
  p.set_local_prefill_threshold(w.local_prefill_threshold);
  p.set_chunk_size(w.chunk_size);
  p.set_profile_json(w.profile_json);
  return p;
}

ModelIdentity ModelFromProto(const v1::ModelIdentity& p) {
  ModelIdentity m;
  m.model_name = p.model_name();
  m.model_type = p.model_type();
  m.vocab_size = p.vocab_size();
  m.hidden_size = p.hidden_size();
  m.num_hidden_layers = p.num_hidden_layers();
  m.kv_lora_rank = p.kv_lora_rank();
  m.qk_rope_head_dim = p.qk_rope_head_dim();
  m.max_position_embeddings = p.max_position_embeddings();
  m.kv_compat_hash = p.kv_compat_hash();
  return m;
}

v1::ModelIdentity ModelToProto(const ModelIdentity& m) {
  v1::ModelIdentity p;
  p.set_model_name(m.model_name);
  p.set_model_type(m.model_type);
  p.set_vocab_size(m.vocab_size);
  p.set_hidden_size(m.hidden_size);
  p.set_num_hidden_layers(m.num_hidden_layers);
  p.set_kv_lora_rank(m.kv_lora_rank);
  p.set_qk_rope_head_dim(m.qk_rope_head_dim);
  p.set_max_position_embeddings(m.max_position_embeddings);
  p.set_kv_compat_hash(m.kv_compat_hash);
  return p;
}

absl::StatusOr<WorkerDescriptor> DescriptorFromProto(const v1::WorkerDescriptor& p) {
  absl::StatusOr<WorkerRole> role = RoleFromProto(p.role());
  if (!role.ok()) return role.status();
  WorkerDescriptor d;
  d.role = *role;
  d.address = p.address();
  d.model = ModelFromProto(p.model());
  d.backend = p.backend();
  d.device = p.device();
  d.version = p.version();
  d.profile = ProfileFromProto(p.profile());
  d.load = LoadFromProto(p.load());
  d.kv_transport = p.kv_transport();
  d.gpus = p.gpus();
  d.parallel_layout = p.parallel_layout();
  d.prefix_cache = p.prefix_cache();
  d.remote_prefill_reuse = p.remote_prefill_reuse();
  return d;
}

v1::WorkerDescriptor DescriptorToProto(const WorkerDescriptor& d) {
  v1::WorkerDescriptor p;
  p.set_role(RoleToProto(d.role));
  p.set_address(d.address);
  *p.mutable_model() = ModelToProto(d.model);
  p.set_backend(d.backend);
  p.set_device(d.device);
  p.set_version(d.version);
  *p.mutable_profile() = ProfileToProto(d.profile);
  *p.mutable_load() = LoadToProto(d.load);
  p.set_kv_transport(d.kv_transport);
  p.set_gpus(d.gpus);
  p.set_parallel_layout(d.parallel_layout);
  p.set_prefix_cache(d.prefix_cache);
  p.set_remote_prefill_reuse(d.remote_prefill_reuse);
  return p;
}

v1::WorkerStatus StatusToProto(const WorkerSnapshot& s) {
  v1::WorkerStatus p;
  p.set_id(s.id);
  p.set_role(RoleToProto(s.role));
  p.set_address(s.address);
  p.set_state(StateToProto(s.state));
  p.set_source(SourceToProto(s.source));
  if (s.has_descriptor) *p.mutable_info() = DescriptorToProto(s.descriptor);
  p.set_last_seen_unix_ms(s.last_seen == absl::InfinitePast() ? 0 : absl::ToUnixMillis(s.last_seen));
  p.set_last_error(s.last_error);
  p.set_router_inflight(s.router_inflight);
  return p;
}

}  // namespace mlaserve::router
