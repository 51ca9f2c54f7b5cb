// Ed25519 (util/ed25519.h): RFC 8032 section 7.1 test vectors TEST 1 and TEST 2 reproduced
// byte for byte (the hex typed from the RFC), sign/verify round trips, the public key
// forms, and the key files: mode 0600, no overwrite, clear errors for the wrong file that
// never echo a private key. Also the hex/base64 codings (RFC 4648 section 10 vectors).
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "util/ed25519.h"
#include "util/error.h"
#include "util/hash.h"
#include "../test_files.h"

using namespace brl;
using namespace std::string_literals;
namespace fs = std::filesystem;

namespace {

std::string unhex(const std::string& h) { return from_hex(h).value(); }
std::string hex(const std::string& b) { return to_hex(reinterpret_cast<const unsigned char*>(b.data()), b.size()); }

struct Rfc8032Case {
  const char *name, *secret, *public_key, *message, *signature;
};

// RFC 8032, 7.1. Test Vectors for Ed25519.
const Rfc8032Case kRfc8032[] = {
    {"TEST1", "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe246"
     "55141438e7a100b"},
    {"TEST2", "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb"
     "00d291612bb0c00"},
};

// PEM texts written by OpenSSL itself: a private key of any type, a public Ed25519 key.
std::string pem_of(EVP_PKEY* k, bool private_key) {
  BIO* b = BIO_new(BIO_s_mem());
  if (private_key) PEM_write_bio_PrivateKey(b, k, nullptr, nullptr, 0, nullptr, nullptr);
  else PEM_write_bio_PUBKEY(b, k);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(b);
  EVP_PKEY_free(k);
  return pem;
}
std::string private_pem(const char* type) { return pem_of(EVP_PKEY_Q_keygen(nullptr, nullptr, type), true); }
std::string public_pem(const std::string& raw) {
  return pem_of(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr,
                                            reinterpret_cast<const unsigned char*>(raw.data()), raw.size()),
                false);
}

}  // namespace

TEST(Rfc8032, TestVectorsReproduceByteForByte) {
  for (const auto& c : kRfc8032) {
    SCOPED_TRACE(c.name);
    auto key = ed25519::SigningKey::from_seed(unhex(c.secret));
    EXPECT_EQ(hex(key.public_key()), c.public_key);
    std::string sig = key.sign(unhex(c.message));
    EXPECT_EQ(hex(sig), c.signature);
    EXPECT_TRUE(ed25519::verify(unhex(c.public_key), unhex(c.message), unhex(c.signature)));
    std::string bad = unhex(c.signature);
    bad[5] ^= 0x01;
    EXPECT_FALSE(ed25519::verify(unhex(c.public_key), unhex(c.message), bad));
    EXPECT_FALSE(ed25519::verify(unhex(c.public_key), unhex(c.message) + "x", unhex(c.signature)));
  }
  // The vectors under each other's keys do not verify.
  EXPECT_FALSE(
      ed25519::verify(unhex(kRfc8032[1].public_key), unhex(kRfc8032[0].message), unhex(kRfc8032[0].signature)));
}

TEST(Ed25519, SignVerifyRoundTrip) {
  auto a = ed25519::SigningKey::generate(), b = ed25519::SigningKey::generate();
  EXPECT_NE(a.public_key(), b.public_key());
  ASSERT_EQ(a.public_key().size(), ed25519::kPublicKeySize);
  const std::string msg = "header bytes \0 with a NUL"s;
  std::string sig = a.sign(msg);
  ASSERT_EQ(sig.size(), ed25519::kSignatureSize);
  EXPECT_EQ(sig, a.sign(msg));  // deterministic (RFC 8032)
  EXPECT_TRUE(ed25519::verify(a.public_key(), msg, sig));
  EXPECT_FALSE(ed25519::verify(b.public_key(), msg, sig));
  EXPECT_FALSE(ed25519::verify(a.public_key(), msg.substr(1), sig));
  EXPECT_FALSE(ed25519::verify(a.public_key(), msg, sig.substr(1)));
  EXPECT_FALSE(ed25519::verify(a.public_key().substr(1), msg, sig));
}

