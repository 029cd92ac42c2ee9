// Number bounds, multipleOf and the network / duration formats: where each text is refused (the
// exact byte), what stays completable, and the errors for what we do not enforce. The values
// Python's jsonschema gives are in the comments; the fixture test checks them wholesale.
#include <iostream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/constraint/json_schema.h"
#include "model/constraint/schema_number.h"
#include "model/constraint/schema_recognizer.h"
#include "model/constraint/schema_testing.h"

namespace mlaserve::model {
namespace {

using ::testing::HasSubstr;
using testing::Accepts;
using testing::MustCompile;
using testing::Read;

size_t Taken(const std::shared_ptr<const JsonSchema>& s, std::string_view text) {
  return Read(*s, text).taken;
}

absl::Status CompileError(std::string_view schema) {
  return JsonSchema::Compile(schema, false).status();
}

TEST(JsonSchemaNumberTest, BoundsOnNumbers) {
  auto s = MustCompile(R"({"type": "number", "minimum": -1.5, "exclusiveMaximum": 2})");
  for (const char* ok : {"-1.5", "0", "-0", "-0.0", "1.9999", "1.5", "1.9999999999999998"}) {
    EXPECT_TRUE(Accepts(*s, ok)) << ok;
  }
  EXPECT_EQ(Taken(s, "2"), 0u);       // nothing starting with 2 is below 2
  EXPECT_EQ(Taken(s, "-1.6"), 3u);    // -1.6 < -1.5
  EXPECT_EQ(Taken(s, "-1.50001"), 7u);
  EXPECT_EQ(Taken(s, "1e3"), 1u);     // a bounded number has no exponent
  EXPECT_EQ(Taken(s, "10"), 1u);
  EXPECT_EQ(Taken(s, "01"), 1u);
  // 1.99999999999999999 rounds to 2.0 in Python: past the largest double below 2.
  EXPECT_EQ(Taken(s, "1.99999999999999999"), 17u);
  EXPECT_FALSE(Read(*s, "1.").complete);

  auto upper = MustCompile(R"({"type": "number", "maximum": -2})");
  for (const char* ok : {"-2", "-2.5", "-300", "-2.0"}) EXPECT_TRUE(Accepts(*upper, ok)) << ok;
  EXPECT_EQ(Taken(upper, "0"), 0u);
  EXPECT_EQ(Taken(upper, "-1."), 2u);  // -1.x > -2
  EXPECT_TRUE(Read(*upper, "-1").taken == 2 && !Read(*upper, "-1").complete);  // -10 may follow
  EXPECT_EQ(Taken(upper, "-2.01e1"), 5u);
}

TEST(JsonSchemaNumberTest, ExclusiveMinimumZeroStaysCompletable) {
  auto s = MustCompile(R"({"type": "number", "exclusiveMinimum": 0})");
  for (const char* ok : {"0.0001", "1", "12345678901234567890.5"}) {
    EXPECT_TRUE(Accepts(*s, ok)) << ok;
  }
  EXPECT_EQ(Taken(s, "-"), 0u);
  EXPECT_FALSE(Read(*s, "0").complete);
  EXPECT_FALSE(Read(*s, "0.000").complete);
  // The smallest double above 0 is 5e-324: 1e-400 would read as 0.0 in Python. Zeros are
  // offered up to the 323rd, then only a digit >= 5 ends it above the bound.
  const std::string zeros(323, '0');
  EXPECT_TRUE(Accepts(*s, "0." + zeros + "5"));
  EXPECT_TRUE(Accepts(*s, "0." + zeros + "50001"));
  EXPECT_EQ(Taken(s, "0." + zeros + "0"), 2 + zeros.size());
  EXPECT_EQ(Taken(s, "0." + zeros + "49"), 2 + zeros.size());
  // The fraction is unbounded once above the bound.
  EXPECT_TRUE(Accepts(*s, "0.1" + std::string(1000, '0')));
  // Python reads 0.50000000000000005 as 0.5: refused under exclusiveMinimum 0.5.
  auto half = MustCompile(R"({"type": "number", "exclusiveMinimum": 0.5})");
  EXPECT_EQ(Taken(half, "0.50000000000000005"), 17u);
  EXPECT_TRUE(Accepts(*half, "0.5000000000000001"));
  EXPECT_TRUE(Accepts(*half, "1"));
}

TEST(JsonSchemaNumberTest, EveryStateOfABoundedNumberCanEnd) {
  // Every byte the recognizer takes leaves a state from which some number ends inside.
  for (const char* schema :
       {R"({"type": "number", "minimum": 0.25, "maximum": 0.75})",
        R"({"type": "number", "exclusiveMinimum": -0.001, "exclusiveMaximum": 0.001})",
        R"({"type": "number", "minimum": -1e-5, "maximum": 123.456})",
        R"({"type": "number", "exclusiveMaximum": 0})"}) {
    SCOPED_TRACE(schema);
    auto s = MustCompile(schema);
    using namespace schema_internal;
    std::vector<SchemaState> frontier = {StartState(s->compiled())};
    size_t states = 0;
    for (int depth = 0; depth < 8 && !frontier.empty(); ++depth) {
      std::vector<SchemaState> next_frontier;
      for (const SchemaState& st : frontier) {
        for (const char b : std::string_view("-.0123456789")) {
          SchemaState next;
          if (!Step(s->compiled(), st, static_cast<uint8_t>(b), next)) continue;
          ++states;
          // Some completion ends it (breadth-first over the states bytes lead to).
          std::set<std::string> seen;
          std::vector<SchemaState> queue = {next};
          bool ends = false;
          for (size_t q = 0; q < queue.size() && !ends && q < 5000; ++q) {
            ends = CanEnd(s->compiled(), queue[q]);
            for (const char d : std::string_view(".0123456789")) {
              SchemaState tmp;
              if (Step(s->compiled(), queue[q], static_cast<uint8_t>(d), tmp) &&
                  seen.insert(std::string(StateBytes(tmp))).second) {
                queue.push_back(std::move(tmp));
              }
            }
          }
          EXPECT_TRUE(ends);
          if (next_frontier.size() < 200) next_frontier.push_back(std::move(next));
        }
      }
      frontier = std::move(next_frontier);
    }
    EXPECT_GT(states, 20u);
  }
}

TEST(JsonSchemaNumberTest, NumberBoundErrors) {
  EXPECT_THAT(CompileError(R"({"type": "number", "minimum": 1e300})").message(),
              HasSubstr("bounds must lie within +-2^53"));
  EXPECT_THAT(CompileError(R"({"type": "number", "maximum": 9007199254740993})").message(),
              HasSubstr("(at #/maximum)"));
  EXPECT_THAT(CompileError(R"({"type": "number", "exclusiveMinimum": 1,
                               "exclusiveMaximum": 1.0000000000000002})").message(),
              HasSubstr("no number lies between the bounds"));
  EXPECT_THAT(CompileError(R"({"type": "number", "minimum": "1"})").message(),
              HasSubstr("minimum must be a number"));
  EXPECT_TRUE(Accepts(*MustCompile(R"({"type": "number", "minimum": 3, "maximum": 3})"), "3"));
}

TEST(JsonSchemaNumberTest, IntegerMultipleOf) {
  auto s = MustCompile(R"({"type": "integer", "multipleOf": 5, "minimum": -12, "maximum": 20})");
  for (const char* ok : {"-10", "0", "20", "-0", "15", "-5"}) EXPECT_TRUE(Accepts(*s, ok)) << ok;
  EXPECT_EQ(Taken(s, "-12"), 2u);
  EXPECT_EQ(Taken(s, "3"), 0u);
  EXPECT_EQ(Taken(s, "7"), 0u);
  EXPECT_EQ(Taken(s, "25"), 1u);
  EXPECT_FALSE(Read(*s, "1").complete);  // 15 may follow

  auto unbounded = MustCompile(R"({"type": "integer", "multipleOf": 7})");
  EXPECT_TRUE(Accepts(*unbounded, "7000000000000000000000000"));
  EXPECT_TRUE(Accepts(*unbounded, "-7000000000000000000000007"));
  const testing::Reading r = Read(*unbounded, "7000000000000000000000001");
  EXPECT_EQ(r.taken, 25u);
  EXPECT_FALSE(r.complete);
  EXPECT_FALSE(Read(*unbounded, "1").complete);

  // On a number an integral divisor admits integers only (a fraction is never a multiple).
  auto number = MustCompile(R"({"type": "number", "multipleOf": 3, "exclusiveMinimum": 0.5})");
  EXPECT_TRUE(Accepts(*number, "9"));
  EXPECT_EQ(Taken(number, "9.0"), 1u);
  EXPECT_EQ(Taken(number, "0"), 0u);
  // A float with an integral value divides exactly up to 2^53.
  auto float_divisor = MustCompile(R"({"type": "integer", "multipleOf": 4.0})");
  EXPECT_TRUE(Accepts(*float_divisor, "9007199254740992"));
  EXPECT_LT(Taken(float_divisor, "90071992547409920"), 17u);

  EXPECT_THAT(CompileError(R"({"type": "integer", "multipleOf": 5, "minimum": 1,
                               "maximum": 4})").message(),
              HasSubstr("no multiple of 5 lies between the bounds (1 to 4) (at #/multipleOf)"));
  EXPECT_THAT(CompileError(R"({"type": "integer", "multipleOf": 0})").message(),
              HasSubstr("multipleOf must be a number greater than 0"));
}

