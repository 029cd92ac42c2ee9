#include "router/worker_channels.h"

namespace mlaserve::router {

grpc::ChannelArguments WorkerChannels::Arguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2'000);
  args.SetMaxReceiveMessageSize(64 << 20);
  return args;
}

WorkerChannels::Stubs& WorkerChannels::StubsLocked(const std::string& address) {
  auto it = by_address_.find(address);
  if (it != by_address_.end()) return it->second;
  std::shared_ptr<grpc::Channel> channel = dialer_->Dial(address, Arguments());
  Stubs stubs;
  stubs.prefill = v1::PrefillWorker::NewStub(channel);
  stubs.decode = v1::DecodeWorker::NewStub(channel);
  return by_address_.emplace(address, std::move(stubs)).first->second;
}

std::shared_ptr<v1::PrefillWorker::Stub> WorkerChannels::Prefill(const std::string& address) {
  absl::MutexLock lock(&mu_);
  return StubsLocked(address).prefill;
}

std::shared_ptr<v1::DecodeWorker::Stub> WorkerChannels::Decode(const std::string& address) {
  absl::MutexLock lock(&mu_);
  return StubsLocked(address).decode;
}

}  // namespace mlaserve::router
