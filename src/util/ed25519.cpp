#include "util/ed25519.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/error.h"
#include "util/hash.h"
#include "util/log.h"

namespace brl::ed25519 {

namespace {

constexpr std::string_view kPrefix = "ed25519:";
const char* kKeygenHint =
    "create a key pair with `bucketrl keygen --out NAME` (or `openssl genpkey -algorithm ed25519 -out NAME.pem`)";

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

std::string raw_public_key(EVP_PKEY* k) {
  std::string out(kPublicKeySize, '\0');
  size_t n = out.size();
  BRL_ASSERT(
      EVP_PKEY_get_raw_public_key(k, reinterpret_cast<unsigned char*>(out.data()), &n) == 1 && n == kPublicKeySize,
      "Ed25519 public key");
  return out;
}

// PEM text -> key; no passphrase prompt (an encrypted key fails instead of blocking a worker).
int no_passphrase(char*, int, int, void*) { return 0; }

}  // namespace

SigningKey::SigningKey(evp_pkey_st* key) : key_(key, EVP_PKEY_free), public_(raw_public_key(key)) {}

SigningKey SigningKey::generate() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  EVP_PKEY* k = nullptr;
  bool ok = ctx && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_keygen(ctx, &k) == 1;
  EVP_PKEY_CTX_free(ctx);
  BRL_ASSERT(ok && k, "Ed25519 key generation failed");
  return SigningKey(k);
}

SigningKey SigningKey::from_seed(std::string_view seed) {
  BRL_ASSERT(seed.size() == kSeedSize, "an Ed25519 secret key is 32 bytes");
  EVP_PKEY* k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr,
                                             reinterpret_cast<const unsigned char*>(seed.data()), seed.size());
  BRL_ASSERT(k, "Ed25519 key from seed");
  return SigningKey(k);
}

SigningKey SigningKey::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError("cannot read signing key '" + path + "': " + std::strerror(errno), kKeygenHint);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.find("PUBLIC KEY-----") != std::string::npos || text.rfind(kPrefix, 0) == 0)
    throw UserError(
        "signing key '" + path + "' is a public key; workers sign with the private key",
        "pass NAME.pem, the private half `bucketrl keygen --out NAME` wrote (NAME.pub is for allowed_keys)");
  if (text.find("ENCRYPTED PRIVATE KEY-----") != std::string::npos)
    throw UserError("signing key '" + path + "' is encrypted; workers need an unencrypted key",
                    "decrypt it with `openssl pkey -in " + path + " -out NAME.pem` and keep NAME.pem at mode 0600");
  BioPtr bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr);
  if (!k) throw UserError("signing key '" + path + "' is not a PEM private key", kKeygenHint);
  if (EVP_PKEY_get_id(k) != EVP_PKEY_ED25519) {
    int id = EVP_PKEY_get_id(k);
    EVP_PKEY_free(k);
    const char* name = OBJ_nid2sn(id);
    throw UserError("signing key '" + path + "' holds a key of type " +
                        std::string(name ? name : "other than Ed25519") + " key; bucketrl signs updates with Ed25519",
                    kKeygenHint);
  }
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077))
    LOG_WARN("signing key '{}' can be read by other users (mode {:o}); chmod 600 it", path, st.st_mode & 0777);
  return SigningKey(k);
}

void SigningKey::save(const std::string& path) const {
  BioPtr bio(BIO_new(BIO_s_mem()));
  BRL_ASSERT(PEM_write_bio_PrivateKey(bio.get(), key_.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1,
             "PEM encoding");
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  // O_EXCL: never replace a key (a run may already trust its public half).
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw UserError(
        "cannot create key file '" + path + "': " + std::strerror(errno),
        errno == EEXIST ? "keygen does not overwrite keys; choose another --out or remove the old file" : "");
  bool ok = ::write(fd, data, static_cast<size_t>(n)) == n;
  ok = ::fsync(fd) == 0 && ok;
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    ::unlink(path.c_str());
    throw UserError("cannot write key file '" + path + "': " + std::strerror(errno));
  }
}

std::string SigningKey::sign(std::string_view message) const {
  MdCtxPtr ctx(EVP_MD_CTX_new());
  std::string sig(kSignatureSize, '\0');
  size_t n = sig.size();
  // Ed25519 is a one-shot signature: no digest is named, the whole message goes in at once.
  BRL_ASSERT(ctx && EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) == 1 &&
                 EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &n,
                                reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1 &&
                 n == kSignatureSize,
             "Ed25519 signing failed");
  return sig;
}

bool verify(std::string_view public_key, std::string_view message, std::string_view signature) {
  if (public_key.size() != kPublicKeySize || signature.size() != kSignatureSize) return false;
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> k(
      EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(public_key.data()),
                                  public_key.size()),
      EVP_PKEY_free);
  if (!k) return false;
  MdCtxPtr ctx(EVP_MD_CTX_new());
  return ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, k.get()) == 1 &&
         EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                          reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
}

std::string format_public_key(std::string_view public_key) {
  BRL_ASSERT(public_key.size() == kPublicKeySize, "an Ed25519 public key is 32 bytes");
  return std::string(kPrefix) + base64_encode(public_key);
}

Result<std::string> parse_public_key(std::string_view text, const std::string& label) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  auto bad = [&](const std::string& what) {
    return Status(
        StatusCode::kInvalidArgument,
        label + ": " + what +
            "; expected ed25519:<base64 of 32 bytes> (the NAME.pub line `bucketrl keygen --out NAME` writes), "
            "ed25519:<64 hex digits>, or a PEM public key");
  };
  if (text.find("PRIVATE KEY") != std::string_view::npos)
    return bad("is a private key (keep it secret: only the worker that signs needs it)");
  if (text.substr(0, 10) == "-----BEGIN") {
    BioPtr bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> k(
        PEM_read_bio_PUBKEY(bio.get(), nullptr, no_passphrase, nullptr), EVP_PKEY_free);
    if (!k) return bad("is not a readable PEM public key");
    if (EVP_PKEY_get_id(k.get()) != EVP_PKEY_ED25519) return bad("is a PEM public key of another type than Ed25519");
    return raw_public_key(k.get());
  }
  if (text.substr(0, kPrefix.size()) != kPrefix) return bad("does not start with \"ed25519:\"");
  std::string_view body = text.substr(kPrefix.size());
  auto raw = body.size() == 2 * kPublicKeySize ? from_hex(body) : base64_decode(body);
  if (!raw) return bad("is neither base64 nor hex after \"ed25519:\"");
  if (raw->size() != kPublicKeySize)
    return bad("holds " + std::to_string(raw->size()) + " bytes, an Ed25519 public key has " +
               std::to_string(kPublicKeySize));
  return *raw;
}

}  // namespace brl::ed25519
