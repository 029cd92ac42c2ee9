// Test helpers shared by the transport tests (tcp, nccl) and the prefill runner's:
//  * PoolPair: a source (prefill) and a destination (decode) pool of the same small layout,
//    random page contents and a byte-for-byte check of what arrived;
//  * ReceivingEnd: the decode side of a transfer, a KvReceiver behind KvServiceImpl (and any
//    other KV service, such as KvNcclServiceImpl) on 127.0.0.1:0.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/server.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_service.h"
#include "kvtransfer/receiver.h"
#include "kvtransfer/testing/probes.h"
#include "kvtransfer/testing/test_pool.h"

namespace mlaserve::kvtransfer::testing {

struct PoolPair {
  explicit PoolPair(int num_pages = 32) { Reset(SmallPoolOptions(num_pages)); }

  // New pools (and layout) with `o`, e.g. another cache format.
  void Reset(const model::KvPoolOptions& o) {
    options = o;
    src = MakePool(o);
    dst = MakePool(o);
    layout = SmallLayout(o);
  }
  // Fills `pages` of the source pool with random bytes; returns them per (layer, index).
  std::vector<std::string> FillSource(const std::vector<int32_t>& pages) {
    std::vector<std::string> out;
    for (int layer = 0; layer < options.num_layers; ++layer) {
      for (int32_t p : pages) {
        out.push_back(RandomBytes(src->layer_page_bytes(), rng));
        EXPECT_TRUE(src->WritePage(layer, p, out.back().data()).ok());
      }
    }
    return out;
  }
  // Every layer of `dst_pages` holds what FillSource returned, in the same order.
  void ExpectArrived(const std::vector<int32_t>& dst_pages,
                     const std::vector<std::string>& data) const {
    const size_t n = data.size() / options.num_layers;
    for (int layer = 0; layer < options.num_layers; ++layer) {
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(ReadLayerPage(*dst, layer, dst_pages[i]), data[layer * n + i])
            << "layer " << layer << " page " << i;
      }
    }
  }
  // Bytes a transfer of `pages` pages of every layer moves.
  int64_t TransferBytes(int pages) const {
    return int64_t{pages} * options.num_layers * static_cast<int64_t>(src->layer_page_bytes());
  }

  model::KvPoolOptions options;
  std::unique_ptr<model::KvPool> src, dst;
  KvLayout layout;
  std::mt19937 rng{std::random_device{}()};
};

class ReceivingEnd {
 public:
  ReceivingEnd(model::KvPool* pool, const KvLayout& layout,
               absl::Duration no_progress = absl::Seconds(30))
      : layout_(layout),
        receiver_(pool, layout, KvReceiverOptions{no_progress}),
        kv_service_(&receiver_) {}
  ~ReceivingEnd() { Stop(); }

  KvReceiver& receiver() { return receiver_; }

  // Serves KvService and `more` (which must outlive this object) on 127.0.0.1:0.
  absl::Status Start(const std::vector<grpc::Service*>& more = {}) {
    common::ServerOptions so;
    so.listen = "127.0.0.1:0";
    server_ = std::make_unique<common::ServerRunner>(so);
    server_->AddService(&kv_service_);
    for (grpc::Service* s : more) server_->AddService(s);
    return server_->Start();
  }
  const std::string& address() const { return server_->bound_address(); }
  // Shuts the server down (before the services given to Start go away); idempotent.
  void Stop() {
    if (server_ == nullptr) return;
    server_->RequestShutdown();
    server_->WaitForShutdown();
    server_.reset();
  }

  // A session that owns `pages`, the first `transfer_pages` of which receive the transfer;
  // its outcome goes to `probe`.
  absl::Status Expect(const std::string& id, std::vector<int32_t> pages, int transfer_pages,
                      DoneProbe& probe, absl::Duration lease = absl::Seconds(30)) {
    return receiver_.CreateSession(id, std::move(pages), transfer_pages, absl::Now() + lease,
                                   probe.fn());
  }
  // What Reserve would answer for that session, over `transport`.
  KvSessionRef Ref(const std::string& id, int pages, const std::string& transport) const {
    return KvSessionRef{id, server_->bound_address(), transport, pages, layout_.CompatHash()};
  }

 private:
  const KvLayout layout_;
  KvReceiver receiver_;
  KvServiceImpl kv_service_;
  std::unique_ptr<common::ServerRunner> server_;
};

}  // namespace mlaserve::kvtransfer::testing
