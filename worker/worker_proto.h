// Proto <-> domain conversions the prefill and decode workers share (proto types stay at the
// RPC edge; the schedulers see model:: and kvtransfer:: types only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "mlaserve/v1/admin.pb.h"
#include "mlaserve/v1/api.pb.h"
#include "model/loader/config.h"
#include "model/sampler.h"

namespace mlaserve::worker {

// The router forwards SamplingParams with every optional filled. Unset fields take the
// api.proto defaults here too (seed unset: a fresh random seed); values out of range are
// INVALID_ARGUMENT naming the field. The workers' edge for sampling: it calls
// common::ValidateSamplingValues and ValidateResponseFormat (response_format json_object /
// json_schema with ignore_eos is refused, as are an unknown response_format, JSON_SCHEMA without
// a schema or a schema without JSON_SCHEMA, and a response_format_after without either format or
// over 64 bytes), compiles a JSON_SCHEMA's schema (model::JsonSchema::Get: INVALID_ARGUMENT
// naming the keyword and its pointer), and nothing past it checks the values again. Whether
// JSON mode can be served here (JsonModeVocabulary) is the caller's. With vocab_size > 0 the
// logit_bias ids are checked against it (the sampler checks them again otherwise); logit_bias
// comes back sorted by id.
absl::StatusOr<model::SamplingOptions> ToSamplingOptions(const mlaserve::v1::SamplingParams& p,
                                                         int32_t vocab_size = 0);

// Every id in [0, vocab_size) and 1 <= size <= max_len; INVALID_ARGUMENT naming the first
// offending value otherwise ("token id 70000 at position 3 is outside the vocabulary [0, 129280)").
absl::Status ValidatePromptTokens(const std::vector<int32_t>& ids, int vocab_size, int max_len);

// ModelIdentity as the router compares it; model_name is the model directory's base name.
mlaserve::v1::ModelIdentity MakeModelIdentity(const model::ModelConfig& config,
                                              const std::string& model_dir,
                                              const std::string& kv_compat_hash);

// The descriptor a worker answers GetInfo with and registers with (load filled by the caller).
struct WorkerFacts {
  mlaserve::v1::WorkerRole role = mlaserve::v1::WORKER_ROLE_UNSPECIFIED;
  std::string address;  // advertised HOST:PORT
  mlaserve::v1::ModelIdentity model;
  std::string backend;  // "cpu" / "cuda"
  int device = 0;
  int gpus = 1;                          // ranks of the worker (--tp-size)
  std::string parallel_layout = "tp=1";  // model::ParallelLayout::Describe()
  bool prefix_cache = false;             // --prefix-cache
  std::string kv_transport;  // "tcp"
  int chunk_size = 0;
  int local_prefill_threshold = 0;  // decode workers
};
mlaserve::v1::WorkerDescriptor MakeWorkerDescriptor(const WorkerFacts& facts);

// The address a worker advertises: known only once its port is bound, read by GetInfo and the
// registration thread meanwhile.
class AdvertisedAddress {
 public:
  void set(std::string address) {
    absl::MutexLock lock(&mu_);
    address_ = std::move(address);
  }
  std::string get() const {
    absl::MutexLock lock(&mu_);
    return address_;
  }

 private:
  mutable absl::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve::worker
