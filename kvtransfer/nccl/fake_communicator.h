// FakeCommunicator: two in-process ranks joined through a FakeCommHub, moving host bytes in
// posting order like NCCL send/recv (a recv matches the next send; sizes must agree, as NCCL
// requires — a mismatch fails both ends). Operations complete asynchronously on a hub thread
// per pair, so the tests see the same enqueue/wait/abort behaviour as with NCCL.
// As with NCCL, an id serves one communicator: joining it again once both ranks joined fails
// (UNAVAILABLE), so a side that rebuilds while its peer keeps the old communicator is caught.
// Faults: fail_after_sends (the link reports an error, like a peer's process dying) and
// stall_after_sends (sends after that never complete: a stalled peer, found by the deadline).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/nccl/communicator.h"

namespace mlaserve::kvtransfer::nccl {

class FakeCommHub {
 public:
  struct Faults {
    int fail_after_sends = -1;   // -1 = never
    int stall_after_sends = -1;  // -1 = never
  };
  void set_faults(Faults f);
  CommIdFactory id_factory();
  CommunicatorFactory factory();
  int comms_created() const;
  int64_t bytes_moved() const;

  struct Link;  // fake_communicator.cc

 private:
  mutable absl::Mutex mu_;
  Faults faults_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int comms_created_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<CommId, std::shared_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<int64_t> bytes_moved_ = std::make_shared<int64_t>(0);
};

}  // namespace mlaserve::kvtransfer::nccl
