// LayerContext: what the blocks of one DeepseekEngine share (attention, indexer and
// feed-forward of every layer): the model's shape as stored, where and in which dtype kernels
// run, the step's scratch, the RoPE table and the KV cache. The engine owns it and builds it
// once at Create; blocks hold a const pointer and never change it.
#pragma once

#include <cstddef>

#include "kernels/mha_prefill/api.h"
#include "model/forward_ops.h"
#include "model/kv_cache/latent_kv_cache.h"
#include "model/loader/config.h"
#include "model/mla_dims.h"
#include "model/model_widths.h"
#include "model/parallel_layout.h"
#include "model/rope.h"
#include "model/step/batch_plan.h"
#include "model/step/step_scratch.h"
#include "model/step/weight_prefetch.h"

namespace mlaserve::model {

// How a step is cut into kernel launches; never what it computes (any value gives the same
// function), so tests lower them to reach the multi-launch paths on short prompts
// (testing/deepseek_engine_test_peer.h).
struct LaunchLimits {
  // MHA form: prefix tokens per sequence decompressed at once (also capped so a piece holds
  // at most max_batch_tokens rows over the batch).
  int mha_prefix_piece_tokens = 4096;
  // DSA on kCuda: query rows of one indexer launch; 0 = as many as the workspace holds.
  int indexer_rows_per_launch = 0;
};

struct LayerContext {
  const ModelConfig* config = nullptr;
  MlaDims dims;   // the MLA widths as stored (mla_dims.h)
  // The hidden state's width and this rank's intermediate slices as stored (model_widths.h):
  // every activation row and weight the blocks touch has these widths; only the RMSNorms over
  // the hidden state read config->hidden_size.
  ModelWidths widths;
  int heads = 0;  // the attention heads of this rank (all of them on one GPU)
  const ParallelLayout* layout = nullptr;  // this rank's shards
  ops::OpContext ops;                      // backend, stream, activation dtype
  int num_sms = 0;
  double dram_bytes_per_sm_clock = 0;  // the device's (DramBytesPerSmClock): the decode plan reads it
  BatchLimits limits;         // max_batch_tokens / max_batch_seqs the scratch is sized for
  int max_pages_per_seq = 0;  // bound on BatchPlan::max_pages_per_seq
  kernels::MhaPrefillProvider mha_provider = kernels::MhaPrefillProvider::kAuto;
  // DSA: the width of an indexer key / query head as stored and given to the kernel
  // (DsaIndexer::KeyDim), and the CUDA indexer's score workspace planned at Create.
  int index_key_dim = 0;
  size_t indexer_workspace_bytes = 0;
  LaunchLimits launch;

  StepScratch* scratch = nullptr;
  LatentKvCache* cache = nullptr;
  const RopeTable* rope = nullptr;
  const float* cos_sin = nullptr;  // rope->cos_sin where the kernels read it (device on kCuda)
  // The L2 prefetch of the weights after a decode step's attention; null = none.
  WeightPrefetch* prefetch = nullptr;
};

}  // namespace mlaserve::model
