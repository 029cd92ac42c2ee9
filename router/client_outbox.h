// ClientOutbox: what one Generate call owes its client, in the order it is written.
//
// Generated tokens go through the call's OutputAssembler (incremental text, stop strings held
// back) and leave as `chunk` messages; the end is `complete` (or `error`, when the client has
// seen output) followed by the call's status. GenerateClient's protocol allows one write in
// flight: tokens that arrive meanwhile coalesce into the next chunk, so a slow client gets
// fewer, larger chunks rather than an unbounded queue. A client that went away is written
// nothing more, and its End comes once the call has ended.
//
// Thread-safety: one mutex, mu_, a leaf lock (nothing is called while it is held), so the
// owning call may use the outbox under its own lock. Pump() calls GenerateClient::Send / End,
// which may call back into the call: call it with no lock held.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "mlaserve/v1/api.pb.h"
#include "router/generate_client.h"
#include "router/output_assembler.h"

namespace mlaserve::router {

class ClientOutbox {
 public:
  explicit ClientOutbox(GenerateClient* client) : client_(client) {}

  // Once the request is parsed: what its messages carry. Until then the outbox holds no
  // output (a request refused at once gets only its status).
  struct Format {
    std::string request_id;
    int32_t prompt_tokens = 0;
    bool include_token_ids = true;
    bool include_text = true;
  };
  void Open(Format format, OutputAssembler output);

  // Appends generated tokens in order until a stop string matches. Returns how many were
  // taken and whether a stop string ended the output (later tokens are not taken).
  struct Added {
    int tokens = 0;
    bool stopped = false;
  };
  // `logprobs`: empty, or one per id.
  Added AddTokens(std::span<const int32_t> ids,
                  std::span<const v1::TokenLogprobs* const> logprobs = {});
  // Prompt tokens' logprobs (the decode worker's, before the first generated token): sent in
  // chunks of their own, at most kMaxPromptLogprobsPerChunk a chunk, ahead of the tokens.
  void AddPromptLogprobs(
      const google::protobuf::RepeatedPtrField<v1::PromptTokenLogprobs>& entries);

  // The call completed: held text is released (a stop string it completes makes the reason
  // STOP), `complete` gets the output's fields (finish reason, matched stop string or
  // `matched_token`, prompt and completion tokens) and is queued; the status will be OK.
  void Complete(v1::FinishReason reason, std::optional<int32_t> matched_token,
                v1::GenerateComplete complete);
  // The call failed: an `error` message when the client saw output or has some pending, then
  // `status`.
  void Fail(const absl::Status& status);
  // The client is gone (cancelled, or a write failed): nothing more is written; End(status)
  // follows once Complete or Fail was called.
  void ClientGone();
  // The write in flight finished (GenerateCall::OnWriteDone); not `ok`: the client is gone.
  void WriteDone(bool ok);

  // Starts the next write, or End once everything was written, unless a write is in flight.
  void Pump();

 private:
  GenerateClient* const client_;
  absl::Mutex mu_;
  Format format_ ABSL_GUARDED_BY(mu_);
  std::optional<OutputAssembler> output_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool end_called_ ABSL_GUARDED_BY(mu_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<v1::GenerateResponse> terminal_message_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);  // set once the call ended
};

}  // namespace mlaserve::router
