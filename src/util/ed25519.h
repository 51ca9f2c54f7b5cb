// Ed25519 signatures (RFC 8032) through OpenSSL's EVP interface: the keys workers sign their
// updates with, the one-line public key form that run.toml's allow-list and the update
// headers carry, and the key files `bucketrl keygen` writes.
//
// Private keys never leave this file's types except through save() (a 0600 PEM file); they
// are not printed, logged or put into error messages.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "util/status.h"

struct evp_pkey_st;  // OpenSSL's EVP_PKEY

namespace brl::ed25519 {

inline constexpr size_t kPublicKeySize = 32, kSeedSize = 32, kSignatureSize = 64;

class SigningKey {
 public:
  static SigningKey generate();
  // From RFC 8032's 32-byte secret key (the seed); for test vectors.
  static SigningKey from_seed(std::string_view seed);
  // A PEM private key file (PKCS#8, as `bucketrl keygen` or `openssl genpkey -algorithm
  // ed25519` write it). Throws UserError naming the path for an unreadable file, a public
  // key, an encrypted key or another key type; warns when others may read the file.
  static SigningKey load(const std::string& path);

  // Writes the private key as PEM to a new file with mode 0600; throws UserError if the
  // file exists or cannot be written.
  void save(const std::string& path) const;
  const std::string& public_key() const { return public_; }  // 32 raw bytes
  std::string sign(std::string_view message) const;          // 64 raw bytes

 private:
  explicit SigningKey(evp_pkey_st* key);
  std::shared_ptr<evp_pkey_st> key_;
  std::string public_;
};

// True when `signature` (64 bytes) is a valid signature of `message` by `public_key` (32 bytes).
bool verify(std::string_view public_key, std::string_view message, std::string_view signature);

// The one-line form of a public key: "ed25519:<standard base64 of the 32 bytes>". Update
// headers, run.json and the NAME.pub files of `bucketrl keygen` use it.
std::string format_public_key(std::string_view public_key);

// A public key (32 raw bytes) from the one-line form, "ed25519:" + 64 hex digits, or a PEM
// public key. kInvalidArgument naming `label` and the accepted forms otherwise; the text is
// not echoed (it could be a private key pasted in the wrong place).
Result<std::string> parse_public_key(std::string_view text, const std::string& label);

}  // namespace brl::ed25519
