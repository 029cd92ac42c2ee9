#include "common/testing/test_pki.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mlaserve::common::testing {
namespace {

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

constexpr long kValidFromSeconds = -3600;         // an hour ago: clocks need not agree
constexpr long kValidForSeconds = 2 * 24 * 3600;  // longer than any test run

absl::Status OpenSslError(const std::string& what) {
  const unsigned long code = ERR_get_error();
  char reason[256] = "no OpenSSL error queued";
  if (code != 0) ERR_error_string_n(code, reason, sizeof(reason));
  ERR_clear_error();
  return absl::InternalError(absl::StrCat("test PKI: ", what, ": ", reason));
}

absl::StatusOr<Key> NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("EC P-256 key generation");
  return key;
}

// "basicConstraints" = "critical,CA:TRUE" and the like, in OpenSSL's config syntax.
using Extensions = std::vector<std::pair<int, std::string>>;

// A certificate for `subject_cn` holding `key`, signed by `issuer_key` (whose certificate is
// `issuer`; nullptr: self-signed).
absl::StatusOr<Cert> NewCert(const std::string& subject_cn, EVP_PKEY* key, X509* issuer,
                             EVP_PKEY* issuer_key, long serial, const Extensions& extensions) {
  Cert cert(X509_new());
  if (cert == nullptr) return OpenSslError("X509_new");
  X509_set_version(cert.get(), 2);  // v3, for extensions
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), kValidFromSeconds);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), kValidForSeconds);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("mlaserve tests"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(subject_cn.c_str()), -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1 ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return OpenSslError(absl::StrCat("setting up the certificate of ", subject_cn));
  }
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, signer, cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] : extensions) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    if (ext == nullptr) return OpenSslError(absl::StrCat("extension ", value, " of ", subject_cn));
    const int added = X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
    if (added != 1) return OpenSslError(absl::StrCat("adding ", value, " to ", subject_cn));
  }
  if (X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0) {
    return OpenSslError(absl::StrCat("signing the certificate of ", subject_cn));
  }
  return cert;
}

absl::Status WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  BIO* bio = BIO_new_file(path.c_str(), "w");
  if (bio == nullptr) return OpenSslError(absl::StrCat("opening ", path));
  const int ok = cert != nullptr
                     ? PEM_write_bio_X509(bio, cert)
                     : PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  BIO_free(bio);
  if (ok != 1) return OpenSslError(absl::StrCat("writing ", path));
  return absl::OkStatus();
}

const Extensions& CaExtensions() {
  static const Extensions kCa = {{NID_basic_constraints, "critical,CA:TRUE"},
                                 {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                 {NID_subject_key_identifier, "hash"}};
  return kCa;
}

}  // namespace

absl::StatusOr<TestPki> WriteTestPki(const std::string& dir) {
  TestPki pki{.ca = dir + "/ca.pem",
              .node_cert = dir + "/node.pem",
              .node_key = dir + "/node.key",
              .rogue_ca = dir + "/rogue-ca.pem"};
  absl::StatusOr<Key> ca_key = NewKey();
  if (!ca_key.ok()) return ca_key.status();
  absl::StatusOr<Cert> ca =
      NewCert("mlaserve test CA", ca_key->get(), nullptr, nullptr, 1, CaExtensions());
  if (!ca.ok()) return ca.status();

  absl::StatusOr<Key> node_key = NewKey();
  if (!node_key.ok()) return node_key.status();
  const Extensions node_extensions = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature,keyAgreement"},
      {NID_ext_key_usage, "serverAuth,clientAuth"},
      {NID_subject_alt_name,
       absl::StrCat("DNS:", TestPki::kServerName, ",DNS:localhost,IP:127.0.0.1")},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid"}};
  absl::StatusOr<Cert> node =
      NewCert("mlaserve-node", node_key->get(), ca->get(), ca_key->get(), 2, node_extensions);
  if (!node.ok()) return node.status();

  absl::StatusOr<Key> rogue_key = NewKey();
  if (!rogue_key.ok()) return rogue_key.status();
  absl::StatusOr<Cert> rogue =
      NewCert("rogue CA", rogue_key->get(), nullptr, nullptr, 1, CaExtensions());
  if (!rogue.ok()) return rogue.status();

  for (absl::Status s :
       {WritePem(pki.ca, ca->get(), nullptr), WritePem(pki.node_cert, node->get(), nullptr),
        WritePem(pki.node_key, nullptr, node_key->get()),
        WritePem(pki.rogue_ca, rogue->get(), nullptr)}) {
    if (!s.ok()) return s;
  }
  return pki;
}

}  // namespace mlaserve::common::testing
