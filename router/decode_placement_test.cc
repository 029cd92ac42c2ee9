#include "router/decode_placement.h"

#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/testing/test_workers.h"

namespace mlaserve::router {
namespace {

using ::testing::HasSubstr;
using Verdict = DecodePlacement::Failure::Verdict;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

class DecodePlacementTest : public ::testing::Test {
 protected:
  DecodePlacementTest() : registry_({.model = testing::TestModel()}) {}

  // A self-registered decode worker with `free` of 100 pages free; returns its id.
  std::string AddDecode(const std::string& address, int free, int local_threshold = 0,
                        bool prefix_cache = false) {
    WorkerDescriptor d = testing::TestDecodeWorker(address, free);
    d.profile.local_prefill_threshold = local_threshold;
    d.prefix_cache = prefix_cache;
    return registry_.Register(d, kT0)->id;
  }
  std::string AddPrefill(const std::string& address) {
    return registry_.Register(testing::TestPrefillWorker(address), kT0)->id;
  }
  DecodePlacement Placement(int32_t prompt, int32_t max_new = 10, int attempts = 3) {
    return DecodePlacement(&registry_, {.max_attempts = attempts}, prompt, max_new);
  }
  // A placement that ranks prefill workers with the prefix-affinity table `table`.
  DecodePlacement AffinePlacement(PrefixAffinity* table, const std::vector<int32_t>& prompt,
                                  std::string_view cache_salt = {}) {
    return DecodePlacement(
        &registry_, {.prefix_affinity = table, .prompt_ids = prompt, .cache_salt = cache_salt},
        static_cast<int32_t>(prompt.size()), 10);
  }
  // A placement that ranks the decode workers with `table` and `affinity`; `logprobs`: the
  // request must be prefilled on its decode worker.
  // `remote_reuse`: Options::remote_prefill_reuse (--remote-prefill-reuse).
  DecodePlacement DecodeAffinePlacement(PrefixAffinity* table, const std::vector<int32_t>& prompt,
                                        DecodeAffinityOptions affinity = {},
                                        bool logprobs = false, bool cache_usable = true,
                                        bool remote_reuse = true) {
    return DecodePlacement(&registry_,
                           {.prefill_locally = logprobs,
                            .prefix_affinity = table,
                            .prompt_ids = prompt,
                            .decode_affinity = affinity,
                            .decode_cache_usable = cache_usable,
                            .remote_prefill_reuse = remote_reuse},
                           static_cast<int32_t>(prompt.size()), 10);
  }
  // The decode worker `placement` tries first, or why none.
  std::string FirstDecode(DecodePlacement placement) {
    if (absl::Status s = placement.Rank(); !s.ok()) return s.ToString();
    absl::StatusOr<DecodePlacement::Target> target = placement.Next();
    return target.ok() ? target->decode_address : target.status().ToString();
  }
  // The prefill worker `placement` picks; charged (the prompt sent) and released again.
  std::string PrefillSent(DecodePlacement placement) {
    if (!placement.Rank().ok() || !placement.Next().ok()) return "(no placement)";
    placement.ChargePrefill();
    placement.ReleasePrefill();
    return placement.prefill_id();
  }
  WorkerSnapshot Get(const std::string& id) { return *registry_.Get(id); }