TEST(Ed25519, PublicKeyForms) {
  auto key = ed25519::SigningKey::from_seed(unhex(kRfc8032[0].secret));
  const std::string line = ed25519::format_public_key(key.public_key());
  EXPECT_EQ(line, "ed25519:" + base64_encode(unhex(kRfc8032[0].public_key)));
  EXPECT_EQ(ed25519::parse_public_key(line, "k").value(), key.public_key());
  EXPECT_EQ(ed25519::parse_public_key("  " + line + "\n", "k").value(), key.public_key());
  EXPECT_EQ(ed25519::parse_public_key(std::string("ed25519:") + kRfc8032[0].public_key, "k").value(), key.public_key());
  // PEM (SubjectPublicKeyInfo), as `openssl pkey -pubout` writes it.
  EXPECT_EQ(ed25519::parse_public_key(public_pem(key.public_key()), "k").value(), key.public_key());

  for (std::string bad :
       {std::string("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"),  // no prefix
        std::string("ed25519:AAAA"), std::string("ed25519:not base64!"), std::string("rsa:") + line.substr(8)}) {
    auto r = ed25519::parse_public_key(bad, "allowed_keys[3]");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("allowed_keys[3]"), std::string::npos);
    EXPECT_NE(r.status().message().find("ed25519:<base64"), std::string::npos);
  }
  // A private key pasted where a public one belongs: refused, and not echoed.
  std::string priv = private_pem("ED25519");
  auto r = ed25519::parse_public_key(priv, "k");
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("private key"), std::string::npos);
  EXPECT_EQ(r.status().message().find(priv.substr(30, 20)), std::string::npos);
  // A PEM public key of another type.
  EXPECT_FALSE(ed25519::parse_public_key("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "k"));
}

TEST(Ed25519, KeyFiles) {
  test::TempDir d;
  auto key = ed25519::SigningKey::generate();
  const std::string path = d.str("w.pem");
  key.save(path);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto back = ed25519::SigningKey::load(path);
  EXPECT_EQ(back.public_key(), key.public_key());
  EXPECT_EQ(back.sign("m"), key.sign("m"));
  // Never overwritten.
  EXPECT_NE(test::error_of([&] { key.save(path); }).find("does not overwrite"), std::string::npos);

  // The wrong file: each error names the path and says what to do, and no private bytes.
  std::string missing = test::error_of([&] { ed25519::SigningKey::load(d.str("nope.pem")); });
  EXPECT_NE(missing.find("nope.pem"), std::string::npos);
  EXPECT_NE(missing.find("bucketrl keygen"), std::string::npos);

  test::write_file(d.str("w.pub"), ed25519::format_public_key(key.public_key()) + "\n");
  EXPECT_NE(test::error_of([&] { ed25519::SigningKey::load(d.str("w.pub")); }).find("is a public key"),
            std::string::npos);
  test::write_file(d.str("pub.pem"), public_pem(key.public_key()));
  EXPECT_NE(test::error_of([&] { ed25519::SigningKey::load(d.str("pub.pem")); }).find("is a public key"),
            std::string::npos);
  test::write_file(d.str("junk.pem"), "hello\n");
  EXPECT_NE(test::error_of([&] { ed25519::SigningKey::load(d.str("junk.pem")); }).find("not a PEM private key"),
            std::string::npos);

  const std::string ec = private_pem("X25519");
  test::write_file(d.str("x.pem"), ec);
  std::string wrong = test::error_of([&] { ed25519::SigningKey::load(d.str("x.pem")); });
  EXPECT_NE(wrong.find("x.pem"), std::string::npos);
  EXPECT_NE(wrong.find("X25519"), std::string::npos);
  EXPECT_NE(wrong.find("Ed25519"), std::string::npos);
  EXPECT_EQ(wrong.find(ec.substr(30, 20)), std::string::npos);

  test::write_file(d.str("enc.pem"),
                   "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n");
  EXPECT_NE(test::error_of([&] { ed25519::SigningKey::load(d.str("enc.pem")); }).find("encrypted"), std::string::npos);
}

TEST(Codings, Rfc4648Base64AndHex) {
  const std::pair<const char*, const char*> v[] = {{"", ""},
                                                   {"f", "Zg=="},
                                                   {"fo", "Zm8="},
                                                   {"foo", "Zm9v"},
                                                   {"foob", "Zm9vYg=="},
                                                   {"fooba", "Zm9vYmE="},
                                                   {"foobar", "Zm9vYmFy"}};
  for (auto& [plain, coded] : v) {
    EXPECT_EQ(base64_encode(plain), coded);
    EXPECT_EQ(base64_decode(coded).value(), plain);
  }
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zm 9v", "Zm9v\n", "Zm=v", "Zm9*", "Zh==", "Zm9="})
    EXPECT_FALSE(base64_decode(bad)) << bad;
  EXPECT_EQ(from_hex("00fFa0").value(), std::string("\x00\xff\xa0", 3));
  EXPECT_FALSE(from_hex("abc"));
  EXPECT_FALSE(from_hex("zz"));
}
