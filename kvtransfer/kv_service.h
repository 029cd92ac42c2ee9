// KvServiceImpl: the receiving side of the `tcp` KV transport, served by the decode worker next
// to DecodeWorker. Each PushPages stream (one reactor) feeds one session of a KvReceiver; a
// stream that ends without `complete` (sender cancelled or died) fails its session at once, and
// a session the receiver fails on its own (lease, no progress, cancel) ends its stream with
// that status, so the sender learns it. A stream owns its session only once its open was taken:
// an open refused because another stream holds the session (ALREADY_EXISTS) leaves that
// transfer alone. Until its first message a stream has no session's deadline, so it gets the
// receiver's no-progress deadline of its own (a peer that sends half a message and stops is
// dropped). AbortSession is the control-plane way to fail a session from the sender side.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/call_auth.h"
#include "kvtransfer/receiver.h"
#include "mlaserve/v1/kv.grpc.pb.h"

namespace mlaserve::kvtransfer {

// KvService on the decode worker: PushPages into `receiver`, AbortSession.
class KvServiceImpl final : public mlaserve::v1::KvService::CallbackService {
 public:
  // Every RPC needs the cluster credential (`authorizer`; null: open, for in-process tests).
  explicit KvServiceImpl(KvReceiver* receiver, const common::CallAuthorizer* authorizer = nullptr)
      : receiver_(receiver), authorizer_(authorizer) {}

  grpc::ServerReadReactor<mlaserve::v1::KvPushMessage>* PushPages(
      grpc::CallbackServerContext* context, mlaserve::v1::KvPushResult* result) override;
  grpc::ServerUnaryReactor* AbortSession(grpc::CallbackServerContext* context,
                                         const mlaserve::v1::KvAbortSessionRequest* request,
                                         mlaserve::v1::KvAbortSessionResponse* response) override;

 private:
  KvReceiver* const receiver_;
  const common::CallAuthorizer* const authorizer_;
};

}  // namespace mlaserve::kvtransfer