  WorkerRegistry registry_;
};

TEST_F(DecodePlacementTest, TriesTheWorkersWithTheMostFreePagesFirstUpToTheAttemptLimit) {
  const std::string a = AddDecode("a:1", 10), b = AddDecode("b:1", 90), c = AddDecode("c:1", 50);
  AddPrefill("p:1");
  DecodePlacement p = Placement(100, 10, /*attempts=*/2);
  ASSERT_TRUE(p.Rank().ok());
  auto first = p.Next();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->decode_address, "b:1");
  EXPECT_FALSE(first->local_prefill);
  EXPECT_EQ(first->prefill_kv_compat_hash, "hash-p:1");
  EXPECT_EQ(p.decode_id(), b);
  EXPECT_TRUE(p.more_candidates());
  p.ReserveFailed(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"), true);
  EXPECT_EQ(p.Next()->decode_address, "c:1");
  EXPECT_FALSE(p.more_candidates());  // a:1 is past the two attempts
  EXPECT_EQ(p.Next().status().code(), absl::StatusCode::kUnavailable);
  (void)a;
}

TEST_F(DecodePlacementTest, ChargesTheRouterLoadWhileItHoldsAWorker) {
  const std::string d = AddDecode("d:1", 50);
  AddPrefill("p:1");
  {
    DecodePlacement p = Placement(100);  // 100 prompt tokens + the first new one: 2 pages
    ASSERT_TRUE(p.Rank().ok());
    ASSERT_TRUE(p.Next().ok());
    EXPECT_EQ(Get(d).router_inflight, 1);
    EXPECT_EQ(Get(d).router_reserved_pages, 2);
    p.Reserved(3);  // the worker's own count replaces the estimate
    EXPECT_EQ(Get(d).router_reserved_pages, 3);
    p.ChargePrefill();
    EXPECT_EQ(Get(p.prefill_id()).router_prefill_tokens, 100);
    p.ReleasePrefill();
    EXPECT_EQ(Get(p.prefill_id()).router_prefill_tokens, 0);
    EXPECT_TRUE(p.ReleaseDecode());
    EXPECT_FALSE(p.ReleaseDecode());  // once
    EXPECT_EQ(Get(d).router_inflight, 0);
    EXPECT_EQ(Get(d).router_reserved_pages, 0);
    ASSERT_TRUE(p.Rank().ok());
    ASSERT_TRUE(p.Next().ok());
  }
  // What a placement still holds when it goes away is released.
  EXPECT_EQ(Get(d).router_inflight, 0);
  EXPECT_EQ(Get(d).router_reserved_pages, 0);
}

TEST_F(DecodePlacementTest, NoRoomNowIsWorthWaitingForButNoPoolLargeEnoughIsNot) {
  AddDecode("d:1", 1);
  DecodePlacement now = Placement(200);  // needs 4 pages now
  absl::Status s = now.Rank();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("no decode worker has room for 4 KV pages now"));
  EXPECT_TRUE(now.no_room_now());
  DecodePlacement ever = Placement(200, 7000);  // 113 pages at most: more than any pool
  s = ever.Rank();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("no decode worker can ever hold 113 KV pages"));
  EXPECT_FALSE(ever.no_room_now());
}

TEST_F(DecodePlacementTest, NoDecodeOrPrefillWorkerIsUnavailableNamingWhy) {
  DecodePlacement none = Placement(100);
  absl::Status s = none.Rank();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("no healthy decode worker: none is registered"));
  AddDecode("d:1", 50, /*local_threshold=*/64);
  DecodePlacement long_prompt = Placement(100);
  ASSERT_TRUE(long_prompt.Rank().ok());
  s = long_prompt.Next().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("no healthy prefill worker for a prompt of 100 tokens "
                                     "(above decode-1's local-prefill threshold of 64)"));
  // A prompt within the threshold is prefilled on the decode worker: no prefill worker needed.
  DecodePlacement short_prompt = Placement(64);
  ASSERT_TRUE(short_prompt.Rank().ok());
  auto target = short_prompt.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_TRUE(target->local_prefill);
  EXPECT_TRUE(target->prefill_kv_compat_hash.empty());
}

