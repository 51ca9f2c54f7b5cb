// S3 settings resolution: environment vs. ~/.aws files (written to a temp folder), profile
// sections, region/endpoint precedence, path vs. virtual-hosted addressing. The expected
// precedence is the AWS CLI's documented order.
#include "store/credentials.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "util/error.h"

using namespace brl;
using namespace brl::store;
namespace fs = std::filesystem;

namespace {

class Credentials : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("brl-creds-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / ".aws");
    env_["HOME"] = dir_.string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& rel, const std::string& text) { std::ofstream(dir_ / rel) << text; }
  EnvLookup env() const {
    auto m = env_;
    return [m](const std::string& k) -> std::optional<std::string> {
      auto it = m.find(k);
      if (it == m.end()) return std::nullopt;
      return it->second;
    };
  }
  S3Config resolve(const std::string& bucket = "my-bucket") { return resolve_s3_config(bucket, env()); }

  fs::path dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(Credentials, EnvironmentWinsOverProfileFiles) {
  write(".aws/credentials", "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = filesecret\n");
  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = "envsecret";
  env_["AWS_SESSION_TOKEN"] = "envtoken";
  S3Config c = resolve();
  EXPECT_EQ(c.creds.access_key, "ENVKEY");
  EXPECT_EQ(c.creds.secret_key, "envsecret");
  EXPECT_EQ(c.creds.session_token, "envtoken");
  EXPECT_NE(c.creds_source.find("environment"), std::string::npos);
  EXPECT_EQ(c.region, "us-east-1");
  EXPECT_EQ(c.scheme, "https");
  EXPECT_EQ(c.endpoint_host, "s3.us-east-1.amazonaws.com");
  EXPECT_FALSE(c.path_style);
}

TEST_F(Credentials, OnlyHalfOfTheEnvironmentPairIsAnError) {
  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  EXPECT_THROW(resolve(), UserError);
}

TEST_F(Credentials, NamedProfileFromCredentialsAndConfigFiles) {
  write(".aws/credentials",
        "# comment\n[default]\naws_access_key_id=DEF\naws_secret_access_key=defsecret\n\n"
        "[work]\n  aws_access_key_id = WORKKEY  \naws_secret_access_key = work/secret+x=\naws_session_token = tok\n");
  write(".aws/config",
        "[default]\nregion = us-west-2\n[profile   work]\nregion = eu-west-3\nendpoint_url = http://127.0.0.1:9000\n"
        "s3 =\n  addressing_style = path\n");
  env_["AWS_PROFILE"] = "work";
  S3Config c = resolve();
  EXPECT_EQ(c.creds.access_key, "WORKKEY");
  EXPECT_EQ(c.creds.secret_key, "work/secret+x=");
  EXPECT_EQ(c.creds.session_token, "tok");
  EXPECT_NE(c.creds_source.find("profile 'work'"), std::string::npos);
  EXPECT_EQ(c.creds_source.find("secret"), std::string::npos);
  EXPECT_EQ(c.region, "eu-west-3");
  EXPECT_EQ(c.scheme, "http");
  EXPECT_EQ(c.endpoint_host, "127.0.0.1:9000");
  EXPECT_TRUE(c.path_style) << "an IP endpoint has no DNS names for buckets";
}

TEST_F(Credentials, ConfigFileAloneAndExplicitFilePaths) {
  write("cfg", "[profile p]\naws_access_key_id = CFGKEY\naws_secret_access_key = cfgsecret\nregion = ap-south-1\n");
  env_["AWS_CONFIG_FILE"] = (dir_ / "cfg").string();
  env_["AWS_SHARED_CREDENTIALS_FILE"] = (dir_ / "does-not-exist").string();
  env_["AWS_PROFILE"] = "p";
  S3Config c = resolve();
  EXPECT_EQ(c.creds.access_key, "CFGKEY");
  EXPECT_EQ(c.region, "ap-south-1");
  EXPECT_EQ(c.endpoint_host, "s3.ap-south-1.amazonaws.com");
}

TEST_F(Credentials, NoCredentialsAnywhereNamesWhatToSet) {
  try {
    resolve("b1");
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("AWS_ACCESS_KEY_ID"), std::string::npos) << m;
    EXPECT_NE(m.find("'b1'"), std::string::npos) << m;
    EXPECT_NE(m.find(".aws/credentials"), std::string::npos) << m;
    EXPECT_NE(m.find("s3-server.sh"), std::string::npos) << m;
  }
}

