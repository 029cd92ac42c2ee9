// Who may call what: bearer tokens read from files and client certificates verified by TLS,
// checked at the top of every handler that needs them.
//
// Privileges (docs/security.md):
//   kClient  - the public Generation API (API keys; open when no key is configured)
//   kCluster - a member of the cluster: registering with the router, every worker RPC, KV
//              transfer. A cluster token, or a client certificate that chains to the cluster CA
//   kAdmin   - the router's Admin API. An admin token, or a client certificate whose common
//              name is listed as an admin; admin implies kCluster
// A call with no credential gets UNAUTHENTICATED; one whose credential is unknown also gets
// UNAUTHENTICATED; one with a valid credential of a lower privilege gets PERMISSION_DENIED.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/grpc_status.h"
#include "common/self_owned.h"

namespace mlaserve::common {

// Tokens from a file: one per line; blank lines and lines starting with '#' are skipped, so
// a file may hold an old and a new token while they are rotated. Tokens are compared in time
// independent of where they differ.
class TokenSet {
 public:
  TokenSet() = default;
  // INVALID_ARGUMENT naming `flag` when the file cannot be read, has no token, or holds a
  // token shorter than kMinTokenBytes (a guessable token is no credential).
  static absl::StatusOr<TokenSet> FromFile(const std::string& path, const std::string& flag);
  static TokenSet Of(std::vector<std::string> tokens) { return TokenSet(std::move(tokens)); }

  static constexpr size_t kMinTokenBytes = 16;

  bool empty() const { return tokens_.empty(); }
  bool Contains(absl::string_view token) const;
  // The first token: what a client sends.
  const std::string& first() const { return tokens_.front(); }

 private:
  explicit TokenSet(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}
  std::vector<std::string> tokens_;
};

enum class Privilege { kClient, kCluster, kAdmin };

struct CallAuthOptions {
  TokenSet api_keys;        // kClient; empty = the public API is open
  TokenSet cluster_tokens;  // kCluster
  TokenSet admin_tokens;    // kAdmin
  // TLS listeners that verify client certificates: such a certificate makes its holder a
  // cluster member; one whose subject common name is listed here makes it an admin.
  bool cluster_by_client_cert = false;
  std::vector<std::string> admin_cert_names;
  // With no credential configured for kCluster (plaintext and no cluster token): every caller
  // is a member. main() allows that only with --insecure, and says so in the log.
  bool open_cluster = false;
  // Likewise for kAdmin (plaintext, no admin token, admin listener on loopback).
  bool open_admin = false;
};

class CallAuthorizer {
 public:
  CallAuthorizer() = default;  // everything open: in-process tests
  explicit CallAuthorizer(CallAuthOptions options) : options_(std::move(options)), open_(false) {}

  // For gRPC handlers: OK, UNAUTHENTICATED or PERMISSION_DENIED.
  grpc::Status Check(const grpc::ServerContextBase& context, Privilege needed) const;

  // For other listeners (HTTP): `authorization` is the Authorization header's value, or
  // nullopt when absent; `peer_cert_name` the verified client certificate's common name.
  absl::Status CheckCredentials(std::optional<absl::string_view> authorization,
                                std::optional<absl::string_view> peer_cert_name,
                                Privilege needed) const;

  const CallAuthOptions& options() const { return options_; }

 private:
  CallAuthOptions options_;
  bool open_ = true;
};

// "Bearer <token>" -> token; nullopt for another scheme.
std::optional<absl::string_view> BearerToken(absl::string_view authorization);

// Checks `needed` on a unary callback call: nullptr when allowed, else the reactor that
// already finished the call with the refusal (the handler returns it).
inline grpc::ServerUnaryReactor* RefuseUnlessAllowed(const CallAuthorizer* authorizer,
                                                     grpc::CallbackServerContext* context,
                                                     Privilege needed) {
  if (authorizer == nullptr) return nullptr;
  grpc::Status s = authorizer->Check(*context, needed);
  if (s.ok()) return nullptr;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

// A unary callback handler that answers at once, whole: refused without `needed`
// (RefuseUnlessAllowed), else `answer()` fills the response and its status finishes the call.
template <typename Answer>
grpc::ServerUnaryReactor* AnswerUnary(const CallAuthorizer* authorizer,
                                      grpc::CallbackServerContext* context, Privilege needed,
                                      Answer&& answer) {
  if (grpc::ServerUnaryReactor* refused = RefuseUnlessAllowed(authorizer, context, needed)) {
    return refused;
  }
  const absl::Status status = std::forward<Answer>(answer)();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// Reactors that finish a streaming call at once with `status` (a refused call); the handler
// returns RefuseRead<Request>(status) / RefuseWrite<Response>(status). Self-owned
// (common/self_owned.h) until gRPC's OnDone.
template <typename Request>
class RefusedReadReactor final : public grpc::ServerReadReactor<Request>,
                                 public SelfOwned<RefusedReadReactor<Request>> {
 public:
  void OnDone() override { this->ReleaseSelf(); }
};
template <typename Response>
class RefusedWriteReactor final : public grpc::ServerWriteReactor<Response>,
                                  public SelfOwned<RefusedWriteReactor<Response>> {
 public:
  void OnDone() override { this->ReleaseSelf(); }
};
template <typename Request>
grpc::ServerReadReactor<Request>* RefuseRead(const grpc::Status& status) {
  auto reactor = MakeSelfOwned<RefusedReadReactor<Request>>();
  reactor->Finish(status);
  return reactor.get();
}
template <typename Response>
grpc::ServerWriteReactor<Response>* RefuseWrite(const grpc::Status& status) {
  auto reactor = MakeSelfOwned<RefusedWriteReactor<Response>>();
  reactor->Finish(status);
  return reactor.get();
}

}  // namespace mlaserve::common