TEST_F(DecodePlacementTest, ReserveFailuresRetryWaitOrFail) {
  const std::string a = AddDecode("a:1", 90), b = AddDecode("b:1", 80);
  AddPrefill("p:1");
  DecodePlacement p = Placement(100);
  ASSERT_TRUE(p.Rank().ok());
  ASSERT_TRUE(p.Next().ok());
  // Unreachable: the worker is reported unhealthy and the next one is tried.
  DecodePlacement::Failure f =
      p.ReserveFailed(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"), true);
  EXPECT_EQ(f.verdict, Verdict::kRetry);
  EXPECT_FALSE(f.hung);
  EXPECT_EQ(Get(a).state, WorkerState::kUnhealthy);
  EXPECT_EQ(Get(a).router_inflight, 0);
  ASSERT_TRUE(p.Next().ok());
  // The last candidate full by its own count: wait for room.
  f = p.ReserveFailed(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no pages"), true);
  EXPECT_EQ(f.verdict, Verdict::kWaitForRoom);
  EXPECT_EQ(f.error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(f.error.message(),
              HasSubstr("reserve on decode worker " + b + " (b:1) failed: no pages"));
  EXPECT_EQ(Get(b).state, WorkerState::kHealthy);
  // A request the worker refuses: fail, naming it; bookkeeping codes read as UNAVAILABLE.
  ASSERT_TRUE(p.Rank().ok());
  ASSERT_TRUE(p.Next().ok());
  f = p.ReserveFailed(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad prompt"), true);
  EXPECT_EQ(f.verdict, Verdict::kFail);
  EXPECT_EQ(f.error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WorkerError("x", "w", "h:1", grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "")).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(DecodePlacementTest, AWorkerThatDoesNotAnswerInTimeIsHungAndUnhealthy) {
  const std::string a = AddDecode("a:1", 90);
  AddPrefill("p:1");
  DecodePlacement p = Placement(100);
  ASSERT_TRUE(p.Rank().ok());
  ASSERT_TRUE(p.Next().ok());
  DecodePlacement::Failure f =
      p.ReserveFailed(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline"), true);
  EXPECT_TRUE(f.hung);
  EXPECT_EQ(f.verdict, Verdict::kFail);  // no other candidate
  EXPECT_EQ(f.error.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(f.error.message(), HasSubstr("no answer within the reserve timeout"));
  EXPECT_EQ(Get(a).state, WorkerState::kUnhealthy);
  // The call's own deadline passed: that is the client's deadline, not a hung worker.
  const std::string b = AddDecode("b:1", 90);
  ASSERT_TRUE(p.Rank().ok());
  ASSERT_TRUE(p.Next().ok());
  f = p.ReserveFailed(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline"), false);
  EXPECT_FALSE(f.hung);
  EXPECT_EQ(f.error.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Get(b).state, WorkerState::kHealthy);
}

TEST_F(DecodePlacementTest, ACandidateThatTurnedUnhealthyIsSkipped) {
  const std::string a = AddDecode("a:1", 90);
  AddDecode("b:1", 80);
  AddPrefill("p:1");
  DecodePlacement p = Placement(100);
  ASSERT_TRUE(p.Rank().ok());
  registry_.ReportFailure(a, "gone", kT0);
  auto target = p.Next();
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(target->decode_address, "b:1");
}

// A prompt of a 960-token shared prefix (15 pages) and 40 tokens of its own (`seed`).
std::vector<int32_t> SharedPrefixPrompt(int32_t seed) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < 960; ++i) p.push_back(i);
  for (int32_t i = 0; i < 40; ++i) p.push_back(seed * 1000 + i);
  return p;
}

TEST_F(DecodePlacementTest, APromptSharingALongPrefixGoesToThePrefillWorkerThatHasIt) {
  AddDecode("d:1", 90);
  const std::string p1 = AddPrefill("p:1"), p2 = AddPrefill("p:2");
  PrefixAffinity table({});
  // The first prompt goes to p2: p1 is busy for now.
  registry_.AddRouterLoad(p1, {.prefill_tokens = 500});
  EXPECT_EQ(PrefillSent(AffinePlacement(&table, SharedPrefixPrompt(1))), p2);
  registry_.AddRouterLoad(p1, {.prefill_tokens = -500});
  // Equal loads now: the same prefix follows p2, which is expected to reuse its 15 pages and
  // is charged only the 40 tokens it computes while the prefill runs.
  DecodePlacement second = AffinePlacement(&table, SharedPrefixPrompt(2));
  ASSERT_TRUE(second.Rank().ok());
  ASSERT_TRUE(second.Next().ok());
  EXPECT_EQ(second.prefill_id(), p2);
  second.ChargePrefill();
  EXPECT_EQ(second.prefill_expected_cached_tokens(), 960);
  EXPECT_EQ(Get(p2).router_prefill_tokens, 40);
  second.ReleasePrefill();
  EXPECT_EQ(Get(p2).router_prefill_tokens, 0);
  // Another prefix ties on load and goes by id; without the table so does this prefix.
  std::vector<int32_t> other = SharedPrefixPrompt(3);
  other[0] = -1;
  EXPECT_EQ(PrefillSent(AffinePlacement(&table, other)), p1);
  EXPECT_EQ(PrefillSent(AffinePlacement(nullptr, SharedPrefixPrompt(4))), p1);
  // A worker busier by more than the prefix saves loses it: 1000 tokens queued on p2.
  registry_.AddRouterLoad(p2, {.prefill_tokens = 1000});
  EXPECT_EQ(PrefillSent(AffinePlacement(&table, SharedPrefixPrompt(5))), p1);
}

// A conversation's next turn is longer than the decode worker's local-prefill threshold, but
// that worker holds the earlier turn (prompt and answer) in its prefix cache: it computes only
// the rest, which is under the threshold, so it prefills the turn itself.
TEST_F(DecodePlacementTest, ADecodeWorkerHoldingTheEarlierTurnPrefillsTheNextItself) {
  AddDecode("d:1", 90, /*local_threshold=*/100, /*prefix_cache=*/true);
  AddPrefill("p:1");
  PrefixAffinity table({});
  std::vector<int32_t> turn1(90);
  for (int i = 0; i < 90; ++i) turn1[i] = i;
  DecodePlacement first = AffinePlacement(&table, turn1);
  ASSERT_TRUE(first.Rank().ok());
  ASSERT_TRUE(first.Next().ok());
  EXPECT_TRUE(first.local_prefill());
  EXPECT_EQ(first.decode_expected_cached_tokens(), 0);
  const std::vector<int32_t> answer = {500, 501, 502, 503, 504, 505, 506, 507, 508, 509};
  first.RecordDecoded(turn1, answer, {});  // 99 tokens computed: one whole page
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), answer.begin(), answer.end());
  for (int i = 0; i < 40; ++i) turn2.push_back(600 + i);  // 140 tokens, 76 uncached
  DecodePlacement second = AffinePlacement(&table, turn2);
  ASSERT_TRUE(second.Rank().ok());
  ASSERT_TRUE(second.Next().ok());
  EXPECT_EQ(second.decode_expected_cached_tokens(), 64);
  EXPECT_TRUE(second.local_prefill());
  // Another salt, or no table: the whole 140 tokens count, over the threshold.
  DecodePlacement salted = AffinePlacement(&table, turn2, "tenant-b");
  ASSERT_TRUE(salted.Rank().ok());
  ASSERT_TRUE(salted.Next().ok());
  EXPECT_FALSE(salted.local_prefill());
  DecodePlacement plain = AffinePlacement(nullptr, turn2);
  ASSERT_TRUE(plain.Rank().ok());
  ASSERT_TRUE(plain.Next().ok());
  EXPECT_FALSE(plain.local_prefill());
}

// A decode worker without a prefix cache is never expected to hold anything.
TEST_F(DecodePlacementTest, ADecodeWorkerWithoutAPrefixCacheComputesTheWholePrompt) {
  AddDecode("d:1", 90, /*local_threshold=*/100, /*prefix_cache=*/false);
  AddPrefill("p:1");
  PrefixAffinity table({});
  std::vector<int32_t> turn1(90, 7);
  DecodePlacement first = AffinePlacement(&table, turn1);
  ASSERT_TRUE(first.Rank().ok());
  ASSERT_TRUE(first.Next().ok());
  first.RecordDecoded(turn1, std::vector<int32_t>(10, 8), {});
  std::vector<int32_t> turn2 = turn1;
  turn2.resize(140, 9);
  DecodePlacement second = AffinePlacement(&table, turn2);
  ASSERT_TRUE(second.Rank().ok());
  ASSERT_TRUE(second.Next().ok());
  EXPECT_EQ(second.decode_expected_cached_tokens(), 0);
  EXPECT_FALSE(second.local_prefill());
}

TEST_F(DecodePlacementTest, APrefixSentUnderAnotherCacheSaltIsNotExpectedCached) {
  AddDecode("d:1", 90);
  const std::string p1 = AddPrefill("p:1"), p2 = AddPrefill("p:2");
  PrefixAffinity table({});
  registry_.AddRouterLoad(p1, {.prefill_tokens = 500});
  EXPECT_EQ(PrefillSent(AffinePlacement(&table, SharedPrefixPrompt(1), "tenant-a")), p2);
  registry_.AddRouterLoad(p1, {.prefill_tokens = -500});
  // Another salt shares no cached pages with it: no affinity, the whole prompt charged, and the
  // tie on load goes by id.
  DecodePlacement other = AffinePlacement(&table, SharedPrefixPrompt(2), "tenant-b");
  ASSERT_TRUE(other.Rank().ok());
  ASSERT_TRUE(other.Next().ok());
  EXPECT_EQ(other.prefill_id(), p1);
  other.ChargePrefill();
  EXPECT_EQ(other.prefill_expected_cached_tokens(), 0);
  EXPECT_EQ(Get(p1).router_prefill_tokens, 1000);
  other.ReleasePrefill();
  // The same salt follows its prefix.
  DecodePlacement same = AffinePlacement(&table, SharedPrefixPrompt(3), "tenant-a");
  ASSERT_TRUE(same.Rank().ok());
  ASSERT_TRUE(same.Next().ok());
  EXPECT_EQ(same.prefill_id(), p2);
  same.ChargePrefill();
  EXPECT_EQ(same.prefill_expected_cached_tokens(), 960);
}

TEST_F(DecodePlacementTest, WithoutPrefixAffinityThePrefillWorkerIsChargedTheWholePrompt) {
  AddDecode("d:1", 90);
  const std::string p1 = AddPrefill("p:1");
  DecodePlacement p = AffinePlacement(nullptr, SharedPrefixPrompt(1));
  ASSERT_TRUE(p.Rank().ok());
  ASSERT_TRUE(p.Next().ok());
  p.ChargePrefill();
  EXPECT_EQ(p.prefill_expected_cached_tokens(), 0);
  EXPECT_EQ(Get(p1).router_prefill_tokens, 1000);
}

// Decode affinity (DecodeAffinityOptions): two decode workers with prefix caches and a
// local-prefill threshold of 100; a conversation's first turn (90 prompt tokens + a 10-token
// answer: 99 computed, one whole page) ended on b:1, which has less room than a:1. Its next
// turn (140 tokens) would be prefilled remotely on a:1 (140 > 100) but locally on b:1 (76
// tokens past the cached page).
class DecodeAffinityTest : public DecodePlacementTest {
 protected:
  DecodeAffinityTest() : table_({}) {
    a_ = AddDecode("a:1", 90, /*local_threshold=*/100, /*prefix_cache=*/true);
    b_ = AddDecode("b:1", 60, /*local_threshold=*/100, /*prefix_cache=*/true);
    AddPrefill("p:1");
    for (int i = 0; i < 90; ++i) turn1_.push_back(i);
    std::vector<int32_t> computed = turn1_;
    for (int i = 0; i < 9; ++i) computed.push_back(500 + i);
    table_.Record(b_, computed);
    turn2_ = computed;
    turn2_.push_back(509);
    for (int i = 0; i < 40; ++i) turn2_.push_back(600 + i);
  }

  PrefixAffinity table_;
  std::string a_, b_;
  std::vector<int32_t> turn1_, turn2_;
};

TEST_F(DecodeAffinityTest, TheNextTurnGoesToTheWorkerHoldingTheEarlierOne) {
  DecodePlacement p = DecodeAffinePlacement(&table_, turn2_);
  ASSERT_TRUE(p.Rank().ok());
  auto target = p.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "b:1");
  EXPECT_TRUE(target->local_prefill);
  EXPECT_EQ(p.decode_expected_cached_tokens(), 64);
  EXPECT_FALSE(p.decode_affinity_rebalanced());
  // b:1 full by its own count: the next candidate is the load order's, holding nothing, so the
  // turn goes to the prefill worker.
  p.ReserveFailed(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no pages"), true);
  target = p.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "a:1");
  EXPECT_FALSE(target->local_prefill);
  EXPECT_EQ(p.decode_expected_cached_tokens(), 0);
  // Another conversation goes by load; so does this one once a:1 holds as much of it.
  std::vector<int32_t> other = turn2_;
  other[0] = -1;
  EXPECT_EQ(FirstDecode(DecodeAffinePlacement(&table_, other)), "a:1");
  table_.Record(a_, std::vector<int32_t>(turn2_.begin(), turn2_.begin() + 99));
  EXPECT_EQ(FirstDecode(DecodeAffinePlacement(&table_, turn2_)), "a:1");
}

TEST_F(DecodeAffinityTest, AnOverloadedWorkerLosesItsAffinity) {
  // Defaults: overloaded past 16 requests more than the least loaded and 1.5 times as many.
  registry_.AddRouterLoad(b_, {.inflight = 16});
  EXPECT_EQ(FirstDecode(DecodeAffinePlacement(&table_, turn2_)), "b:1");
  registry_.AddRouterLoad(b_, {.inflight = 1});  // 17 against 0
  DecodePlacement over = DecodeAffinePlacement(&table_, turn2_);
  ASSERT_TRUE(over.Rank().ok());
  ASSERT_TRUE(over.Next().ok());
  EXPECT_EQ(over.decode_address(), "a:1");
  EXPECT_TRUE(over.decode_affinity_rebalanced());
  EXPECT_FALSE(over.local_prefill());
  over.ReleaseDecode();
  // Both rules must hold: 19 more than a:1's 40 is not 1.5 times as many, 21 more is.
  registry_.AddRouterLoad(a_, {.inflight = 40});
  registry_.AddRouterLoad(b_, {.inflight = 59 - 17});
  EXPECT_EQ(FirstDecode(DecodeAffinePlacement(&table_, turn2_)), "b:1");
  registry_.AddRouterLoad(b_, {.inflight = 2});
  EXPECT_EQ(FirstDecode(DecodeAffinePlacement(&table_, turn2_)), "a:1");
  // The thresholds are the operator's: 30 more requests allowed.
  EXPECT_EQ(FirstDecode(DecodeAffinePlacement(&table_, turn2_, {.balance_abs = 30})), "b:1");
}

TEST_F(DecodeAffinityTest, AWorkerWithoutRoomIsNeverChosen) {
  registry_.AddRouterLoad(b_, {.reserved_pages = 58});  // 2 pages free; the turn needs 3
  DecodePlacement p = DecodeAffinePlacement(&table_, turn2_);
  ASSERT_TRUE(p.Rank().ok());
  ASSERT_TRUE(p.Next().ok());
  EXPECT_EQ(p.decode_address(), "a:1");
  EXPECT_FALSE(p.more_candidates());  // b:1 is not a candidate at all
  EXPECT_FALSE(p.decode_affinity_rebalanced());
}

TEST_F(DecodeAffinityTest, ARemotelyPrefilledPromptGoesWhereItsPagesNeedNotBeShipped) {
  // 300 tokens: past the threshold even less the cached page, so the prompt is prefilled on
  // the prefill worker wherever it goes; b:1 keeps its cached page and receives only the rest
  // (remote prefill reuse), so it is worth that page.
  std::vector<int32_t> long_turn = turn2_;
  for (int i = 0; i < 160; ++i) long_turn.push_back(700 + i);
  DecodePlacement p = DecodeAffinePlacement(&table_, long_turn);
  ASSERT_TRUE(p.Rank().ok());
  auto target = p.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "b:1");
  EXPECT_FALSE(target->local_prefill);
  EXPECT_TRUE(target->reuse_cached_pages);
  EXPECT_EQ(p.decode_expected_cached_tokens(), 64);
  p.ReleaseDecode();
  // The balance rule holds as for local prefills: overloaded, b:1 yields to a:1, which is
  // still asked to reuse what it may hold.
  registry_.AddRouterLoad(b_, {.inflight = 17});
  DecodePlacement over = DecodeAffinePlacement(&table_, long_turn);
  ASSERT_TRUE(over.Rank().ok());
  target = over.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "a:1");
  EXPECT_TRUE(target->reuse_cached_pages);
  EXPECT_TRUE(over.decode_affinity_rebalanced());
  over.ReleaseDecode();
  registry_.AddRouterLoad(b_, {.inflight = -17});
  // --remote-prefill-reuse=false: the prompt's KV is shipped whole, so it goes by load, and
  // the decode worker is not asked to reuse anything.
  DecodePlacement off = DecodeAffinePlacement(&table_, long_turn, {}, false, true,
                                              /*remote_reuse=*/false);
  ASSERT_TRUE(off.Rank().ok());
  target = off.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "a:1");
  EXPECT_FALSE(target->reuse_cached_pages);
  off.ReleaseDecode();
  // A request with logprobs is prefilled on its decode worker whatever its length: b:1, and
  // a local prefill has nothing shipped to reuse.
  DecodePlacement local = DecodeAffinePlacement(&table_, long_turn, {}, /*logprobs=*/true);
  ASSERT_TRUE(local.Rank().ok());
  target = local.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "b:1");
  EXPECT_TRUE(target->local_prefill);
  EXPECT_FALSE(target->reuse_cached_pages);
}

