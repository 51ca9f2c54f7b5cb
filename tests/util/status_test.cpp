// Status and Result carry a code, a message and a hint; sha256 against FIPS 180-2 test vectors.
#include "util/status.h"

#include <gtest/gtest.h>

#include "util/hash.h"

using namespace brl;

TEST(Status, OkAndError) {
  Status ok;
  EXPECT_TRUE(ok.is_ok());
  Status nf(StatusCode::kNotFound, "key 'a/b'");
  EXPECT_FALSE(nf.is_ok());
  EXPECT_FALSE(nf.retryable());
  EXPECT_EQ(nf.to_string(), "not found: key 'a/b'");
  EXPECT_TRUE(Status(StatusCode::kThrottled, "").retryable());
  EXPECT_THROW(nf.throw_if_error(), UserError);
}

TEST(Result, ValueOrStatus) {
  Result<int> r = 5;
  EXPECT_TRUE(r.is_ok());
  EXPECT_EQ(r.value(), 5);
  Result<int> e = Status(StatusCode::kTransient, "reset");
  EXPECT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), StatusCode::kTransient);
  EXPECT_THROW(e.value(), UserError);
}

// FIPS 180-2 test vectors.
TEST(Hash, Sha256Vectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
