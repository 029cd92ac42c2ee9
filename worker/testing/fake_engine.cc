#include "worker/testing/fake_engine.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mlaserve::testing {
namespace {

// Entry: token, position, layer, then token * (layer + 1) + i for the rest. kv_lora_rank 8 +
// rope 8, widths the real engine stores as they are (model/mla_dims.h), as MakeKvLayout checks.
constexpr int kLatentDim = 16;

void FillEntry(float* e, int32_t token, int pos, int layer) {
  e[0] = static_cast<float>(token);
  e[1] = static_cast<float>(pos);
  e[2] = static_cast<float>(layer);
  for (int i = 3; i < kLatentDim; ++i) e[i] = static_cast<float>(token * (layer + 1) + i);
}

}  // namespace

std::unique_ptr<FakeEngine> FakeEngine::Create(const FakeEngineOptions& options) {
  std::unique_ptr<FakeEngine> e(new FakeEngine);
  model::ModelConfig& c = e->config_;
  c.model_type = model::ModelType::kDeepseekV3;
  c.model_type_name = "deepseek_v3";
  c.vocab_size = options.vocab_size;
  c.hidden_size = 16;
  c.num_hidden_layers = options.num_layers;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = options.max_position_embeddings;
  c.kv_lora_rank = kLatentDim - 8;
  c.qk_rope_head_dim = 8;
  c.qk_nope_head_dim = 8;
  c.v_head_dim = 8;
  c.eos_token_ids = options.eos_token_ids;
  c.layer_is_moe.assign(options.num_layers, false);
  model::KvPoolOptions po;
  po.num_layers = options.num_layers;
  po.num_pages = options.num_pages;
  po.latent_dim = kLatentDim;
  for (int r = 0; r < options.data_ranks; ++r) {
    auto pool = model::KvPool::Create(po);
    if (!pool.ok()) return nullptr;
    e->pools_.push_back(std::move(*pool));
  }
  return e;
}

void FakeEngine::set_after_rank_layer(std::function<void(int rank, int layer)> hook) {
  absl::MutexLock lock(&mu_);
  after_rank_layer_ = std::move(hook);
}

void FakeEngine::set_before_forward(
    std::function<void(std::span<const model::SequenceChunk>)> hook) {
  absl::MutexLock lock(&mu_);
  before_forward_ = std::move(hook);
}

int FakeEngine::forward_calls() const {
  absl::MutexLock lock(&mu_);
  return forward_calls_;
}

std::vector<std::vector<int>> FakeEngine::batch_shapes() const {
  absl::MutexLock lock(&mu_);
  return shapes_;
}

std::vector<model::AttentionPath> FakeEngine::asked_paths() const {
  absl::MutexLock lock(&mu_);
  return paths_;
}

std::vector<std::vector<int>> FakeEngine::batch_ranks() const {
  absl::MutexLock lock(&mu_);
  return ranks_;
}

int32_t FakeEngine::NextToken(std::span<const int32_t> sequence, int vocab_size) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : sequence) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ULL;
  return static_cast<int32_t>((h >> 17) % static_cast<uint64_t>(vocab_size));
}

std::vector<float> FakeEngine::LogitsAfter(std::span<const int32_t> sequence, int vocab_size) {
  std::vector<float> row(vocab_size, 0.0f);
  row[NextToken(sequence, vocab_size)] = kPredictedLogit;
  return row;
}

absl::Status FakeEngine::CheckPromptLogprobs() const {
  if (data_ranks() > 1) {
    return absl::FailedPreconditionError(
        "fake engine: prompt logprobs are not computed under data-parallel attention");
  }
  return absl::OkStatus();
}

std::vector<int32_t> FakeEngine::ExpectedTokens(std::span<const int32_t> prompt, int n,
                                                int vocab_size) {
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(NextToken(seq, vocab_size));
    seq.push_back(out.back());
  }
  return out;
}

absl::Status FakeEngine::BeginForward(std::span<const model::SequenceChunk> batch) {
  std::function<void(std::span<const model::SequenceChunk>)> hook;
  {
    absl::MutexLock lock(&mu_);
    hook = before_forward_;
    ++forward_calls_;
    std::vector<int> shape, ranks;
    for (const auto& c : batch) {
      shape.push_back(static_cast<int>(c.tokens.size()));
      ranks.push_back(c.rank);
    }
    shapes_.push_back(std::move(shape));
    ranks_.push_back(std::move(ranks));
  }
  if (hook) hook(batch);
  for (const auto& c : batch) {
    if (c.rank < 0 || c.rank >= data_ranks()) {
      return absl::InvalidArgumentError(absl::StrCat("chunk for rank ", c.rank, " of ",
                                                     data_ranks()));
    }
    const int end = c.start_pos + static_cast<int>(c.tokens.size());
    if (static_cast<int>(c.pages.size()) * kernels::kPageSize < end) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ends at ", end, " but has ",
                                                     c.pages.size(), " pages"));
    }
  }
  return absl::OkStatus();
}

