// DecodeRunner::Request: one reservation's state, shared by the runner's two halves
// (decode_runner_intents.cc, what RPC threads record; decode_runner.cc, the loop). Internal to
// the runner.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "decode_worker/decode_runner.h"
#include "decode_worker/decode_sequence.h"

namespace mlaserve::decode {

struct DecodeRunner::Request {
  std::string request_id;
  std::string session_id;
  std::shared_ptr<DecodeSequence> seq;  // receiver thread until kv_ready, then loop thread
  absl::Time reserved_at;
  absl::Time lease_deadline;
  absl::Time last_token_at = absl::InfinitePast();  // loop thread

  // Intents and state, guarded by the runner's mu_.
  std::shared_ptr<TokenSink> sink;
  bool stream_gone = false;  // the stream's client left: drop silently
  bool abort = false;
  bool kv_pending = false;   // a receiver session owns the pages
  bool kv_ready = false;     // pages (and, remote, the first token) are in seq
  absl::Status failure;      // the KV transfer failed
  bool running = false;      // admitted into the scheduler
  bool preempted = false;    // its pages were taken back; it recomputes when pages free up
  bool ended = false;
};

}  // namespace mlaserve::decode