// int64 bounds have 19 digits: magnitudes from 10^18 on were taken as past every bound, so
// 10^18 passed "minimum": INT64_MAX (and a walk wrote it), INT64_MAX itself was refused under
// "multipleOf": INT64_MAX after its 18 first digits had been allowed (an empty mask), and
// a digit more overflowed the __int128 look-ahead.
TEST(JsonSchemaNumberTest, IntegerBoundsOfNineteenDigits) {
  auto at_max = MustCompile(R"({"type": "integer", "minimum": 9223372036854775807})");
  EXPECT_TRUE(Accepts(*at_max, "9223372036854775807"));
  EXPECT_TRUE(Accepts(*at_max, "92233720368547758070"));
  // Below the bound; a further digit would pass it, so the digits are taken but do not end.
  EXPECT_FALSE(Read(*at_max, "1000000000000000000").complete);
  EXPECT_FALSE(Read(*at_max, "9223372036854775806").complete);
  auto at_min = MustCompile(R"({"type": "integer", "maximum": -9223372036854775808})");
  EXPECT_TRUE(Accepts(*at_min, "-9223372036854775808"));
  EXPECT_FALSE(Read(*at_min, "-9223372036854775806").complete);
  EXPECT_FALSE(Read(*at_min, "-1000000000000000000").complete);

  auto multiple = MustCompile(R"({"type": "integer", "multipleOf": 9223372036854775807,
                                  "maximum": 9223372036854775807})");
  EXPECT_TRUE(Accepts(*multiple, "9223372036854775807"));
  EXPECT_TRUE(Accepts(*multiple, "-9223372036854775807"));
  EXPECT_TRUE(Accepts(*multiple, "-92233720368547758070"));
  EXPECT_EQ(Taken(multiple, "9223372036854775808"), 18u);
  auto thirds = MustCompile(R"({"type": "integer", "minimum": -9223372036854775808,
                                "multipleOf": 3})");
  EXPECT_TRUE(Accepts(*thirds, "-9223372036854775806"));  // 3 * -3074457345618258602
  EXPECT_EQ(Taken(thirds, "-9223372036854775807"), 19u);  // not a multiple: its last digit
  EXPECT_EQ(Taken(thirds, "-9223372036854775809"), 19u);
  EXPECT_TRUE(Accepts(*thirds, "123456789012345678901234567890"));
}

