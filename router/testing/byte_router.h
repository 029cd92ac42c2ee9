// Test helper: a router over ByteCodec (the fake workers' model, FakeModelIdentity) with one
// static prefill and one static decode worker, polled until both are routable.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "router/admin_conversion.h"
#include "router/router_context.h"
#include "router/testing/byte_codec.h"
#include "router/testing/fake_workers.h"
#include "router/testing/poll_until_routable.h"

namespace mlaserve::router::testing {

// `options` as the test wants them; the context limit is `max_context` tokens. A worker that
// cannot be added or polled fails the test (the router is returned all the same).
inline std::unique_ptr<RouterContext> StartByteRouter(RouterOptions options, int max_context,
                                                      const std::string& prefill_address,
                                                      const std::string& decode_address) {
  RouterModel m;
  m.identity = ModelFromProto(FakeModelIdentity());
  m.limits.vocab_size = ByteCodec::kVocabSize;
  m.limits.max_context = max_context;
  m.limits.eos_token_ids = {ByteCodec::kEos};
  m.limits.bos_token_id = ByteCodec::kBos;
  auto router = std::make_unique<RouterContext>(std::move(options), m, std::make_unique<ByteCodec>());
  EXPECT_TRUE(router->registry().AddByAddress(WorkerRole::kPrefill, prefill_address, WorkerSource::kStatic).ok());
  EXPECT_TRUE(router->registry().AddByAddress(WorkerRole::kDecode, decode_address, WorkerSource::kStatic).ok());
  EXPECT_TRUE(PollUntilRoutable(router.get(), /*want_prefill=*/true));
  return router;
}

}  // namespace mlaserve::router::testing
