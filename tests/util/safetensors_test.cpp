// safetensors reader/writer: the published example bytes, round trips, and every kind of
// bad input -> UserError naming the file.
#include "util/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "../test_files.h"
#include "util/error.h"

using namespace brl;
using brl::st::DType;

namespace {
std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}
std::string make_file(const std::string& header_json, const std::string& data) {
  return le64(header_json.size()) + header_json + data;
}
// Expects a UserError whose message contains the file label and `needle`.
void expect_bad(const std::string& bytes, const std::string& needle) {
  test::TempDir dir;
  const std::string path = dir.str("bad.safetensors");
  test::write_file(path, bytes);
  try {
    st::SafetensorsFile::open(path);
    FAIL() << "no error for input expecting: " << needle;
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}
}  // namespace

// The example the reference implementation's own tests use: a 2x2 I32 tensor of zeros,
// header length 0x3c.
TEST(Safetensors, ParsesReferenceExample) {
  std::string json = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
  ASSERT_EQ(json.size(), 0x3cu);
  std::string bytes = std::string("\x3c\0\0\0\0\0\0\0", 8) + json + std::string(16, '\0');
  auto f = st::SafetensorsFile::from_buffer(bytes.data(), bytes.size(), "example");
  ASSERT_EQ(f.names().size(), 1u);
  auto& v = f.get("test");
  EXPECT_EQ(v.dtype, DType::I32);
  EXPECT_EQ(v.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(v.nbytes, 16u);
  EXPECT_EQ(v.data, reinterpret_cast<const uint8_t*>(bytes.data()) + 8 + 0x3c);
}

TEST(Safetensors, RoundTripAllDtypesAndMetadata) {
  test::TempDir dir;
  std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.0f, 7.0f, -1e-3f};
  std::vector<uint16_t> f16 = {0x3c00, 0xc000};  // 1.0, -2.0
  std::vector<uint16_t> bf16 = {0x3f80};         // 1.0
  std::vector<int64_t> i64 = {-5, 1ll << 40};
  std::vector<uint8_t> u8 = {1, 2, 3};
  std::vector<uint8_t> b = {1, 0};
  std::vector<double> f64 = {3.141592653589793};
  std::vector<int8_t> i8 = {-128, 127};
  std::vector<int32_t> i32 = {-7};
  std::vector<st::TensorData> ts = {
      {"a.f32", DType::F32, {2, 3}, f32.data(), f32.size() * 4},
      {"b.f16", DType::F16, {2}, f16.data(), 4},
      {"c.bf16", DType::BF16, {1, 1}, bf16.data(), 2},
      {"d.i64", DType::I64, {2}, i64.data(), 16},
      {"e.u8", DType::U8, {3}, u8.data(), 3},
      {"f.bool", DType::BOOL, {2}, b.data(), 2},
      {"g.f64", DType::F64, {}, f64.data(), 8},
      {"h.i8", DType::I8, {2}, i8.data(), 2},
      {"i.i32", DType::I32, {1}, i32.data(), 4},
      {"j.empty", DType::F32, {0, 4}, nullptr, 0},
  };
  const std::string path = dir.str("rt.safetensors");
  st::write_safetensors(path, ts, {{"format", "pt"}, {"note", "x"}});
  auto raw = test::read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header must be padded to a multiple of 8";
  EXPECT_EQ(raw[8], '{');
  EXPECT_EQ(raw, st::serialize_safetensors(ts, {{"format", "pt"}, {"note", "x"}}));

  auto f = st::SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "x");
  ASSERT_EQ(f.names().size(), ts.size());
  for (auto& t : ts) {
    auto& v = f.get(t.name);
    EXPECT_EQ(v.dtype, t.dtype) << t.name;
    EXPECT_EQ(v.shape, t.shape) << t.name;
    ASSERT_EQ(v.nbytes, t.nbytes) << t.name;
    if (t.nbytes) {
      EXPECT_EQ(std::memcmp(v.data, t.data, t.nbytes), 0) << t.name;
    }
  }
  EXPECT_EQ(f.get("g.f64").numel(), 1);
  EXPECT_THROW(f.get("nope"), UserError);
}

TEST(Safetensors, RejectsBadInput) {
  const std::string ok_json = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data8(8, '\1');
  expect_bad("", "shorter than the 8-byte header length");
  expect_bad(std::string(5, '\0'), "shorter than the 8-byte header length");
  expect_bad(le64(1000) + ok_json, "runs past the end of the file");
  expect_bad(le64(1ull << 62) + ok_json, "exceeds the 100 MB limit");
  // Truncated: the data buffer is shorter than the offsets say.
  expect_bad(make_file(ok_json, std::string(4, '\0')), "outside the data buffer");
  expect_bad(make_file("{\"x\": [1, 2", data8), "not valid JSON");
  expect_bad(make_file("[1,2]", ""), "not a JSON object");
  expect_bad(make_file(R"({"x":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", data8), "unsupported dtype \"Q4\"");
  expect_bad(make_file(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", data8), "\"dtype\"");
  expect_bad(make_file(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8), "non-negative");
  expect_bad(make_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8),
             "expected 3 elements x 4 bytes");
  expect_bad(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data8), "outside the data buffer");
  expect_bad(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data8), "data_offsets");
  expect_bad(make_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                       data8),
             "overlaps");
  expect_bad(make_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8), "hole in the data buffer");
  expect_bad(make_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data8), "tensors cover 4");
  expect_bad(make_file(R"({"x":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", data8),
             "overflows");
  expect_bad(make_file(R"({"__metadata__":{"a":1}})", ""), "__metadata__");
}

TEST(Safetensors, MissingFileNamesPath) {
  try {
    st::SafetensorsFile::open("/nonexistent/dir/m.safetensors");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/m.safetensors"), std::string::npos);
  }
}

// Every truncation of a valid file is rejected cleanly (never a crash or a read past the end).
TEST(Safetensors, EveryTruncationRejected) {
  std::vector<float> a = {1, 2, 3}, b = {4};
  auto bytes = st::serialize_safetensors({{"a", DType::F32, {3}, a.data(), 12}, {"b", DType::F32, {1}, b.data(), 4}});
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string cut = bytes.substr(0, n);
    EXPECT_THROW(st::SafetensorsFile::from_buffer(cut.data(), cut.size(), "cut"), UserError) << n;
  }
  EXPECT_NO_THROW(st::SafetensorsFile::from_buffer(bytes.data(), bytes.size(), "whole"));
}