TEST(JsonSchemaNumberTest, FractionalMultipleOfListsWhatPythonAccepts) {
  auto s = MustCompile(R"({"type": "number", "minimum": 0, "maximum": 0.1, "multipleOf": 0.01})");
  for (const char* ok : {"0", "0.01", "0.05", "0.06", "0.08", "0.1"}) {
    EXPECT_TRUE(Accepts(*s, ok)) << ok;
  }
  EXPECT_FALSE(Accepts(*s, "0.07"));  // 0.07 / 0.01 == 7.000000000000001 in Python
  EXPECT_FALSE(Accepts(*s, "0.11"));
  EXPECT_FALSE(Accepts(*s, "0.015"));
  auto halves = MustCompile(R"({"type": "integer", "minimum": -3, "maximum": 3,
                                "multipleOf": 1.5})");
  EXPECT_TRUE(Accepts(*halves, "-3"));
  EXPECT_TRUE(Accepts(*halves, "0"));
  EXPECT_TRUE(Accepts(*halves, "3"));
  EXPECT_FALSE(Accepts(*halves, "1"));
  EXPECT_THAT(CompileError(R"({"type": "number", "multipleOf": 0.01})").message(),
              HasSubstr("multipleOf 0.01 is supported only with minimum and maximum"));
  EXPECT_THAT(CompileError(R"({"type": "number", "minimum": 0, "maximum": 1000,
                               "multipleOf": 0.01})").message(),
              HasSubstr("(at #/multipleOf)"));
}

TEST(JsonSchemaNumberTest, DecimalArithmetic) {
  using schema_internal::Compare;
  using schema_internal::Decimal;
  EXPECT_EQ(Decimal::FromDouble(5e-324).Text(), "0." + std::string(323, '0') + "5");
  EXPECT_EQ(Decimal::FromDouble(-1.5).Text(), "-1.5");
  EXPECT_EQ(Decimal::FromDouble(1e21).Text(), "1000000000000000000000");
  EXPECT_EQ(Decimal::Parse("-0.0e5")->Text(), "0");
  EXPECT_EQ(Decimal::Parse("12.5E-3")->Text(), "0.0125");
  EXPECT_EQ(Compare(*Decimal::Parse("0.1"), *Decimal::Parse("0.10")), 0);
  EXPECT_EQ(Compare(*Decimal::Parse("-2"), *Decimal::Parse("-10")), 1);
  EXPECT_EQ(Compare(*Decimal::Parse("9.99"), *Decimal::Parse("10")), -1);
}

