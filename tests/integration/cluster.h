// A router + prefill + decode cluster of real processes on loopback, for integration tests.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/transport_security.h"
#include "mlaserve/v1/admin.grpc.pb.h"
#include "mlaserve/v1/api.grpc.pb.h"
#include "tests/integration/process_harness.h"

namespace mlaserve::testing {

// Paths of the binaries under test (set by CMake).
std::string RouterBinary();
std::string PrefillBinary();
std::string DecodeBinary();
std::string RunBinary();
std::string CtlBinary();

// A shell command run to its end: what it wrote to stdout (its own redirections decide what
// else lands there) and its exit code (-1 when it could not start or did not exit normally).
struct CommandRun {
  int exit_code = -1;
  std::string out;
};
CommandRun RunCommand(const std::string& cmd);

struct ClusterOptions {
  std::string model_dir;
  int prefill_workers = 1;
  int decode_workers = 1;
  int num_kv_pages = 256;
  int local_prefill_threshold = 0;  // 0: always remote prefill
  bool self_register = false;       // workers use --router instead of static flags
  std::vector<std::string> extra_decode_flags;
  // Not empty: the router requires this admin token (--admin-token-file, written to the
  // cluster's directory as admin-token) and admin() sends it.
  std::string admin_token;
  std::vector<std::string> extra_prefill_flags;
  // Workers serve /metrics on an ephemeral port (logged as "metrics on URL"); else none.
  bool worker_metrics = false;
  std::vector<std::string> extra_router_flags;  // "--flag", "value" pairs; "--flag=value" items
  // Every process's transport flags: plaintext, or e.g. the --tls-* flags of a
  // common::testing::TestPki; the harness's own channels then use `client_tls` (and the
  // admin token, which a TLS router requires for admin()).
  std::vector<std::string> security_flags = {"--insecure"};
  common::TlsOptions client_tls = PlaintextTls();

  static common::TlsOptions PlaintextTls() {
    common::TlsOptions plaintext;
    plaintext.insecure = true;
    return plaintext;
  }
};

class Cluster {
 public:
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(const ClusterOptions& options);

  const std::string& router_address() const { return router_->address(); }
  // The router's Admin API (its --admin-listen), where workers register.
  const std::string& admin_address() const { return admin_address_; }
  ServerProcess& router() { return *router_; }
  ServerProcess& prefill(int i = 0) { return *prefill_[i]; }
  ServerProcess& decode(int i = 0) { return *decode_[i]; }
  v1::Generation::Stub& generation() { return *generation_; }
  v1::Admin::Stub& admin() { return *admin_; }
  const std::string& dir() const { return dir_; }

  // Starts one more decode worker (e.g. with another model) registering with the router.
  absl::StatusOr<std::unique_ptr<ServerProcess>> StartDecode(const std::string& model_dir,
                                                             const std::string& name,
                                                             bool register_with_router);

  // Waits until every decode worker reports all its KV pages free and the router has no
  // request on it, in a report the router asked for after this call began (ListWorkers; the
  // router refreshes loads every poll period).
  absl::Status WaitAllPagesFree(absl::Duration timeout);

 private:
  ClusterOptions options_;
  std::string dir_;
  std::vector<std::unique_ptr<ServerProcess>> prefill_, decode_;
  std::unique_ptr<ServerProcess> router_;
  std::string admin_address_;
  std::unique_ptr<v1::Generation::Stub> generation_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

struct GenerateResult {
  std::vector<int32_t> ids;
  std::string text;
  std::optional<v1::GenerateComplete> complete;
  grpc::Status status;
  absl::Duration elapsed;
};
GenerateResult RunGenerate(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
                           absl::Duration timeout, grpc::ClientContext* context = nullptr);

// mlaserve-run's tokens for the same request (the single-process reference).
absl::StatusOr<std::vector<int32_t>> ReferenceTokens(const std::string& model_dir,
                                                     const std::vector<int32_t>& prompt,
                                                     int max_new_tokens, float temperature,
                                                     std::optional<uint64_t> seed);

}  // namespace mlaserve::testing
