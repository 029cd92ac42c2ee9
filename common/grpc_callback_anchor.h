// KeepGrpcCallbackQueueAlive: holds one reference to gRPC's process-wide callback completion
// queue for the rest of the process.
//
// Why: with the gRPC release Debian ships (1.51), the callback API's shared completion queue is
// reference counted by the servers and channels that use it; when the last one goes away while
// a new one starts (a test that stops one server and starts the next, or a worker that drops
// its last KV channel as another opens), the queue is freed twice ("attempting double-free" in
// grpc_cq_internal_unref under AddressSanitizer, "assertion failed: prior > 0" in
// ref_counted.h, or a "pure virtual method called" abort). Holding one reference forever
// (an idle channel that made one callback call) keeps the count above zero. Measured: the tcp
// transport tests repeated 300 times crashed in 2 of 7 runs without it, in 0 of 5 with it.
//
// Call before creating callback servers or making callback calls; cheap and idempotent.
#pragma once

namespace mlaserve::common {

void KeepGrpcCallbackQueueAlive();

}  // namespace mlaserve::common
