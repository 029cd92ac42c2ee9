// Decode affinity in a cluster in the middle of a rolling upgrade: decode workers of this
// version advertise WorkerDescriptor.remote_prefill_reuse, older ones do not (they ignore
// ReserveRequest.reuse_cached_pages and are shipped every page of a remotely prefilled prompt).
// The router counts a decode worker's cached prefix for a remote prompt only where it is reused;
// for a prompt the decode worker prefills itself, whatever its version.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "router/decode_placement.h"
#include "router/testing/test_workers.h"

namespace mlaserve::router {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// Two decode workers with prefix caches and a local-prefill threshold of 100, o:1 and n:1 (n:1
// of this version; o:1 of this version or an older one, as the test says), and a prefill worker.
// A conversation's first turn (90 prompt tokens and a 10-token answer: 99 computed, one whole
// page) ended on the workers the test names. Its next turn: `turn2_` (140 tokens, 76 past the
// cached page: prefilled locally where that page is held, remotely elsewhere) and `long_turn_`
// (300 tokens: prefilled remotely wherever it goes).
class DecodeAffinityUpgradeTest : public ::testing::Test {
 protected:
  DecodeAffinityUpgradeTest() : registry_({.model = testing::TestModel()}), table_({}) {
    for (int i = 0; i < 90; ++i) first_turn_.push_back(i);
    for (int i = 0; i < 9; ++i) first_turn_.push_back(500 + i);
    turn2_ = first_turn_;
    turn2_.push_back(509);
    for (int i = 0; i < 40; ++i) turn2_.push_back(600 + i);
    long_turn_ = turn2_;
    for (int i = 0; i < 160; ++i) long_turn_.push_back(700 + i);
    EXPECT_TRUE(registry_.Register(testing::TestPrefillWorker("p:1"), kT0).ok());
  }

  // A decode worker with `free` of 100 pages free; `current`: it advertises
  // remote_prefill_reuse (false: a worker that predates the field). Returns its id.
  std::string AddDecode(const std::string& address, int free, bool current) {
    WorkerDescriptor d = testing::TestDecodeWorker(address, free);
    d.profile.local_prefill_threshold = 100;
    d.prefix_cache = true;
    d.remote_prefill_reuse = current;
    return registry_.Register(d, kT0)->id;
  }
  // The first turn ended on `decode_id`: its whole page is recorded there.
  void FirstTurnEndedOn(const std::string& decode_id) { table_.Record(decode_id, first_turn_); }

  // A placement with decode affinity and --remote-prefill-reuse (the defaults).
  DecodePlacement Place(const std::vector<int32_t>& prompt) {
    return DecodePlacement(&registry_, {.prefix_affinity = &table_, .prompt_ids = prompt},
                           static_cast<int32_t>(prompt.size()), 10);
  }

  WorkerRegistry registry_;
  PrefixAffinity table_;
  std::vector<int32_t> first_turn_, turn2_, long_turn_;
};

// Both hold the first turn; o:1, older, has more room. A remote prompt goes to n:1, whose cached
// page is not shipped, ahead of o:1, which would be shipped it whole (equal worth would keep the
// load order: o:1 first). Only n:1 is asked to reuse its pages.
TEST_F(DecodeAffinityUpgradeTest, ARemotePromptCountsTheCacheOnlyOfAWorkerThatReusesIt) {
  const std::string o = AddDecode("o:1", 90, /*current=*/false);
  const std::string n = AddDecode("n:1", 60, /*current=*/true);
  FirstTurnEndedOn(o);
  FirstTurnEndedOn(n);
  DecodePlacement p = Place(long_turn_);
  ASSERT_TRUE(p.Rank().ok());
  absl::StatusOr<DecodePlacement::Target> target = p.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "n:1");
  EXPECT_FALSE(target->local_prefill);
  EXPECT_TRUE(target->reuse_cached_pages);
  EXPECT_EQ(p.decode_expected_cached_tokens(), 64);
  EXPECT_FALSE(p.decode_affinity_rebalanced());
  // n:1 full by its own count: o:1 is next, and not asked for what it cannot do.
  p.ReserveFailed(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no pages"), true);
  target = p.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "o:1");
  EXPECT_FALSE(target->local_prefill);
  EXPECT_FALSE(target->reuse_cached_pages);
  EXPECT_FALSE(p.more_candidates());

