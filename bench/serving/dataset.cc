#include "bench/serving/dataset.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "kernels/sampling/split_mix.h"
#include "nlohmann/json.hpp"

namespace mlaserve::bench {
namespace {

// Uniform real in [0, 1) from the top 53 bits.
double UniformReal(std::mt19937_64& gen) {
  return static_cast<double>(gen() >> 11) * 0x1.0p-53;
}

// Distinct, fixed streams for the parts of a run, so that changing one part (say the
// arrival rate) leaves the prompts of the same seed unchanged.
constexpr uint64_t kLengthStream = 0x6c656e67746873ULL;
constexpr uint64_t kTokenStream = 0x746f6b656e73ULL;
constexpr uint64_t kArrivalStream = 0x61727269766c73ULL;
constexpr uint64_t kPrefixStream = 0x707265666978ULL;
// Mixed into --seed for the warmup's prompts.
constexpr uint64_t kWarmupSalt = 0x7761726d7570ULL;

absl::Status ValidateSharedPrefix(const RandomDatasetOptions& o) {
  if (o.shared_prefix_len < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-prefix-len ", o.shared_prefix_len, " must be >= 0 (0 = no shared prefix)"));
  }
  if (o.shared_prefix_groups < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-prefix-groups ", o.shared_prefix_groups, " must be >= 0 (0 = no shared prefix)"));
  }
  if (o.shared_prefix_len > 0 && o.shared_prefix_groups < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-prefix-groups ", o.shared_prefix_groups,
                     " must be >= 1 with shared-prefix-len ", o.shared_prefix_len));
  }
  if (o.shared_prefix_groups > 0 && o.shared_prefix_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-prefix-len ", o.shared_prefix_len, " must be >= 1 with "
                     "shared-prefix-groups ", o.shared_prefix_groups));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t UniformInt(std::mt19937_64& gen, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(gen() % span);
}

int LowerLength(int len, double ratio) {
  const int lo = static_cast<int>(std::floor(len * ratio));
  return std::max(1, std::min(lo, len));
}

void AppendRandomIds(std::mt19937_64& gen, int count, const VocabInfo& vocab,
                     std::vector<int32_t>& ids) {
  const size_t target = ids.size() + static_cast<size_t>(count);
  while (ids.size() < target) {
    const auto id = static_cast<int32_t>(UniformInt(gen, 0, vocab.vocab_size - 1));
    if (!vocab.excluded_ids.contains(id)) ids.push_back(id);
  }
}

absl::StatusOr<std::vector<RequestSpec>> MakeRandomDataset(const RandomDatasetOptions& options,
                                                           const VocabInfo& vocab) {
  if (options.num_prompts < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num-prompts ", options.num_prompts, " is negative"));
  }
  if (options.input_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("random-input-len ", options.input_len, " must be >= 1"));
  }
  if (options.output_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("random-output-len ", options.output_len, " must be >= 1"));
  }
  if (!(options.range_ratio >= 0.0 && options.range_ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("random-range-ratio ", options.range_ratio, " must be in [0, 1]"));
  }
  if (absl::Status prefix = ValidateSharedPrefix(options); !prefix.ok()) return prefix;
  // In 64 bits: a prefix length near INT_MAX must be refused, not wrap around.
  const int64_t longest = int64_t{options.shared_prefix_len} + options.input_len +
                          options.output_len;
  if (vocab.max_context_length > 0 && longest > vocab.max_context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.shared_prefix_len > 0
            ? absl::StrCat("shared-prefix-len ", options.shared_prefix_len, " + ")
            : std::string(),
        "random-input-len ", options.input_len, " + random-output-len ", options.output_len,
        " = ", longest, " tokens; this model's context is ", vocab.max_context_length));
  }
  bool has_usable_id = false;
  for (int id = 0; id < vocab.vocab_size && !has_usable_id; ++id) {
    has_usable_id = !vocab.excluded_ids.contains(id);
  }
  if (!has_usable_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocabulary of ", vocab.vocab_size, " ids has no id left for random prompts after "
        "excluding ", vocab.excluded_ids.size(), " special ids"));
  }

  // The groups' prefixes first, from their own stream (see the header on reproducibility).
  std::vector<std::vector<int32_t>> prefixes(options.shared_prefix_groups);
  std::mt19937_64 prefix_ids(options.seed ^ kPrefixStream);
  for (std::vector<int32_t>& prefix : prefixes) {
    prefix.reserve(options.shared_prefix_len);
    AppendRandomIds(prefix_ids, options.shared_prefix_len, vocab, prefix);
  }

  std::mt19937_64 lengths(options.seed ^ kLengthStream);
  std::mt19937_64 tokens(options.seed ^ kTokenStream);
  const int in_lo = LowerLength(options.input_len, options.range_ratio);
  const int out_lo = LowerLength(options.output_len, options.range_ratio);
  std::vector<RequestSpec> specs(options.num_prompts);
  for (int i = 0; i < options.num_prompts; ++i) {
    RequestSpec& spec = specs[i];
    spec.index = i;
    const int own_len = static_cast<int>(UniformInt(lengths, in_lo, options.input_len));
    spec.output_len = static_cast<int>(UniformInt(lengths, out_lo, options.output_len));
    if (!prefixes.empty()) spec.prompt_token_ids = prefixes[i % prefixes.size()];
    spec.prompt_token_ids.reserve(spec.prompt_token_ids.size() + own_len);
    AppendRandomIds(tokens, own_len, vocab, spec.prompt_token_ids);
    spec.input_len = static_cast<int>(spec.prompt_token_ids.size());
  }
  return specs;
}

