// json_int: only JSON integers that fit the type; everything else is nlohmann's type_error
// (a plain get<int64_t>() casts 1e300, which is undefined behaviour).
#include "util/json_int.h"

#include <gtest/gtest.h>

using brl::json_int;
using brl::json_int_fits;
using nlohmann::json;

TEST(JsonInt, AcceptsIntegersThatFit) {
  EXPECT_EQ(json_int<int64_t>(json::parse("-9223372036854775808")), INT64_MIN);
  EXPECT_EQ(json_int<uint64_t>(json::parse("18446744073709551615")), UINT64_MAX);
  EXPECT_EQ(json_int<int>(json::parse("-2147483648")), INT32_MIN);
  EXPECT_EQ(json_int<uint64_t>(json::parse("0")), 0u);
  EXPECT_EQ(json_int(json::parse(R"({"a": 7})"), "a", int64_t{3}), 7);
  EXPECT_EQ(json_int(json::parse(R"({"b": 7})"), "a", int64_t{3}), 3);  // absent: the fallback
}

TEST(JsonInt, RefusesFloatsOutOfRangeAndOtherTypes) {
  for (const char* bad : {"1e300", "-1e300", "2.5", "5.0", "\"5\"", "null", "true", "[1]"})
    EXPECT_THROW(json_int<int64_t>(json::parse(bad)), json::type_error) << bad;
  EXPECT_THROW(json_int<int64_t>(json::parse("9223372036854775808")), json::type_error);  // 2^63
  EXPECT_THROW(json_int<uint64_t>(json::parse("-1")), json::type_error);
  EXPECT_THROW(json_int<int>(json::parse("2147483648")), json::type_error);
  EXPECT_THROW(json_int<uint32_t>(json::parse("4294967296")), json::type_error);
  EXPECT_THROW(json_int(json::parse(R"({"a": 1e300})"), "a", int64_t{0}), json::type_error);
  EXPECT_THROW(json_int(json::parse("[]"), "a", int64_t{0}), json::type_error);
}

TEST(JsonInt, FitsIsTheNonThrowingTest) {
  EXPECT_TRUE(json_int_fits<int>(json::parse("2147483647")));
  EXPECT_FALSE(json_int_fits<int>(json::parse("4294967301")));  // get<int>() would wrap it to 5
  EXPECT_FALSE(json_int_fits<int64_t>(json::parse("18446744073709551615")));
  EXPECT_FALSE(json_int_fits<int32_t>(json::parse("1e300")));
  EXPECT_FALSE(json_int_fits<int32_t>(json::parse("true")));
}
