#include "common/call_auth.h"

#include <algorithm>
#include <fstream>

#include <grpc/grpc_security_constants.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace mlaserve::common {
namespace {

// Equal in time that depends only on the lengths (a timing side channel must not reveal how
// much of a guess was right).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

const char* PrivilegeName(Privilege p) {
  switch (p) {
    case Privilege::kClient: return "an API key";
    case Privilege::kCluster: return "the cluster credential (cluster token or certificate)";
    case Privilege::kAdmin: return "an admin credential (admin token or admin certificate)";
  }
  return "a credential";
}

}  // namespace

absl::StatusOr<TokenSet> TokenSet::FromFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot be read"));
  std::vector<std::string> tokens;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    absl::string_view t = absl::StripAsciiWhitespace(line);
    if (t.empty() || t.front() == '#') continue;
    if (t.size() < kMinTokenBytes) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": the token on line ",
                                                     line_no, " has ", t.size(),
                                                     " bytes; tokens need at least ",
                                                     kMinTokenBytes));
    }
    tokens.emplace_back(t);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": no token in the file"));
  }
  return TokenSet(std::move(tokens));
}

bool TokenSet::Contains(absl::string_view token) const {
  bool found = false;
  for (const std::string& t : tokens_) found |= ConstantTimeEquals(t, token);  // no early exit
  return found;
}

std::optional<absl::string_view> BearerToken(absl::string_view authorization) {
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return std::nullopt;
  }
  return absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
}

absl::Status CallAuthorizer::CheckCredentials(std::optional<absl::string_view> authorization,
                                              std::optional<absl::string_view> peer_cert_name,
                                              Privilege needed) const {
  if (open_) return absl::OkStatus();
  const CallAuthOptions& o = options_;
  if (needed == Privilege::kClient && o.api_keys.empty()) return absl::OkStatus();
  if (needed == Privilege::kCluster && o.open_cluster) return absl::OkStatus();
  if (needed == Privilege::kAdmin && o.open_admin) return absl::OkStatus();

  // What the caller holds, highest first.
  bool admin = false, cluster = false, client = false, unknown_token = false;
  if (authorization.has_value()) {
    std::optional<absl::string_view> token = BearerToken(*authorization);
    if (!token.has_value()) {
      return absl::UnauthenticatedError(
          "the authorization header is not \"Bearer <token>\"");
    }
    admin = o.admin_tokens.Contains(*token);
    cluster = admin || o.cluster_tokens.Contains(*token);
    client = o.api_keys.Contains(*token);
    unknown_token = !admin && !cluster && !client;
  }
  if (peer_cert_name.has_value() && o.cluster_by_client_cert) {
    cluster = true;
    admin = admin || std::find(o.admin_cert_names.begin(), o.admin_cert_names.end(),
                               *peer_cert_name) != o.admin_cert_names.end();
  }
  const bool allowed = (needed == Privilege::kAdmin && admin) ||
                       (needed == Privilege::kCluster && cluster) ||
                       (needed == Privilege::kClient && client);
  if (allowed) return absl::OkStatus();
  if (unknown_token) {
    return absl::UnauthenticatedError(
        absl::StrCat("the bearer token is not valid here; this call needs ",
                     PrivilegeName(needed)));
  }
  if (admin || cluster || client) {
    return absl::PermissionDeniedError(
        absl::StrCat("the caller's credential does not allow this call; it needs ",
                     PrivilegeName(needed)));
  }
  return absl::UnauthenticatedError(
      absl::StrCat("no credential; this call needs ", PrivilegeName(needed)));
}

grpc::Status CallAuthorizer::Check(const grpc::ServerContextBase& context,
                                   Privilege needed) const {
  if (open_) return grpc::Status::OK;
  std::optional<absl::string_view> authorization;
  const auto& md = context.client_metadata();
  if (auto it = md.find("authorization"); it != md.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  std::optional<std::string> cert_name;
  if (std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
      auth != nullptr && auth->IsPeerAuthenticated()) {
    // A certificate the TLS handshake verified against the CA. Its common name ("" if none).
    std::vector<grpc::string_ref> cn = auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
    cert_name = cn.empty() ? std::string() : std::string(cn.front().data(), cn.front().size());
  }
  return ToGrpcStatus(CheckCredentials(authorization, cert_name, needed));
}

}  // namespace mlaserve::common