absl::StatusOr<std::vector<RequestSpec>> LoadPromptsFile(const std::string& path, int limit) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open prompts file ", path));
  std::vector<RequestSpec> specs;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const auto where = [&] { return absl::StrCat(path, ":", line_number, ": "); };
    nlohmann::json object = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded() || !object.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "not a JSON object"));
    }
    auto text = object.find("text");
    if (text == object.end() || !text->is_string() || text->get<std::string>().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "\"text\" must be a non-empty string"));
    }
    auto output_len = object.find("output_len");
    if (output_len == object.end() || !output_len->is_number_integer() ||
        output_len->get<int64_t>() < 1 ||
        output_len->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "\"output_len\" must be an integer >= 1, got ",
          output_len == object.end() ? std::string("nothing") : output_len->dump()));
    }
    RequestSpec spec;
    spec.index = static_cast<int>(specs.size());
    spec.use_text = true;
    spec.prompt_text = text->get<std::string>();
    spec.output_len = static_cast<int>(output_len->get<int64_t>());
    specs.push_back(std::move(spec));
    if (limit > 0 && static_cast<int>(specs.size()) == limit) break;
  }
  if (specs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("prompts file ", path, " has no prompts"));
  }
  return specs;
}

uint64_t WarmupSeed(uint64_t seed) { return seed ^ kWarmupSalt; }

std::vector<RequestSpec> CycleToCount(const std::vector<RequestSpec>& specs, int count) {
  std::vector<RequestSpec> out;
  if (specs.empty()) return out;
  out.reserve(count);
  for (int i = 0; i < count; ++i) {
    out.push_back(specs[i % specs.size()]);
    out.back().index = i;
  }
  return out;
}

bool SendsKnobs(uint64_t seed, int index, double fraction) {
  if (fraction >= 1) return true;
  // The top 53 bits as a real in [0, 1); a salt keeps it apart from other draws of the seed.
  const uint64_t draw = kernels::SamplingSplitMix(seed ^ 0x6b6e6f6273ull, static_cast<uint64_t>(index));
  return static_cast<double>(draw >> 11) * 0x1.0p-53 < fraction;
}

std::vector<double> PoissonArrivalOffsets(int count, double rate, uint64_t seed) {
  std::vector<double> offsets(std::max(count, 0), 0.0);
  if (std::isinf(rate)) return offsets;
  std::mt19937_64 gen(seed ^ kArrivalStream);
  double t = 0;
  for (int i = 1; i < count; ++i) {
    // Exponential gap with mean 1/rate: -ln(1 - U) / rate, U in [0, 1).
    t += -std::log1p(-UniformReal(gen)) / rate;
    offsets[i] = t;
  }
  return offsets;
}

}  // namespace mlaserve::bench