  // A prompt both prefill themselves (the first turn's cached page leaves 76 tokens, under the
  // threshold) counts the cache of both: equal worth keeps the load order, o:1 first.
  DecodePlacement local = Place(turn2_);
  ASSERT_TRUE(local.Rank().ok());
  target = local.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "o:1");
  EXPECT_TRUE(target->local_prefill);
  EXPECT_FALSE(target->reuse_cached_pages);
  EXPECT_EQ(local.decode_expected_cached_tokens(), 64);
}

// Only o:1 holds the first turn, and n:1 has more room. Whether o:1 is older or not (the
// parameter: o:1 of this version), the next turn it can prefill itself goes there (its cache
// saves the compute). The long turn, prefilled remotely, goes there too when o:1 is of this
// version (its page is not shipped), but by load, to n:1, when it is older: its cache would save
// nothing there.
class DecodeAffinityVersionTest : public DecodeAffinityUpgradeTest,
                                  public ::testing::WithParamInterface<bool> {};

TEST_P(DecodeAffinityVersionTest, AnOlderWorkersCacheDrawsOnlyThePromptsItPrefillsItself) {
  const bool o_current = GetParam();
  const std::string o = AddDecode("o:1", 60, o_current);
  AddDecode("n:1", 90, /*current=*/true);
  FirstTurnEndedOn(o);

  DecodePlacement local = Place(turn2_);
  ASSERT_TRUE(local.Rank().ok());
  absl::StatusOr<DecodePlacement::Target> target = local.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "o:1");
  EXPECT_TRUE(target->local_prefill);
  EXPECT_FALSE(target->reuse_cached_pages);
  EXPECT_EQ(local.decode_expected_cached_tokens(), 64);
  local.ReleaseDecode();

  DecodePlacement remote = Place(long_turn_);
  ASSERT_TRUE(remote.Rank().ok());
  target = remote.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, o_current ? "o:1" : "n:1");
  EXPECT_FALSE(target->local_prefill);
  EXPECT_TRUE(target->reuse_cached_pages);  // either way a worker of this version
  EXPECT_EQ(remote.decode_expected_cached_tokens(), o_current ? 64 : 0);
  EXPECT_FALSE(remote.decode_affinity_rebalanced());
}

INSTANTIATE_TEST_SUITE_P(OldOrNew, DecodeAffinityVersionTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("AllNew") : std::string("MixedVersions");
                         });

// An all-new cluster ranks as before the capability existed: both hold the first turn, equal
// worth keeps the load order for the remote prompt, and every remote Reserve asks for reuse.
TEST_F(DecodeAffinityUpgradeTest, AnAllNewClusterRanksRemotePromptsByTheirCache) {
  const std::string o = AddDecode("o:1", 90, /*current=*/true);
  const std::string n = AddDecode("n:1", 60, /*current=*/true);
  FirstTurnEndedOn(o);
  FirstTurnEndedOn(n);
  DecodePlacement p = Place(long_turn_);
  ASSERT_TRUE(p.Rank().ok());
  absl::StatusOr<DecodePlacement::Target> target = p.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "o:1");
  EXPECT_TRUE(target->reuse_cached_pages);
  EXPECT_EQ(p.decode_expected_cached_tokens(), 64);
  p.ReserveFailed(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no pages"), true);
  target = p.Next();
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->decode_address, "n:1");
  EXPECT_TRUE(target->reuse_cached_pages);
}

}  // namespace
}  // namespace mlaserve::router
