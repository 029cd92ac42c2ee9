// Jinja's builtin filters, tests and globals and the str / dict / list methods: byte-for-byte
// agreement with transformers (Jinja2 3.1) on tests/fixtures/chat_template/filters.json (made
// by tools/make_chat_template_filter_fixtures.py, strftime_now on a fixed clock), and what we
// refuse on purpose, with its message.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/chat_template/chat_template.h"

namespace mlaserve::router::chat_template {
namespace {

using ::testing::HasSubstr;

constexpr char kFixture[] = "tests/fixtures/chat_template/filters.json";

nlohmann::ordered_json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

Clock FixedClock(const nlohmann::ordered_json& c) {
  const LocalTime t{absl::CivilSecond(c["year"].get<int>(), c["month"].get<int>(), c["day"].get<int>(),
                                      c["hour"].get<int>(), c["minute"].get<int>(), c["second"].get<int>()),
                    c["microsecond"].get<int>()};
  return [t] { return t; };
}

TEST(ChatTemplateFilterFixtureTest, MatchesTransformers) {
  ASSERT_TRUE(std::filesystem::exists(kFixture)) << kFixture;
  const auto expected = ReadJson(kFixture);
  const Clock clock = FixedClock(expected["clock"]);
  int rendered = 0, refused = 0;
  for (const auto& c : expected["cases"]) {
    const std::string name = c["name"];
    nlohmann::ordered_json vars = expected["special_tokens"];
    vars["messages"] = expected["messages"];
    vars["tools"] = expected["tools"];
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = true;
    for (const auto& [k, v] : expected["data"].items()) vars[k] = v;
    for (const auto& [k, v] : c["kwargs"].items()) vars[k] = v;
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(c["template"].get<std::string>());
    if (c.contains("error")) {
      ++refused;
      if (!t.ok()) continue;  // refused when loaded: as good as at render time
      absl::StatusOr<std::string> got = t->Render(vars, clock);
      EXPECT_FALSE(got.ok()) << name << ": transformers failed (" << c["error"] << ") but we rendered " << *got;
      if (!got.ok()) EXPECT_THAT(got.status().message(), HasSubstr("chat template line ")) << name;
      continue;
    }
    ++rendered;
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    absl::StatusOr<std::string> got = t->Render(vars, clock);
    if (!got.ok()) {
      ADD_FAILURE() << name << ": " << got.status() << "\n  expected: " << c["rendered"].get<std::string>();
      continue;
    }
    EXPECT_EQ(*got, c["rendered"].get<std::string>()) << name;
  }
  EXPECT_EQ(rendered + refused, static_cast<int>(expected["cases"].size()));
  EXPECT_EQ(rendered, 80);
  EXPECT_EQ(refused, 76);
}

absl::StatusOr<std::string> Render(const std::string& source, const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(vars, [] { return LocalTime{absl::CivilSecond(2024, 7, 26, 13, 4, 5), 7}; });
}

TEST(ChatTemplateFilterTest, StrftimeNowReadsTheClockItIsGiven) {
  EXPECT_EQ(*Render("{{ strftime_now('%d %b %Y') }}"), "26 Jul 2024");
  EXPECT_EQ(*Render("{{ strftime_now('%a %H:%M:%S.%f%z%Z') }}"), "Fri 13:04:05.000007");
  // Without a clock, Render reads the system's: today's year, at least.
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse("{{ strftime_now('%Y')|int > 2000 }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->Render(nlohmann::ordered_json::object()), "True");
}

TEST(ChatTemplateFilterTest, WhatIsRefusedOnPurposeSaysWhy) {
  const auto error = [](const std::string& source) {
    absl::StatusOr<std::string> r = Render(source);
    EXPECT_FALSE(r.ok()) << source << " rendered " << *r;
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  // A generator prints as its address in Python.
  EXPECT_THAT(error("{{ [1]|map('abs') }}"), HasSubstr("printing a value of type generator is not supported"));
  EXPECT_THAT(error("{{ [[1]|map('abs')] }}"), HasSubstr("printing a value of type generator is not supported"));
  EXPECT_THAT(error("{{ [range] }}"), HasSubstr("printing a value of type function is not supported"));
  // A namespace's repr lists its attributes in the order they were first set, which we do not keep.
  EXPECT_THAT(error("{% set ns = namespace(b=1, a=2) %}{{ [ns] }}"), HasSubstr("type Namespace"));
  // Which non-ASCII characters repr() escapes (str.isprintable) is known only for letters,
  // digits and some blocks of symbols: here a line separator and an unassigned
  // code point of the Thai block (Python writes '\u2028' and '\u0e3b').
  EXPECT_THAT(error("{{ {'k': 'caf\u00e9\u2028'} }}"), HasSubstr("the repr() of a str holding U+2028 is not supported"));
  EXPECT_THAT(error("{{ '%r' % 'x\u0e3b' }}"), HasSubstr("U+0E3B"));
  // Python's identity of strings depends on interning.
  EXPECT_THAT(error("\n{{ 'a' is sameas 'a' }}"), HasSubstr("line 2: test 'sameas' on two values of type str"));
  // Python's ints are unbounded.
  EXPECT_THAT(error("{{ '99999999999999999999'|int }}"), HasSubstr("does not fit 64 bits"));
  EXPECT_THAT(error("{{ ('<b>'|safe)|truncate(1, true, '', 0) }}"), HasSubstr("Markup"));
  EXPECT_THAT(error("{{ '{:>4}'.format(1) }}"), HasSubstr("format specs"));
  // attr() of a method gives a bound method, which Python prints with an address.
  EXPECT_THAT(error("{{ {'a': 1}|attr('items') }}"), HasSubstr("attr('items') of a dict is a method, which is not supported"));
  EXPECT_THAT(error("{% for x in [1] %}{{ loop|attr('cycle') }}{% endfor %}"), HasSubstr("is a method"));
  EXPECT_THAT(error("{% for x in [1] %}{{ loop.changed is defined }}{% endfor %}"),
              HasSubstr("method 'changed' of a LoopContext without calling it"));
  EXPECT_THAT(error("{% set c = cycler(1) %}{{ c['next'] }}"), HasSubstr("method 'next' of a Cycler"));
  // HTML5's named references beyond &amp; &lt; &gt; &quot; &apos; &nbsp; are not tabled ("&copy;" is
  // "©"; "&ampx" is "&x" unless a longer name starts "ampx").
  EXPECT_THAT(error("{{ 'a &copy; b'|striptags }}"), HasSubstr("the character reference '&copy;' is not supported"));
  EXPECT_THAT(error("{{ 'x&ampx'|striptags }}"), HasSubstr("'&ampx'"));
}

TEST(ChatTemplateFilterTest, UnknownNamesAreRefusedAtLoad) {
  const auto parse_error = [](const std::string& source) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
    EXPECT_FALSE(t.ok()) << source;
    return t.ok() ? std::string() : std::string(t.status().message());
  };
  EXPECT_THAT(parse_error("{{ x|urlize }}"), HasSubstr("unsupported filter 'urlize'"));
  EXPECT_THAT(parse_error("{{ x is escapedd }}"), HasSubstr("unsupported test 'is escapedd'"));
  EXPECT_THAT(parse_error("{{ x.encode() }}"), HasSubstr("unsupported method '.encode()'"));
  EXPECT_THAT(parse_error("{{ lipsum() }}"), HasSubstr("unsupported function 'lipsum'"));
  EXPECT_THAT(parse_error("{{ x is defined is defined }}"), HasSubstr("cannot chain multiple tests"));
}

}  // namespace
}  // namespace mlaserve::router::chat_template