TEST_F(DecodeAffinityTest, PromptLogprobsGoByLoad) {
  // Prompt logprobs score every prompt row on the decode worker, which then takes nothing from
  // its cache: b:1's cached start is worth nothing, and the placement expects no cached tokens.
  DecodePlacement p = DecodeAffinePlacement(&table_, turn2_, {}, /*logprobs=*/true,
                                            /*cache_usable=*/false);
  ASSERT_TRUE(p.Rank().ok());
  auto target = p.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "a:1");
  EXPECT_TRUE(target->local_prefill);
  EXPECT_EQ(p.decode_expected_cached_tokens(), 0);
  EXPECT_FALSE(p.decode_affinity_rebalanced());
}

TEST_F(DecodeAffinityTest, WithoutAffinityTheRankingIsByLoad) {
  EXPECT_EQ(FirstDecode(DecodeAffinePlacement(nullptr, turn2_)), "a:1");
  DecodePlacement off = DecodeAffinePlacement(&table_, turn2_, {.enabled = false});
  ASSERT_TRUE(off.Rank().ok());
  ASSERT_TRUE(off.Next().ok());
  EXPECT_EQ(off.decode_address(), "a:1");
  EXPECT_FALSE(off.local_prefill());
  EXPECT_FALSE(off.decode_affinity_rebalanced());
  // A worker whose descriptor says it has no prefix cache is expected to hold nothing.
  const std::string c = AddDecode("c:1", 50, /*local_threshold=*/100, /*prefix_cache=*/false);
  table_.Record(c, std::vector<int32_t>(turn2_.begin(), turn2_.begin() + 99));
  registry_.AddRouterLoad(b_, {.reserved_pages = 58});
  EXPECT_EQ(FirstDecode(DecodeAffinePlacement(&table_, turn2_)), "a:1");
}

}  // namespace
}  // namespace mlaserve::router
