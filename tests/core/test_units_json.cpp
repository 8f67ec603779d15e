// Tests of core/units.hpp (sizes as users type them) and core/json.hpp (--json output).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/units.hpp"

namespace gs = gradsync;

namespace {

TEST(ParseSize, PlainAndSuffixed) {
  EXPECT_EQ(gs::parse_size("8", "--size"), 8);
  EXPECT_EQ(gs::parse_size("0", "--size"), 0);
  EXPECT_EQ(gs::parse_size("64K", "--size"), 64 * 1024);
  EXPECT_EQ(gs::parse_size("4M", "--size"), 4 * 1024 * 1024);
  EXPECT_EQ(gs::parse_size("1G", "--size"), std::int64_t{1} << 30);
  EXPECT_EQ(gs::parse_size("2T", "--size"), std::int64_t{2} << 40);
  EXPECT_EQ(gs::parse_size("1.5K", "--size"), 1536);
  EXPECT_EQ(gs::parse_size("0.5M", "--size"), 512 * 1024);
  EXPECT_EQ(gs::parse_size("4MiB", "--size"), 4 * 1024 * 1024);
  EXPECT_EQ(gs::parse_size("4MB", "--size"), 4 * 1024 * 1024);
  EXPECT_EQ(gs::parse_size("4m", "--size"), 4 * 1024 * 1024);
  EXPECT_EQ(gs::parse_size("64k", "--size"), 64 * 1024);
  EXPECT_EQ(gs::parse_size("4mib", "--size"), 4 * 1024 * 1024);
  EXPECT_EQ(gs::parse_size("512B", "--size"), 512);
  EXPECT_EQ(gs::parse_size("512b", "--size"), 512);
}

// Each bad input throws UsageError whose message names the option and quotes the input.
void expect_bad(const std::string& text) {
  try {
    (void)gs::parse_size(text, "--chunk-bytes");
    ADD_FAILURE() << "no error for '" << text << "'";
  } catch (const gs::UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--chunk-bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + text + "'"), std::string::npos) << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "'" << text << "' threw a non-UsageError: " << e.what();
  }
}

TEST(ParseSize, RejectsBadInputNamingTheOption) {
  for (const char* bad : {"-1", "-4K", "", " ", "abc", "K", "4X", "4KK", "1.5", "0.3K", "1..5K", ".", "4 M x",
                          "99999999999999999999", "9999999999T", "1e3"})
    expect_bad(bad);
}

TEST(ParseIntDouble, ValuesAndErrors) {
  EXPECT_EQ(gs::parse_int("42", "--iters"), 42);
  EXPECT_THROW(gs::parse_int("4x", "--iters"), gs::UsageError);
  EXPECT_THROW(gs::parse_int("", "--iters"), gs::UsageError);
  EXPECT_DOUBLE_EQ(gs::parse_double("2.5", "--x"), 2.5);
  EXPECT_THROW(gs::parse_double("nan", "--x"), gs::UsageError);
  EXPECT_THROW(gs::parse_double("1.0q", "--x"), gs::UsageError);
}

TEST(FormatBytes, Units) {
  EXPECT_EQ(gs::format_bytes(512), "512 B");
  EXPECT_EQ(gs::format_bytes(4 << 20), "4 MiB");
  EXPECT_EQ(gs::format_bytes(1.5 * (1 << 30)), "1.50 GiB");
}

// ---- JSON ------------------------------------------------------------------------------------

TEST(Json, NestedObjectsCompact) {
  gs::Json j = gs::Json::object();
  j.set("name", "ring")
      .set("ranks", 4)
      .set("busbw", 1.5)
      .set("ok", true)
      .set("none", nullptr)
      .set("sizes", gs::Json::array().push(8).push(1099511627776LL))
      .set("inner", gs::Json::object().set("a", gs::Json::array()).set("b", gs::Json::object()));
  EXPECT_EQ(j.dump(), R"({"name":"ring","ranks":4,"busbw":1.5,"ok":true,"none":null,)"
                      R"("sizes":[8,1099511627776],"inner":{"a":[],"b":{}}})");
}

TEST(Json, SetReplacesAndKeepsOrder) {
  gs::Json j = gs::Json::object();
  j.set("a", 1).set("b", 2).set("a", 3);
  EXPECT_EQ(j.dump(), R"({"a":3,"b":2})");
}

TEST(Json, Indented) {
  gs::Json j = gs::Json::object();
  j.set("a", gs::Json::array().push(1).push(2)).set("b", gs::Json::object().set("c", "d"));
  EXPECT_EQ(j.dump(2), "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {\n    \"c\": \"d\"\n  }\n}");
}

TEST(Json, EscapesStringsAndKeys) {
  gs::Json j = gs::Json::object();
  j.set("k\"ey", std::string("q\"b\\s\n\t\r") + '\x01' + "\x1f" + "é");
  EXPECT_EQ(j.dump(), "{\"k\\\"ey\":\"q\\\"b\\\\s\\n\\t\\r\\u0001\\u001f\xc3\xa9\"}");
}

TEST(Json, NonFiniteNumbersBecomeNull) {
  gs::Json j = gs::Json::array();
  j.push(std::numeric_limits<double>::infinity()).push(std::nan("")).push(0.1);
  EXPECT_EQ(j.dump(), "[null,null,0.1]");
}

TEST(Json, MisuseThrows) {
  gs::Json arr = gs::Json::array();
  EXPECT_THROW(arr.set("a", 1), gs::Error);
  gs::Json obj = gs::Json::object();
  EXPECT_THROW(obj.push(1), gs::Error);
}

}  // namespace
