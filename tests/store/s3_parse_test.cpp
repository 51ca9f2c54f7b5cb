// The S3 answer parsing that needs no server: ListObjectsV2 XML (the shape of AWS's
// documented example, plus entity escapes), error codes, dates, and s3:// URL checks.
#include <gtest/gtest.h>

#include "store/s3_store.h"
#include "util/error.h"

using namespace brl;
using namespace brl::store;
using namespace brl::store::s3_detail;

TEST(S3Xml, Unescape) {
  EXPECT_EQ(xml_unescape("a&amp;b&lt;c&gt;&quot;d&apos;e"), "a&b<c>\"d'e");
  EXPECT_EQ(xml_unescape("&#x20AC;&#233;&#65;"),
            "\xe2\x82\xac\xc3\xa9"
            "A");
  EXPECT_EQ(xml_unescape("&bogus; & &#xZZ; &"), "&bogus; & &#xZZ; &");
}

TEST(S3Xml, ListObjectsV2Page) {
  const std::string xml = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name><Prefix>run/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>
  <IsTruncated>true</IsTruncated>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <Contents>
    <Key>run/a&amp;b &lt;c&gt;.txt</Key>
    <LastModified>2009-10-12T17:50:30.000Z</LastModified>
    <ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag>
    <Size>434234</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <Contents>
    <Key>run/z/&#x20AC;</Key><LastModified>2024-02-29T23:59:59Z</LastModified>
    <ETag>"0123456789abcdef0123456789abcdef-3"</ETag><Size>0</Size>
    <Owner><ID>x</ID><DisplayName>y</DisplayName></Owner>
  </Contents>
  <Contents><Key>other/outside-prefix</Key><Size>1</Size></Contents>
</ListBucketResult>)";
  auto page = parse_list_v2(xml, "run/");
  ASSERT_TRUE(page) << page.status().to_string();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "a&b <c>.txt");
  EXPECT_EQ(page->objects[0].size, 434234u);
  EXPECT_EQ(page->objects[0].etag, "fba9dede5f27731c9771645a39863328");
  EXPECT_EQ(page->objects[0].mtime_ms, 1255369830000);
  EXPECT_EQ(page->objects[1].key, "z/\xe2\x82\xac");
  EXPECT_EQ(page->objects[1].etag, "0123456789abcdef0123456789abcdef-3");
  EXPECT_EQ(page->objects[1].size, 0u);
  EXPECT_EQ(page->objects[1].mtime_ms, 1709251199000);
  EXPECT_EQ(page->next, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(S3Xml, LastPageEmptyAndMalformed) {
  auto last =
      parse_list_v2("<ListBucketResult><IsTruncated>false</IsTruncated><KeyCount>0</KeyCount></ListBucketResult>", "");
  ASSERT_TRUE(last);
  EXPECT_TRUE(last->objects.empty());
  EXPECT_TRUE(last->next.empty());
  EXPECT_FALSE(parse_list_v2("<Error><Code>InternalError</Code></Error>", ""));
  EXPECT_FALSE(parse_list_v2("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", ""))
      << "truncated without a token would loop forever";
}

TEST(S3Xml, ErrorBodyAndElementBoundaries) {
  const std::string err =
      "<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature &amp; more</Message>"
      "<KeyCount>9</KeyCount><Key>k</Key></Error>";
  EXPECT_EQ(xml_text(err, "Code"), "SignatureDoesNotMatch");
  EXPECT_EQ(xml_text(err, "Message"), "The request signature & more");
  EXPECT_EQ(xml_text(err, "Key"), "k") << "<KeyCount> is not <Key>";
  EXPECT_EQ(xml_text(err, "Missing"), "");
  EXPECT_EQ(xml_text("<A><UploadId/></A>", "UploadId"), "");
}

TEST(S3Dates, Iso8601AndHttpDate) {
  EXPECT_EQ(parse_iso8601_ms("2009-10-12T17:50:30.123Z"), 1255369830123);
  EXPECT_EQ(parse_http_date_ms("Mon, 12 Oct 2009 17:50:30 GMT"), 1255369830000);
  EXPECT_EQ(parse_iso8601_ms("yesterday"), -1);
  EXPECT_EQ(parse_http_date_ms(""), -1);
}

TEST(S3Url, MalformedUrlsAreUserErrors) {
  EnvLookup env = [](const std::string& k) -> std::optional<std::string> {
    if (k == "AWS_ACCESS_KEY_ID") return "K";
    if (k == "AWS_SECRET_ACCESS_KEY") return "S";
    return std::nullopt;
  };
  EXPECT_THROW(open_s3_store("s3://", {}, env), UserError);
  EXPECT_THROW(open_s3_store("s3:///prefix", {}, env), UserError);
  EXPECT_THROW(open_s3_store("s3://bad bucket/x", {}, env), UserError);
  EXPECT_THROW(open_s3_store("s3://b/a//b", {}, env), UserError);
  EXPECT_THROW(open_s3_store("gs://b", {}, env), UserError);
  auto s = open_s3_store("s3://b/run/1/", {}, env);
  EXPECT_EQ(s->describe(), "s3://b/run/1 (https://s3.us-east-1.amazonaws.com)");
}

TEST(S3Options, FromEnvironment) {
  auto env = [](std::map<std::string, std::string> m) {
    return [m](const std::string& k) -> std::optional<std::string> {
      auto it = m.find(k);
      if (it == m.end()) return std::nullopt;
      return it->second;
    };
  };
  S3Options d = s3_options_from_env(env({}));
  EXPECT_EQ(d.part_size, 8u << 20);
  S3Options o = s3_options_from_env(
      env({{"BRL_S3_PART_SIZE_MIB", "32"}, {"BRL_S3_MAX_ATTEMPTS", "3"}, {"BRL_S3_VERIFY_ETAG", "0"}}));
  EXPECT_EQ(o.part_size, 32u << 20);
  EXPECT_GE(o.multipart_threshold, o.part_size);
  EXPECT_EQ(o.max_attempts, 3);
  EXPECT_FALSE(o.verify_etag_md5);
  EXPECT_THROW(s3_options_from_env(env({{"BRL_S3_PART_SIZE_MIB", "4"}})), UserError) << "below S3's 5 MiB";
  EXPECT_THROW(s3_options_from_env(env({{"BRL_S3_MAX_ATTEMPTS", "many"}})), UserError);
}
