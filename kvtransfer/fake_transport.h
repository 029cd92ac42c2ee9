// FakeKvTransport: an in-process KvTransport for tests. Senders call the KvReceiver registered
// for their endpoint directly and synchronously (checksums and all), so prefill and decode
// logic can be tested without sockets. Faults can be injected per transport.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/receiver.h"
#include "kvtransfer/transport.h"

namespace mlaserve::kvtransfer {

class FakeKvTransport final : public KvTransport {
 public:
  struct Faults {
    // After this many pages the sender's stream "breaks": the receiver is told (Fail), the
    // sender's status becomes UNAVAILABLE. -1 = never.
    int break_after_pages = -1;
    // After this many pages the sender goes silent: later pages and the completion are
    // dropped without telling anyone (the receiver's no-progress deadline must notice).
    int stall_after_pages = -1;
  };

  std::string_view name() const override { return "fake"; }
  void Register(const std::string& endpoint, KvReceiver* receiver);
  void set_faults(Faults faults);
  int pages_delivered() const;

  absl::StatusOr<std::unique_ptr<KvSender>> Open(const KvSessionRef& ref,
                                                 const KvLayout& local_layout,
                                                 const KvSenderOptions& options) override;

 private:
  friend class FakeKvSender;
  mutable absl::Mutex mu_;
  std::map<std::string, KvReceiver*> receivers_ ABSL_GUARDED_BY(mu_);
  Faults faults_ ABSL_GUARDED_BY(mu_);
  int pages_delivered_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mlaserve::kvtransfer