TEST_F(Credentials, RegionAndEndpointPrecedence) {
  env_["AWS_ACCESS_KEY_ID"] = "K";
  env_["AWS_SECRET_ACCESS_KEY"] = "S";
  write(".aws/config", "[default]\nregion = from-config\n");
  EXPECT_EQ(resolve().region, "from-config");
  env_["AWS_DEFAULT_REGION"] = "from-default";
  EXPECT_EQ(resolve().region, "from-default");
  env_["AWS_REGION"] = "from-region";
  EXPECT_EQ(resolve().region, "from-region");
  env_["AWS_ENDPOINT_URL"] = "https://storage.example.com/";
  EXPECT_EQ(resolve().endpoint_host, "storage.example.com");
  EXPECT_FALSE(resolve().path_style) << "auto: virtual-hosted for a DNS endpoint";
  env_["AWS_ENDPOINT_URL_S3"] = "http://localhost:7480";
  S3Config c = resolve();
  EXPECT_EQ(c.endpoint_host, "localhost:7480");
  EXPECT_EQ(c.scheme, "http");
  EXPECT_TRUE(c.path_style);
  env_["AWS_ENDPOINT_URL_S3"] = "127.0.0.1:7480";
  EXPECT_THROW(resolve(), UserError) << "no scheme";
  env_["AWS_ENDPOINT_URL_S3"] = "http://host/path";
  EXPECT_THROW(resolve(), UserError) << "a path in the endpoint";
}

TEST_F(Credentials, AddressingModes) {
  env_["AWS_ACCESS_KEY_ID"] = "K";
  env_["AWS_SECRET_ACCESS_KEY"] = "S";
  EXPECT_FALSE(resolve("plain-bucket").path_style);
  EXPECT_TRUE(resolve("dotted.bucket").path_style) << "dots break TLS wildcard names";
  env_["BRL_S3_ADDRESSING"] = "path";
  EXPECT_TRUE(resolve("plain-bucket").path_style);
  env_["BRL_S3_ADDRESSING"] = "virtual";
  env_["AWS_ENDPOINT_URL"] = "http://127.0.0.1:7480";
  EXPECT_FALSE(resolve("plain-bucket").path_style);
  EXPECT_THROW(resolve("dotted.bucket"), UserError);
  env_["BRL_S3_ADDRESSING"] = "sideways";
  EXPECT_THROW(resolve(), UserError);
}

TEST(HostIsIp, Cases) {
  EXPECT_TRUE(host_is_ip_or_localhost("127.0.0.1:7480"));
  EXPECT_TRUE(host_is_ip_or_localhost("10.1.2.3"));
  EXPECT_TRUE(host_is_ip_or_localhost("[::1]:9000"));
  EXPECT_TRUE(host_is_ip_or_localhost("localhost"));
  EXPECT_FALSE(host_is_ip_or_localhost("s3.amazonaws.com"));
  EXPECT_FALSE(host_is_ip_or_localhost("10.1.2.3.nip.io:80"));
}

}  // namespace

// The INI reader strips what Python's str.strip() does (the AWS CLI's reader), form feed and
// vertical tab included: fuzz/corpus/aws_config/formfeed_key kept "region\f" as a key.
TEST(ParseIni, TrimsLikeTheAwsCli) {
  auto ini =
      brl::store::parse_ini("[default]\nregion\f = us-east-1\v\naws_access_key_id=\tAK \n\f[profile \v x]\nk=v\n");
  EXPECT_EQ(ini["default"]["region"], "us-east-1");
  EXPECT_EQ(ini["default"]["aws_access_key_id"], "AK");
  EXPECT_EQ(ini["profile x"]["k"], "v");
  EXPECT_EQ(ini.size(), 2u);
}
