#include "apiserver/tls.h"

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::apiserver {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
template <class T>
using Ptr = std::unique_ptr<T, Free>;

std::string BioString(BIO* bio) {
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(len));
}

bool AddExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  Ptr<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  return ext != nullptr && X509_add_ext(cert, ext.get(), -1) == 1;
}

// Whether the pair on disk loads and still has a year to live.
bool Usable(const std::string& cert_pem, const std::string& key_pem) {
  Ptr<BIO> cb(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  Ptr<BIO> kb(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  Ptr<X509> cert(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  Ptr<EVP_PKEY> key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!cert || !key || X509_check_private_key(cert.get(), key.get()) != 1) return false;
  time_t in_a_year = time(nullptr) + 365 * 24 * 3600;
  return X509_cmp_time(X509_get0_notAfter(cert.get()), &in_a_year) > 0;
}

}  // namespace

absl::StatusOr<TlsIdentity> EnsureServingCertificate(const std::string& dir) {
  BERTH_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  TlsIdentity id{StrCat(dir, "/api.crt"), StrCat(dir, "/api.key"), ""};
  auto cert_pem = ReadFile(id.cert_file);
  auto key_pem = ReadFile(id.key_file);
  if (cert_pem.ok() && key_pem.ok() && Usable(*cert_pem, *key_pem)) {
    id.cert_pem = *cert_pem;
    return id;
  }
  Ptr<EVP_PKEY_CTX> kctx(EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr));
  EVP_PKEY* raw_key = nullptr;
  if (!kctx || EVP_PKEY_keygen_init(kctx.get()) != 1 ||
      EVP_PKEY_CTX_set_ec_paramgen_curve_nid(kctx.get(), NID_X9_62_prime256v1) != 1 ||
      EVP_PKEY_keygen(kctx.get(), &raw_key) != 1) {
    return absl::InternalError("cannot generate the API's TLS key");
  }
  Ptr<EVP_PKEY> key(raw_key);
  Ptr<X509> cert(X509_new());
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof(serial));
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("berth"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("berth-api"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  if (!AddExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !AddExtension(cert.get(), NID_key_usage, "critical,digitalSignature,keyEncipherment,keyCertSign") ||
      !AddExtension(cert.get(), NID_ext_key_usage, "serverAuth") ||
      !AddExtension(cert.get(), NID_subject_key_identifier, "hash") ||
      !AddExtension(cert.get(), NID_subject_alt_name, "IP:127.0.0.1,IP:0:0:0:0:0:0:0:1,DNS:localhost") ||
      X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return absl::InternalError("cannot make the API's TLS certificate");
  }
  Ptr<BIO> cbio(BIO_new(BIO_s_mem())), kbio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(cbio.get(), cert.get());
  PEM_write_bio_PrivateKey(kbio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  id.cert_pem = BioString(cbio.get());
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(id.key_file, BioString(kbio.get()), 0600));
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(id.cert_file, id.cert_pem, 0644));
  return id;
}

}  // namespace berth::apiserver
