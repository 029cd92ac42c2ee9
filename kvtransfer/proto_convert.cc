#include "kvtransfer/proto_convert.h"

#include "absl/strings/str_cat.h"

namespace mlaserve::kvtransfer {

mlaserve::v1::KvLayout ToProto(const KvLayout& l) {
  mlaserve::v1::KvLayout p;
  p.set_model_type(l.model_type);
  p.set_model_fingerprint(l.model_fingerprint);
  p.set_num_layers(l.num_layers);
  p.set_latent_dim(l.latent_dim);
  p.set_index_dim(l.index_dim);
  p.set_dtype(kernels::DTypeName(l.dtype));
  p.set_page_size(l.page_size);
  p.set_tp_size(l.tp_size);
  p.set_kv_protocol(l.kv_protocol);
  p.set_compat_hash(l.CompatHash());
  return p;
}

absl::StatusOr<KvLayout> FromProto(const mlaserve::v1::KvLayout& p) {
  KvLayout l;
  l.model_type = p.model_type();
  l.model_fingerprint = p.model_fingerprint();
  l.num_layers = p.num_layers();
  l.latent_dim = p.latent_dim();
  l.index_dim = p.index_dim();
  auto dtype = ParseDType(p.dtype());
  if (!dtype.ok()) return dtype.status();
  l.dtype = *dtype;
  l.page_size = p.page_size();
  l.tp_size = p.tp_size();
  l.kv_protocol = p.kv_protocol() == 0 ? 1 : p.kv_protocol();  // 0: a sender before the field
  if (!p.compat_hash().empty() && p.compat_hash() != l.CompatHash()) {
    return absl::InvalidArgumentError(absl::StrCat("KvLayout compat_hash ", p.compat_hash(),
                                                   " does not match its fields (",
                                                   l.CompatHash(), ")"));
  }
  return l;
}

mlaserve::v1::KvSessionRef ToProto(const KvSessionRef& r) {
  mlaserve::v1::KvSessionRef p;
  p.set_session_id(r.session_id);
  p.set_endpoint(r.endpoint);
  p.set_transport(r.transport);
  p.set_num_pages(r.num_pages);
  p.set_compat_hash(r.compat_hash);
  p.set_rank(r.rank);
  p.set_cached_pages(r.cached_pages);
  return p;
}

absl::StatusOr<KvSessionRef> FromProto(const mlaserve::v1::KvSessionRef& p) {
  if (p.session_id().empty()) {
    return absl::InvalidArgumentError("kv_session.session_id is empty");
  }
  if (p.endpoint().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_session.endpoint is empty (session ", p.session_id(), ")"));
  }
  if (p.num_pages() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_session.num_pages is ", p.num_pages(), "; must be >= 0"));
  }
  if (p.rank() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_session.rank is ", p.rank(), "; must be >= 0"));
  }
  if (p.cached_pages() < 0 || (p.cached_pages() > 0 && p.cached_pages() >= p.num_pages())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_session.cached_pages is ", p.cached_pages(), "; must be in [0, num_pages ",
        p.num_pages(), ") (the page of the prompt's last token is always shipped)"));
  }
  KvSessionRef r;
  r.session_id = p.session_id();
  r.endpoint = p.endpoint();
  r.transport = p.transport();
  r.num_pages = p.num_pages();
  r.compat_hash = p.compat_hash();
  r.rank = p.rank();
  r.cached_pages = p.cached_pages();
  return r;
}

}  // namespace mlaserve::kvtransfer
