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

namespace mlaserve::router::chat_template {
namespace {

// Found by a differential fuzz against Jinja2 3.1.6 in transformers' environment; each expected
// value (or failure) is what Jinja2 renders.
TEST(ChatTemplateFuzzRegressionTest, SliceOfAValueThatTakesNoSubscriptFails) {
  // Jinja compiles a slice to Python's own subscript (not environment.getitem, which would turn
  // the TypeError into an undefined value).
  const nlohmann::ordered_json vars = {{"messages", {{{"role", "user"}, {"content", nullptr}}}}};
  absl::StatusOr<std::string> r = Render("{{ messages[0].content[:5] }}", vars);
  ASSERT_FALSE(r.ok()) << *r;
  EXPECT_THAT(r.status().message(), HasSubstr("'NoneType' object is not subscriptable"));
  r = Render("{{ 3[1:] is defined }}");
  EXPECT_FALSE(r.ok()) << *r;
  r = Render("{{ {'a': 1}[1:] }}");
  ASSERT_FALSE(r.ok()) << *r;
  EXPECT_THAT(r.status().message(), HasSubstr("unhashable type: 'slice'"));
  EXPECT_EQ(*Render("{{ 'hello'[1:3] }}|{{ [1, 2, 3][::-1] }}|{{ (1, 2)[1:] }}"), "el|[3, 2, 1]|(2,)");
}

TEST(ChatTemplateFuzzRegressionTest, PercentFormattingTakesAnUndefinedOperand) {
  // str % Undefined: str() of it is '', repr() 'Undefined'; it has __getitem__, so Python takes
  // it (and a list) as the mapping: a spare argument is no error.
  EXPECT_EQ(*Render("{{ '[%s]' % missing }}|{{ '%r' % missing }}|{{ 'x' % missing }}|{{ 'x' % [1] }}"),
            "[]|Undefined|x|x");
  EXPECT_EQ(*Render("{{ '%a|%s|%5r' % (missing, missing, missing) }}"), "Undefined||Undefined");
  EXPECT_EQ(*Render("{{ '%s|%r'|format(missing, missing) }}"), "|Undefined");
  EXPECT_FALSE(Render("{{ '%d' % missing }}").ok());
  EXPECT_FALSE(Render("{{ '%(a)s' % missing }}").ok());
  EXPECT_FALSE(Render("{{ '%(a)s' % [1] }}").ok());
  EXPECT_FALSE(Render("{{ missing % 2 }}").ok());
  EXPECT_FALSE(Render("{{ 'x' % 5 }}").ok());
}

TEST(ChatTemplateFuzzRegressionTest, ForElseRunsUnlessAnIterationReachedTheEndOfTheBody) {
  // Jinja clears its else flag at the end of the body, which `break` and `continue` skip.
  const nlohmann::ordered_json vars = {{"xs", {1, 2}}};
  EXPECT_EQ(*Render("{% for x in xs %}{{ x }}{% break %}{% else %}E{% endfor %}", vars), "1E");
  EXPECT_EQ(*Render("{% for x in xs %}{{ x }}{% continue %}{% else %}E{% endfor %}", vars), "12E");
  EXPECT_EQ(*Render("{% for x in xs %}{{ x }}{% if x == 1 %}{% continue %}{% endif %}{% else %}E{% endfor %}", vars),
            "12");
  EXPECT_EQ(*Render("{% for x in xs %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% else %}E{% endfor %}", vars),
            "1");
  EXPECT_EQ(*Render("{% for x in [] %}{{ x }}{% else %}E{% endfor %}"), "E");
  EXPECT_EQ(*Render("{% for x in xs if x > 5 %}{{ x }}{% else %}E{% endfor %}", vars), "E");
}

TEST(ChatTemplateFuzzRegressionTest, AnUncalledMethodIsABoundMethodNotTheItem) {
  // Jinja's getattr finds a method of the value's type first for `x.name` (even where a dict
  // holds the key) and after a missing item for `x[key]`: a bound method, defined, true and
  // callable, whose attributes are undefined. Hermes-style tool templates pass a schema's
  // `json_spec.items` on as if it were the "items" entry; Jinja renders List[Any] there.
  const nlohmann::ordered_json vars = {{"s", "a"}, {"d", {{"k", 1}}}};
  EXPECT_EQ(*Render("{{ s.upper is defined }}|{{ d.items is defined }}|{{ ['a']|selectattr('upper')|list }}|"
                    "{{ s.upper is callable }}|{{ s.upper is iterable }}|{{ s.upper.x is defined }}|"
                    "{{ 'y' if d.keys else 'n' }}",
                    vars),
            "True|True|['a']|True|False|False|y");
  const char* hermes =
      "{% macro t(s) %}{% if s.type == 'array' %}List[{{ t(s.items) }}]{% elif s.type == 'string' %}str"
      "{% else %}Any{% endif %}{% endmacro %}{{ t({'type': 'array', 'items': {'type': 'string'}}) }}|"
      "{{ t({'type': 'string'}) }}";
  EXPECT_EQ(*Render(hermes), "List[Any]|str");
  // Printed, Python shows an address; called through a variable, it would run: both refused.
  EXPECT_FALSE(Render("{{ s['strip'] }}", vars).ok());
  EXPECT_FALSE(Render("{{ {'items': 1}.items }}").ok());
  EXPECT_FALSE(Render("{% set f = s.upper %}{{ f() }}", vars).ok());
  // What the sandbox hides, what a dict holds under a subscript, and a number's data stay.
  EXPECT_EQ(*Render("{{ [].append is defined }}|{{ {'items': 1}['items'] }}|{{ (3).real }}|{{ d.get('k') }}", vars),
            "False|1|3|1");
}

TEST(ChatTemplateFuzzRegressionTest, NumbersFollowPythonsFloatAndIntRules) {
  // float // and % as CPython's float_divmod (1 // 0.1 is 9.0; a zero remainder takes the
  // divisor's sign), float ** errors, and ints past 64 bits refused instead of wrapped.
  EXPECT_EQ(*Render("{{ -2.5 % 2.5 }}|{{ 2.5 % -2.5 }}|{{ 1 // 0.1 }}|{{ -1 // 0.1 }}|{{ -7.5 // 2 }}|{{ -0.0 // 3 }}"),
            "0.0|-0.0|9.0|-10.0|-4.0|-0.0");
  EXPECT_EQ(*Render("{{ 2 ** 62 }}|{{ (-1) ** 5 }}|{{ 0 ** 0 }}|{{ 2 ** -1 }}|{{ (-2) ** 63 }}"),
            "4611686018427387904|-1|1|0.5|-9223372036854775808");
  EXPECT_FALSE(Render("{{ 0.0 ** -1 }}").ok());
  EXPECT_FALSE(Render("{{ 3 ** 1000.0 }}").ok());
  EXPECT_THAT(Render("{{ 2 ** 64 }}").status().message(), HasSubstr("integers beyond 64 bits"));
  EXPECT_THAT(Render("{{ 9223372036854775807 + 1 }}").status().message(), HasSubstr("integers beyond 64 bits"));
  EXPECT_FALSE(Render("{{ (-8) ** 0.5 }}").ok());
}

}  // namespace
}  // namespace mlaserve::router::chat_template
