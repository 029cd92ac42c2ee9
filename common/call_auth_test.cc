#include "common/call_auth.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "common/request_limits.h"
#include "common/transport_security.h"

namespace mlaserve::common {
namespace {

std::string WriteTemp(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  // Unique to this process: each test case runs in a process of its own under ctest, and
  // another run on this machine must not rewrite the file between the write and the read.
  std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/call_auth_test_" +
                     std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << contents;
  return path;
}

constexpr char kAdmin[] = "admin-token-0123456789abcdef";
constexpr char kCluster[] = "cluster-token-0123456789abcdef";
constexpr char kKey[] = "api-key-0123456789abcdef";

CallAuthorizer Authorizer(bool by_cert = false) {
  CallAuthOptions o;
  o.admin_tokens = TokenSet::Of({kAdmin});
  o.cluster_tokens = TokenSet::Of({kCluster});
  o.api_keys = TokenSet::Of({kKey});
  o.cluster_by_client_cert = by_cert;
  o.admin_cert_names = {"operator"};
  return CallAuthorizer(o);
}

std::string Bearer(const std::string& t) { return "Bearer " + t; }

TEST(TokenSet, ReadsTokensSkippingCommentsAndBlankLines) {
  const std::string path =
      WriteTemp("tokens", "# rotated 2026-11\n\n  old-token-0123456789abcdef  \nnew-token-0123456789abcdef\n");
  absl::StatusOr<TokenSet> t = TokenSet::FromFile(path, "--admin-token-file");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->first(), "old-token-0123456789abcdef");
  EXPECT_TRUE(t->Contains("new-token-0123456789abcdef"));
  EXPECT_FALSE(t->Contains("new-token-0123456789abcde"));
  EXPECT_FALSE(t->Contains(""));
}

TEST(TokenSet, RefusesShortTokensEmptyFilesAndMissingFiles) {
  absl::StatusOr<TokenSet> short_token = TokenSet::FromFile(WriteTemp("short", "abc\n"), "--x");
  EXPECT_EQ(short_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_token.status().message().find("line 1 has 3 bytes"), std::string::npos)
      << short_token.status();
  EXPECT_EQ(TokenSet::FromFile(WriteTemp("empty", "# none\n"), "--x").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<TokenSet> missing = TokenSet::FromFile("/nonexistent/tokens", "--x");
  EXPECT_NE(missing.status().message().find("--x /nonexistent/tokens"), std::string::npos);
}

TEST(CallAuthorizer, AdminNeedsTheAdminToken) {
  CallAuthorizer a = Authorizer();
  EXPECT_TRUE(a.CheckCredentials(Bearer(kAdmin), std::nullopt, Privilege::kAdmin).ok());
  EXPECT_EQ(a.CheckCredentials(std::nullopt, std::nullopt, Privilege::kAdmin).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(a.CheckCredentials(Bearer("wrong-token-0123456789"), std::nullopt, Privilege::kAdmin)
                .code(),
            absl::StatusCode::kUnauthenticated);
  // A valid credential of a lower privilege: PERMISSION_DENIED.
  EXPECT_EQ(a.CheckCredentials(Bearer(kCluster), std::nullopt, Privilege::kAdmin).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(a.CheckCredentials(Bearer(kKey), std::nullopt, Privilege::kAdmin).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(a.CheckCredentials("Basic dXNlcjpwYXNz", std::nullopt, Privilege::kAdmin).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(CallAuthorizer, ClusterTakesTheClusterOrAdminToken) {
  CallAuthorizer a = Authorizer();
  EXPECT_TRUE(a.CheckCredentials(Bearer(kCluster), std::nullopt, Privilege::kCluster).ok());
  EXPECT_TRUE(a.CheckCredentials(Bearer(kAdmin), std::nullopt, Privilege::kCluster).ok());
  EXPECT_TRUE(a.CheckCredentials("bearer  " + std::string(kCluster), std::nullopt,
                                 Privilege::kCluster)
                  .ok());
  EXPECT_EQ(a.CheckCredentials(Bearer(kKey), std::nullopt, Privilege::kCluster).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(a.CheckCredentials(std::nullopt, std::nullopt, Privilege::kCluster).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(CallAuthorizer, VerifiedClientCertificatesAreClusterMembersAndListedNamesAdmins) {
  CallAuthorizer with_certs = Authorizer(/*by_cert=*/true);
  EXPECT_TRUE(with_certs.CheckCredentials(std::nullopt, "decode-0", Privilege::kCluster).ok());
  EXPECT_EQ(with_certs.CheckCredentials(std::nullopt, "decode-0", Privilege::kAdmin).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(with_certs.CheckCredentials(std::nullopt, "operator", Privilege::kAdmin).ok());
  // Without cluster_by_client_cert (plaintext listeners) a certificate name counts for nothing.
  EXPECT_EQ(Authorizer(false).CheckCredentials(std::nullopt, "operator", Privilege::kAdmin).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(CallAuthorizer, ApiKeysOnlyWhenConfigured) {
  CallAuthorizer a = Authorizer();
  EXPECT_TRUE(a.CheckCredentials(Bearer(kKey), std::nullopt, Privilege::kClient).ok());
  EXPECT_EQ(a.CheckCredentials(std::nullopt, std::nullopt, Privilege::kClient).code(),
            absl::StatusCode::kUnauthenticated);
  CallAuthorizer no_keys{CallAuthOptions{}};
  EXPECT_TRUE(no_keys.CheckCredentials(std::nullopt, std::nullopt, Privilege::kClient).ok());
  // ... but that does not open the other privileges.
  EXPECT_EQ(no_keys.CheckCredentials(std::nullopt, std::nullopt, Privilege::kCluster).code(),
            absl::StatusCode::kUnauthenticated);
  CallAuthOptions open;
  open.open_cluster = true;
  EXPECT_TRUE(CallAuthorizer(open).CheckCredentials(std::nullopt, std::nullopt,
                                                    Privilege::kCluster).ok());
  EXPECT_EQ(CallAuthorizer(open).CheckCredentials(std::nullopt, std::nullopt,
                                                  Privilege::kAdmin).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(TlsOptions, PlaintextMustBeAskedForAndFilesMustExist) {
  TlsOptions none;
  absl::Status s = ValidateTlsOptions(none, TlsPeer::kServer);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--insecure"), std::string::npos) << s;
  EXPECT_TRUE(ValidateTlsOptions(TlsOptions{.insecure = true}, TlsPeer::kServer).ok());
  TlsOptions both{.insecure = true, .ca_file = "/etc/hostname"};
  EXPECT_EQ(ValidateTlsOptions(both, TlsPeer::kServer).code(), absl::StatusCode::kInvalidArgument);
  TlsOptions missing{.cert_file = "/nonexistent/c.pem", .key_file = "/nonexistent/k.pem",
                     .ca_file = "/nonexistent/ca.pem"};
  s = ValidateTlsOptions(missing, TlsPeer::kServer);
  EXPECT_NE(s.message().find("--tls-cert /nonexistent/c.pem: cannot be read"), std::string::npos)
      << s;
  const std::string not_pem = WriteTemp("not_pem", "hello\n");
  s = ValidateTlsOptions(TlsOptions{.ca_file = not_pem}, TlsPeer::kClient);
  EXPECT_NE(s.message().find("not a PEM file"), std::string::npos) << s;
  EXPECT_EQ(ValidateTlsOptions(TlsOptions{}, TlsPeer::kClient).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RequestLimits, RequestIdIsBoundedAndEchoedOnlyAsAPrefix) {
  EXPECT_TRUE(ValidateRequestId("").ok());
  EXPECT_TRUE(ValidateRequestId(std::string(kMaxRequestIdBytes, 'a')).ok());
  const std::string huge(1 << 20, 'x');
  absl::Status s = ValidateRequestId(huge);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("1048576 bytes; at most 256"), std::string::npos) << s;
  EXPECT_LT(s.message().size(), 200u);
  EXPECT_EQ(ValidateRequestId("a\nb").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IdForMessages(huge).size(), kEchoedIdBytes + std::string("... (1048576 bytes)").size());
  EXPECT_EQ(ValidateStopCounts(kMaxStopStrings + 1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateStopCounts(0, kMaxStopTokenIds + 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateStopString(3, std::string(kMaxStopStringBytes + 1, 's')).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlaserve::common
