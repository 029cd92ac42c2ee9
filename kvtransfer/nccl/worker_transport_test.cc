// Per-pair transport selection on the prefill side, and the decode worker's offer.
#include "kvtransfer/nccl/worker_transport.h"

#include "gtest/gtest.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

// Records which transport a session was opened on; refuses the open so no sender is needed.
class Recorder final : public KvTransport {
 public:
  explicit Recorder(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<std::unique_ptr<KvSender>> Open(const KvSessionRef& ref, const KvLayout&,
                                                 const KvSenderOptions&) override {
    opened.push_back(ref.transport);
    return absl::AbortedError(name_);
  }
  std::vector<std::string> opened;

 private:
  std::string name_;
};

class SelectTest : public ::testing::Test {
 protected:
  // Which transport `flag` (with or without nccl) uses against a decode offer.
  std::string Pick(const std::string& flag, bool nccl, const std::string& offer,
                   absl::StatusCode* code = nullptr) {
    Recorder tcp("tcp"), nc("nccl");
    SelectingKvTransport t(flag, nccl, &tcp, nccl ? &nc : nullptr);
    const KvLayout layout = testing::SmallLayout(testing::SmallPoolOptions());
    auto s = t.Open({"s", "127.0.0.1:1", offer, 1, layout.CompatHash()}, layout, {});
    if (code != nullptr) *code = s.status().code();
    if (s.status().code() != absl::StatusCode::kAborted) return "refused";
    return std::string(s.status().message());
  }
};

TEST_F(SelectTest, AutoUsesNcclOnlyWhenBothSidesCan) {
  EXPECT_EQ(Pick("auto", true, "nccl"), "nccl");
  EXPECT_EQ(Pick("auto", false, "nccl"), "tcp");  // CPU prefill, GPU decode
  EXPECT_EQ(Pick("auto", true, "tcp"), "tcp");    // the decode worker offers tcp only
  EXPECT_EQ(Pick("tcp", true, "nccl"), "tcp");
  EXPECT_EQ(Pick("nccl", true, "nccl"), "nccl");
}

TEST_F(SelectTest, ForcedNcclThePairCannotHonourIsRefusedNamingWhy) {
  absl::StatusCode code;
  EXPECT_EQ(Pick("nccl", true, "tcp", &code), "refused");
  EXPECT_EQ(code, absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Pick("auto", true, "rdma", &code), "refused");
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
}

TEST(DecodeOfferTest, OffersNcclWithAGpuPoolAndNccl) {
  EXPECT_EQ(DecodeOffer("auto", true, true), "nccl");
  EXPECT_EQ(DecodeOffer("nccl", true, true), "nccl");
  EXPECT_EQ(DecodeOffer("tcp", true, true), "tcp");
  EXPECT_EQ(DecodeOffer("auto", false, true), "tcp");
  EXPECT_EQ(DecodeOffer("auto", true, false), "tcp");
  EXPECT_TRUE(CheckNcclFlag("auto", false, false).ok());
  EXPECT_EQ(CheckNcclFlag("nccl", false, true).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(CheckNcclFlag("nccl", true, false).message().find("without NCCL"), std::string::npos);
}

}  // namespace
}  // namespace mlaserve::kvtransfer::nccl
