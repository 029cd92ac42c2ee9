// The check every prefill runner test ends with: the decode side continues from the KV that
// arrived as a local run would.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "kvtransfer/receiver.h"
#include "model/engine.h"
#include "worker/testing/fake_engine.h"

namespace mlaserve::prefill::testing {

// One decode step of the prompt's first token over the received pages, on data-parallel rank
// `rank` of `decode`, must put FakeEngine's next token for prompt + first token at 30
// (FakeEngine reads back and checks every cached entry, so a page that arrived wrong fails
// loudly). The pages then go back to that rank's pool.
inline ::testing::AssertionResult DecodeContinues(::mlaserve::testing::FakeEngine& decode,
                                                  const kvtransfer::KvReceivedKv& kv,
                                                  const std::vector<int32_t>& prompt,
                                                  int rank = 0) {
  const int32_t first = kv.first_token;
  model::SequenceChunk c;
  c.tokens = std::span<const int32_t>(&first, 1);
  c.start_pos = static_cast<int>(prompt.size());
  c.pages = kv.pages;
  c.rank = rank;
  auto fr = decode.Forward(std::span(&c, 1), model::AttentionPath::kMla, nullptr);
  decode.rank_pool(rank).Free(kv.pages);
  if (!fr.ok()) return ::testing::AssertionFailure() << "decode step: " << fr.status();
  std::vector<int32_t> seq = prompt;
  seq.push_back(first);
  const int32_t next = ::mlaserve::testing::FakeEngine::NextToken(seq, 64);
  if (fr->logits[next] != 30.0f) {
    return ::testing::AssertionFailure()
           << "after " << prompt.size() << " prompt tokens and first token " << first
           << ", the next token " << next << " has logit " << fr->logits[next] << ", not 30";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace mlaserve::prefill::testing
