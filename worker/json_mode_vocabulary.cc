#include "worker/json_mode_vocabulary.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/tokenizer.h"
#include "spdlog/spdlog.h"

namespace mlaserve::worker {

std::unique_ptr<JsonModeVocabulary> JsonModeVocabulary::FromModelDirectory(
    std::string model_dir, int vocab_size, std::vector<int32_t> eos_ids) {
  return std::make_unique<JsonModeVocabulary>(
      [dir = std::move(model_dir), vocab_size,
       eos = std::move(eos_ids)]() -> absl::StatusOr<Vocabulary> {
        const std::filesystem::path path(dir);
        if (!std::filesystem::exists(path / "tokenizer.json") &&
            !std::filesystem::exists(path / "tiktoken.model")) {
          return absl::FailedPreconditionError(absl::StrCat(
              "response_format json_object / json_schema needs tokenizer.json or tiktoken.model "
              "in the model directory ", dir));
        }
        auto unusable = [&](const absl::Status& why) {
          return absl::FailedPreconditionError(absl::StrCat(
              "response_format json_object / json_schema cannot use the tokenizer of ", dir, ": ",
              why.message()));
        };
        absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer =
            model::Tokenizer::FromModelDir(dir);
        if (!tokenizer.ok()) return unusable(tokenizer.status());
        absl::StatusOr<Vocabulary> vocab =
            model::ConstraintVocabulary::FromTokenizer(**tokenizer, vocab_size, eos);
        if (!vocab.ok()) return unusable(vocab.status());
        return vocab;
      });
}

absl::StatusOr<JsonModeVocabulary::Vocabulary> JsonModeVocabulary::Get() const {
  absl::MutexLock lock(&mu_);
  if (!built_.has_value()) {
    built_ = build_();
    if (built_->ok()) {
      spdlog::info("JSON mode: constraint vocabulary of {} tokens built",
                   (**built_)->vocab_size());
    } else {
      spdlog::warn("JSON mode unavailable: {}", built_->status().ToString());
    }
  }
  return *built_;
}

absl::StatusOr<JsonModeVocabulary::Vocabulary> VocabularyForRequest(
    const common::SamplingValues& sampling, const JsonModeVocabulary* source) {
  if (!sampling.constrained()) return nullptr;
  if (source == nullptr) {
    return absl::FailedPreconditionError(
        "response_format json_object / json_schema is not served by this worker (no constraint "
        "vocabulary)");
  }
  return source->Get();
}

absl::StatusOr<model::JsonConstraint> ConstraintForRequest(
    std::shared_ptr<const model::ConstraintVocabulary> vocab,
    const common::SamplingValues& sampling) {
  if (!sampling.json_choices.empty()) {
    absl::StatusOr<std::vector<model::SchemaChoice>> choices =
        model::CompileSchemaChoices(sampling.json_choices);
    if (!choices.ok()) return choices.status();
    return model::JsonConstraint(std::move(vocab), std::move(*choices));
  }
  std::shared_ptr<const model::JsonSchema> schema;
  if (!sampling.json_schema.empty()) {
    absl::StatusOr<std::shared_ptr<const model::JsonSchema>> compiled =
        model::JsonSchema::Get(sampling.json_schema, sampling.json_schema_strict);
    if (!compiled.ok()) return compiled.status();
    schema = std::move(*compiled);
  }
  return model::JsonConstraint(std::move(vocab), sampling.json_after, std::move(schema));
}

}  // namespace mlaserve::worker
