// JsonModeVocabulary: the worker process's model::ConstraintVocabulary for JSON mode and
// structured outputs (api.proto ResponseFormat JSON_OBJECT / JSON_SCHEMA), one for every request
// of the process.
//
// Built on the first request that asks for JSON mode, not at start: it reads the model
// directory's tokenizer (tokenizer.json or tiktoken.model) and builds a byte trie over the whole
// vocabulary, which a worker that never serves JSON mode should not pay for (nor fail to start
// over). The outcome, a vocabulary or why there is none, is kept: a tokenizer does not appear
// while the process runs. No vocabulary is FAILED_PRECONDITION (the deployment lacks something,
// not the request: retrying elsewhere or after a fix helps, changing the request does not).
//
// Thread-safe: RPC threads call Get concurrently; the first call builds (under the lock, so
// concurrent first calls wait for that one build) and every later one reads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/request_limits.h"
#include "model/constraint/json_constraint.h"
#include "model/constraint/json_schema.h"

namespace mlaserve::worker {

class JsonModeVocabulary {
 public:
  using Vocabulary = std::shared_ptr<const model::ConstraintVocabulary>;
  using BuildFn = std::function<absl::StatusOr<Vocabulary>()>;

  // `build` runs at most once, on the first Get (tests pass a made-up vocabulary).
  explicit JsonModeVocabulary(BuildFn build) : build_(std::move(build)) {}

  // From `model_dir`'s tokenizer (model::Tokenizer::FromModelDir: tokenizer.json, else
  // tiktoken.model) over the model's `vocab_size` logit rows, EOS allowed only once the value
  // is complete. Neither file: FAILED_PRECONDITION "response_format json_object / json_schema
  // needs tokenizer.json or tiktoken.model in the model directory <dir>"; a tokenizer that
  // cannot be loaded or used: FAILED_PRECONDITION naming the directory and why.
  static std::unique_ptr<JsonModeVocabulary> FromModelDirectory(std::string model_dir,
                                                                int vocab_size,
                                                                std::vector<int32_t> eos_ids);

  absl::StatusOr<Vocabulary> Get() const;

 private:
  const BuildFn build_;
  mutable absl::Mutex mu_;
  mutable std::optional<absl::StatusOr<Vocabulary>> built_ ABSL_GUARDED_BY(mu_);
};

// What a request's constraint is built over, at a worker's RPC edge: null for a request whose
// text is free; for one in JSON mode or structured outputs (sampling.constrained()) the
// vocabulary, or FAILED_PRECONDITION when `source` (null: this worker serves no JSON mode) has
// none.
absl::StatusOr<JsonModeVocabulary::Vocabulary> VocabularyForRequest(
    const common::SamplingValues& sampling, const JsonModeVocabulary* source);

// A request's constraint over `vocab` (VocabularyForRequest's, not null): JSON mode, or the
// compiled sampling.json_schema (from the process's schema cache: ToSamplingOptions compiled it,
// so a miss only recompiles), starting after sampling.json_after, or sampling.json_choices'
// (their prefixes, then the chosen one's schema). INVALID_ARGUMENT when a schema does not
// compile (a caller that skipped ToSamplingOptions).
absl::StatusOr<model::JsonConstraint> ConstraintForRequest(
    std::shared_ptr<const model::ConstraintVocabulary> vocab,
    const common::SamplingValues& sampling);

}  // namespace mlaserve::worker