TEST(JsonSchemaNumberTest, NetworkAndDurationFormats) {
  auto ipv4 = MustCompile(R"({"type": "string", "format": "ipv4"})");
  for (const char* ok : {R"("192.168.0.1")", R"("0.0.0.0")", R"("255.255.255.255")"}) {
    EXPECT_TRUE(Accepts(*ipv4, ok)) << ok;
  }
  EXPECT_EQ(Taken(ipv4, R"("256.0.0.1")"), 3u);
  EXPECT_EQ(Taken(ipv4, R"("01.2.3.4")"), 2u);  // Python refuses leading zeros
  EXPECT_EQ(Taken(ipv4, R"("1.2.3")"), 6u);

  auto ipv6 = MustCompile(R"({"type": "string", "format": "ipv6"})");
  for (const char* ok : {R"("::")", R"("::1")", R"("1::")", R"("2001:db8::8a2e:370:7334")",
                         R"("1:2:3:4:5:6:7:8")", R"("1:2:3:4:5:6:7::")",
                         R"("::2:3:4:5:6:7:8")", R"("::ffff:192.168.0.1")",
                         R"("1:2:3:4:5:6:1.2.3.4")", R"("ABCD:ef01::")"}) {
    EXPECT_TRUE(Accepts(*ipv6, ok)) << ok;
  }
  EXPECT_EQ(Taken(ipv6, R"("1:2:3:4:5:6:7:8:9")"), 16u);
  EXPECT_EQ(Taken(ipv6, R"(":1")"), 2u);
  EXPECT_EQ(Taken(ipv6, R"("1:::2")"), 4u);
  EXPECT_EQ(Taken(ipv6, R"("12345::")"), 5u);
  EXPECT_EQ(Taken(ipv6, R"("1::2:3:4:5:6:7:8")"), 15u);  // "::" must stand for a group
  EXPECT_EQ(Taken(ipv6, R"("::01.2.3.4")"), 5u);

  auto host = MustCompile(R"({"type": "string", "format": "hostname"})");
  for (const char* ok : {R"("example.com")", R"("a-b.c.d")", R"("api.eu-west-1.example.COM")",
                         R"("1.2.3.4")"}) {
    EXPECT_TRUE(Accepts(*host, ok)) << ok;
  }
  EXPECT_EQ(Taken(host, R"("localhost")"), 10u);  // fqdn wants two labels
  EXPECT_EQ(Taken(host, R"("-a.com")"), 1u);
  EXPECT_EQ(Taken(host, R"("a-.com")"), 3u);
  EXPECT_EQ(Taken(host, R"("a..com")"), 3u);
  EXPECT_EQ(Taken(host, R"("a_b.com")"), 2u);

  auto duration = MustCompile(R"({"type": "string", "format": "duration"})");
  for (const char* ok : {R"("P1Y2M3DT4H5M6S")", R"("PT1M")", R"("P1W")", R"("P3D")",
                         R"("PT36H")", R"("P0D")", R"("P1YT1S")"}) {
    EXPECT_TRUE(Accepts(*duration, ok)) << ok;
  }
  EXPECT_EQ(Taken(duration, R"("P1Y1D")"), 5u);  // RFC 3339: no gap between Y and D
  EXPECT_EQ(Taken(duration, R"("PT")"), 3u);
  EXPECT_EQ(Taken(duration, R"("P")"), 2u);
  EXPECT_EQ(Taken(duration, R"("p1D")"), 1u);
  EXPECT_EQ(Taken(duration, R"("P1.5D")"), 3u);
  EXPECT_THAT(CompileError(R"({"type": "string", "format": "uri"})").message(),
              HasSubstr("supported: date, time, date-time, duration, email, hostname, ipv4, "
                        "ipv6, uuid (at #/format)"));
}

TEST(JsonSchemaNumberTest, FormatAutomataStaySmall) {
  for (const char* format : {"ipv4", "ipv6", "hostname", "duration"}) {
    auto s = MustCompile(absl::StrCat(R"({"type": "string", "format": ")", format, R"("})"));
    ASSERT_NE(s, nullptr);
    size_t states = 0;
    for (const auto& dfa : s->compiled().dfas) states += dfa.states();
    EXPECT_LT(states, 2000u) << format;
    std::cout << format << ": " << states << " automaton states\n";
  }
}

}  // namespace
}  // namespace mlaserve::model