absl::Status FakeEngine::WriteLayer(const model::SequenceChunk& c, int layer) {
  const int P = kernels::kPageSize;
  model::KvPool* pool = pools_[c.rank].get();
  std::vector<float> page(pool->layer_page_bytes() / sizeof(float));
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    const int pos = c.start_pos + static_cast<int>(i);
    const int32_t pid = c.pages[pos / P];
    absl::Status s = pool->ReadPage(layer, pid, page.data());
    if (!s.ok()) return s;
    FillEntry(page.data() + (pos % P) * kLatentDim, c.tokens[i], pos, layer);
    s = pool->WritePage(layer, pid, page.data());
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<model::ForwardResult> FakeEngine::Forward(
    std::span<const model::SequenceChunk> batch, model::AttentionPath path,
    const model::LayerDoneFn& on_layer_done) {
  if (absl::Status s = BeginForward(batch); !s.ok()) return s;
  for (int layer = 0; layer < config_.num_hidden_layers; ++layer) {
    for (const auto& c : batch) {
      if (absl::Status s = WriteLayer(c, layer); !s.ok()) return s;
    }
    if (on_layer_done) {
      absl::Status s = on_layer_done(layer);
      if (!s.ok()) return s;
    }
  }
  return FinishForward(batch, path);
}

absl::StatusOr<model::ForwardResult> FakeEngine::ForwardStreamingRanks(
    std::span<const model::SequenceChunk> batch, model::AttentionPath path,
    const model::RankLayerDoneFn& on_rank_layer_done) {
  if (data_ranks() == 1 || !on_rank_layer_done) {
    return Engine::ForwardStreamingRanks(batch, path, on_rank_layer_done);
  }
  if (absl::Status s = BeginForward(batch); !s.ok()) return s;
  std::function<void(int, int)> after;
  {
    absl::MutexLock lock(&mu_);
    after = after_rank_layer_;
  }
  // As a data-parallel engine's ranks do: each rank on a thread of its own writes its chunks
  // layer by layer and hands each layer over at once; a failing callback fails the call after
  // every rank finished.
  const int n = data_ranks();
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    bool any = false;
    for (const auto& c : batch) any = any || c.rank == r;
    if (!any) continue;
    threads.emplace_back([&, r] {
      for (int layer = 0; layer < config_.num_hidden_layers; ++layer) {
        for (const auto& c : batch) {
          if (c.rank != r) continue;
          if (absl::Status s = WriteLayer(c, layer); !s.ok()) {
            status[r] = s;
            return;
          }
        }
        if (status[r].ok()) status[r] = on_rank_layer_done(r, layer);
        if (after) after(r, layer);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return FinishForward(batch, path);
}

absl::StatusOr<model::ForwardResult> FakeEngine::FinishForward(
    std::span<const model::SequenceChunk> batch, model::AttentionPath path) {
  {
    absl::MutexLock lock(&mu_);
    paths_.push_back(path);
  }
  const int P = kernels::kPageSize;
  std::vector<float> page(pools_[0]->layer_page_bytes() / sizeof(float));
  model::ForwardResult result;
  for (size_t b = 0; b < batch.size(); ++b) {
    const model::SequenceChunk& c = batch[b];
    if (!c.want_logits && c.prompt_targets.empty()) continue;
    // Read the whole sequence back from the cache, checking every layer's entry.
    model::KvPool* pool = pools_[c.rank].get();
    const int end = c.start_pos + static_cast<int>(c.tokens.size());
    std::vector<int32_t> seq(end);
    for (int layer = 0; layer < config_.num_hidden_layers; ++layer) {
      for (int pos = 0; pos < end; ++pos) {
        if (pos % P == 0) {
          absl::Status s = pool->ReadPage(layer, c.pages[pos / P], page.data());
          if (!s.ok()) return s;
        }
        const float* e = page.data() + (pos % P) * kLatentDim;
        float want[kLatentDim];
        FillEntry(want, static_cast<int32_t>(e[0]), pos, layer);
        for (int k = 0; k < kLatentDim; ++k) {
          if (e[k] != want[k]) {
            return absl::InternalError(absl::StrCat("fake engine: KV entry of layer ", layer,
                                                    " position ", pos, " is corrupt"));
          }
        }
        if (layer == 0) {
          seq[pos] = static_cast<int32_t>(e[0]);
        } else if (seq[pos] != static_cast<int32_t>(e[0])) {
          return absl::InternalError(absl::StrCat("fake engine: layers disagree at position ",
                                                  pos));
        }
      }
    }
    if (!c.prompt_targets.empty()) {
      // Row i of the chunk scores its target under the logits after seq[0 .. its position].
      if (c.prompt_from < 0 ||
          static_cast<size_t>(c.prompt_from) + c.prompt_targets.size() > c.tokens.size()) {
        return absl::InvalidArgumentError("fake engine: prompt rows past the chunk");
      }
      if (absl::Status s = CheckPromptLogprobs(); !s.ok()) return s;
      result.prompt_logprobs.resize(batch.size());
      for (size_t i = 0; i < c.prompt_targets.size(); ++i) {
        const int pos = c.start_pos + c.prompt_from + static_cast<int>(i);
        const std::vector<float> row =
            LogitsAfter(std::span<const int32_t>(seq).first(pos + 1), config_.vocab_size);
        model::ScorePromptRow(row, c.prompt_targets[i], c.prompt_top_n,
                              &result.prompt_logprobs[b].emplace_back());
      }
    }
    if (!c.want_logits) continue;
    const std::vector<float> row = LogitsAfter(seq, config_.vocab_size);
    result.logits.insert(result.logits.end(), row.begin(), row.end());
    ++result.rows;
  }
  // kSplit reports kMla, as the engine does for a split batch (its leading rows ran latent).
  result.path_used = path == model::AttentionPath::kMha || path == model::AttentionPath::kMhaOurs ||
                             path == model::AttentionPath::kMhaCudnn
                         ? model::AttentionPath::kMha
                         : model::AttentionPath::kMla;
  // Rows that carry their sampling are drawn here, as a real engine does.
  if (const auto samples = model::RequestedSamples(batch); !samples.empty()) {
    auto ids = model::SampleHostLogits(result.logits, config_.vocab_size, samples);
    if (!ids.ok()) return ids.status();
    result.token_ids = std::move(*ids);
  }
  return result;
}

}  // namespace mlaserve::testing
