#include "topology/testing/tiny_json.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::topology::testing {
namespace {

using ::testing::HasSubstr;

TEST(TinyJson, ParsesEveryKind) {
  Json j;
  std::string why;
  ASSERT_TRUE(ParseJson(R"( {"a": [1, -2.5e3, true, false, null], "b": {"c": "x\"\n\u0041\u00e9"},
                           "big": 85899345920} )",
                        &j, &why))
      << why;
  ASSERT_EQ(j.kind, Json::kObject);
  const Json* a = j.Get("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->array.size(), 5u);
  EXPECT_EQ(a->array[0].number, 1);
  EXPECT_EQ(a->array[1].number, -2500);
  EXPECT_TRUE(a->array[2].boolean);
  EXPECT_EQ(a->array[3].kind, Json::kBool);
  EXPECT_FALSE(a->array[3].boolean);
  EXPECT_EQ(a->array[4].kind, Json::kNull);
  EXPECT_EQ(j.Get("b")->Get("c")->string, "x\"\nA?");
  EXPECT_EQ(j.Get("big")->number, 85899345920.0);
  EXPECT_EQ(j.Get("missing"), nullptr);
  EXPECT_EQ(a->Get("a"), nullptr) << "an array has no members";
}

TEST(TinyJson, RejectsBrokenText) {
  for (const char* text :
       {"", "{", "[1,]", "{\"a\" 1}", "{\"a\": tru}", "\"open", "1 2", "{\"a\": \"\\q\"}"}) {
    Json j;
    std::string why;
    EXPECT_FALSE(ParseJson(text, &j, &why)) << text;
    EXPECT_THAT(why, HasSubstr("at offset")) << text;
  }
}

TEST(TinyJson, DepthIsBounded) {
  Json j;
  std::string why;
  EXPECT_FALSE(ParseJson(std::string(100, '[') + std::string(100, ']'), &j, &why));
  EXPECT_THAT(why, HasSubstr("nested too deep"));
  EXPECT_TRUE(ParseJson(std::string(60, '[') + std::string(60, ']'), &j, &why)) << why;
}

}  // namespace
}  // namespace trainlet::topology::testing
