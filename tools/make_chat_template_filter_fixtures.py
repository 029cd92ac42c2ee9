#!/usr/bin/env python3
"""Expected renderings of Jinja's builtin filters, tests, globals and the str / dict / list
methods in chat templates, from transformers (Jinja2) itself.

Each case is a small template of ours (no third-party template text) exercising one filter,
test, global or method, its arguments and its error cases, plus a few idioms of real
checkpoints' templates (Llama 3.x's strftime_now date line, Mistral's selectattr / loop
filter / tool-call-id checks, Qwen3's reversed scan with a namespace, Kimi-K2's compact
tojson, GLM's tojson(ensure_ascii=False), gpt-oss's join of an enum). This script renders
each with transformers' apply_chat_template(tokenize=False), exactly as
tools/make_chat_template_fixtures.py does (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, transformers' tojson, raise_exception, strftime_now), with
datetime.now() fixed to CLOCK so strftime_now is reproducible, and writes
tests/fixtures/chat_template/filters.json: per case the template, the extra variables and
the rendered text, or the error transformers raised (ours must refuse too).
router/chat_template/chat_template_filter_test.cc checks our interpreter byte for byte.

Usage (any machine with PyPI; no torch needed):
  python3 -m venv /tmp/ct && /tmp/ct/bin/pip install transformers==5.17.0 tokenizers==0.23.3 jinja2==3.1.6
  /tmp/ct/bin/python tools/make_chat_template_filter_fixtures.py
"""
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_chat_template_fixtures import render, tokenizer_for  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                   "chat_template", "filters.json")
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
CLOCK = datetime.datetime(2026, 3, 7, 9, 5, 3, 123456)  # a Saturday

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "abcDEF123", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
    {"role": "tool", "tool_call_id": "abcDEF123", "content": "sunny, 21"},
    {"role": "assistant", "content": "<think>\ncheck\n</think>\n\nSunny, 21 °C."},
    {"role": "user", "content": "  Ünïcödé ΣΑΣ straße ǆ  "},
]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "Get_Time", "description": "Local time.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
]
DATA = {
    "nums": [3, 1, 2, 10, -4], "floats": [2.5, 0.1, -1.25], "words": ["b", "A", "c", "a", "B"],
    "people": [{"name": "bo", "age": 30, "tags": ["x"]}, {"name": "Al", "age": 25},
               {"name": "cy", "age": 30, "tags": []}],
    "nested": {"z": 1, "a": {"y": [1, 2], "b": None}, "é": "ü"},
    "text": "Hello, World! 123 foo_bar",
    "empty": [], "blank": "", "zero": 0, "nothing": None, "flag": True,
}

# (name, template, extra variables); DATA is always passed too.
CASES = []


def add(name, template, **kwargs):
    CASES.append((name, template, kwargs))


# ---- string filters ----
add("upper-lower", "{{ 'Hello ß ǆ ΣΑΣ'|upper }}|{{ 'HeLLo İ ΣΑΣ ΑΣ.'|lower }}|{{ missing|upper }}|{{ none|lower }}|{{ 42|upper }}")
add("title-capitalize", "{{ 'hello wORLD-foo(bar) [x]<y>{z} ǆa'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'ǆemal'|capitalize }}|{{ ''|title }}|{{ text|title }}")
add("trim", "[{{ '  pad \\t\\n'|trim }}][{{ 'xxpadyx'|trim('xy') }}][{{ '\u3000wide\u2003'|trim }}][{{ missing|trim }}][{{ 5|trim }}]")
add("trim-bad-chars", "{{ 'x'|trim(1) }}")
add("replace", "{{ 'aaaa'|replace('a', 'b') }}|{{ 'aaaa'|replace('a', 'b', 2) }}|{{ 'abc'|replace('', '-') }}|{{ 12321|replace(2, 9) }}|{{ 'aXa'|replace('a', 'é', count=1) }}")
add("replace-bad-count", "{{ 'aaaa'|replace('a', 'b', 'x') }}")
add("center", "[{{ 'ab'|center(7) }}][{{ 'abc'|center(6) }}][{{ 'abc'|center(2) }}][{{ 'é'|center(4) }}]")
add("wordcount", "{{ text|wordcount }}|{{ 'héllo wörld_x 9 -- a'|wordcount }}|{{ ''|wordcount }}|{{ missing|wordcount }}")
add("truncate", "{{ 'foo bar baz qux'|truncate(9) }}|{{ 'foo bar baz qux'|truncate(9, True) }}|{{ 'foo bar baz qux'|truncate(11) }}|{{ 'foo bar baz qux'|truncate(11, False, '...', 0) }}|{{ 'foo bar baz qux'|truncate(10, end='!', leeway=0) }}|{{ missing|truncate }}")
add("truncate-bad-length", "{{ 'foo bar baz qux'|truncate(2) }}")
add("indent", "[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb\\n\\nc'|indent(2, true) }}][{{ 'a\\nb\\n\\nc'|indent(2, blank=true) }}][{{ 'a\\r\\nb\\u2028c'|indent('> ') }}][{{ 'one'|indent(first=true) }}][{{ ''|indent(first=true) }}]")
add("indent-undefined", "{{ missing|indent }}")
add("format-filter", "{{ '%s, %s!'|format('Hello', 'World') }}|{{ '%d|%5.2f|%-4s|%x|%o|%e|%g|%c|%%|%r'|format(42, 3.14159, 'ab', 255, 8, 12345.678, 0.00001, 65, 'q') }}|{{ '%(a)s-%(b)03d'|format(a='x', b=7) }}|{{ '%+d %05d % d'|format(5, -42, 3) }}|{{ 'plain'|format() }}|{{ '%.3s|%5s|%-5s|'|format('abcdef', 'é', 'é') }}|{{ '%X %#x %#o'|format(-255, 255, 8) }}")
add("format-too-few", "{{ '%s %s'|format('a') }}")
add("format-too-many", "{{ '%s'|format('a', 'b') }}")
add("format-bad-type", "{{ '%d'|format('a') }}")
add("format-mixed", "{{ '%s'|format('a', b=1) }}")
add("percent-operator", "{{ '%s=%d' % ('n', 3) }}|{{ '%s!' % 'hi' }}|{{ '%.1f%%' % 99.44 }}")
add("string-filter", "{{ 42|string }}|{{ 1.5|string }}|{{ none|string }}|{{ true|string }}|{{ missing|string }}|{{ 'x'|string }}")
add("escape-safe", "{{ '<a href=\"x\">&\\'</a>'|e }}|{{ '<b>'|escape }}|{{ '<b>'|safe }}|{{ ('<b>'|safe) + '<i>' }}|{{ '<i>' + ('<b>'|safe) }}|{{ ('<b>'|e)|e }}|{{ '<b>'|forceescape|forceescape }}|{{ ('x'|safe) is escaped }}|{{ 'x' is escaped }}|{{ ('<b>'|safe) ~ '<i>' }}|{{ ('<b>'|safe)|upper + '&' }}|{{ (('<b>'|safe)|length) }}")
add("reverse-string", "{{ 'héllo'|reverse }}|{{ [1, 2, 3]|reverse|list|tojson }}|{{ {'a': 1, 'b': 2}|reverse|list|tojson }}|{{ missing|reverse|list|tojson }}")
add("length-count", "{{ 'héllo'|length }} {{ nums|count }} {{ nested|length }} {{ missing|length }} {{ (1, 2)|length }} {{ nested.items()|length }}")
add("length-of-generator", "{{ nums|map('abs')|length }}")
add("length-of-int", "{{ 5|length }}")

# ---- numbers ----
add("int", "{{ '42'|int }} {{ ' -7 '|int }} {{ '42.9'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ '0x1A'|int }} {{ '0x1A'|int(0, 16) }} {{ '1A'|int(base=16) }} {{ '0b101'|int(0, 0) }} {{ '1_000'|int }} {{ '١٢٣'|int }} {{ 3.99|int }} {{ -3.99|int }} {{ true|int }} {{ none|int }} {{ none|int(-1) }} {{ '1e3'|int }} {{ 'nan'|int(9) }} {{ 'inf'|int(8) }} {{ ''|int }} {{ '010'|int }} {{ '010'|int(0, 0) }} {{ '_1'|int }}")
add("int-undefined", "{{ missing|int }}")
add("float", "{{ '3.5'|float }} {{ ' 1e3 '|float }} {{ 'x'|float }} {{ 'x'|float(2.5) }} {{ 3|float }} {{ true|float }} {{ none|float }} {{ '1_0.5'|float }} {{ '-inf'|float }} {{ 'NaN'|float }} {{ '.5'|float }} {{ '5.'|float }} {{ '1e400'|float }} {{ '١.٥'|float }}")
add("abs-round", "{{ -3|abs }} {{ -2.5|abs }} {{ true|abs }} {{ 42.55|round }} {{ 42.55|round(1, 'floor') }} {{ 42.55|round(1, 'ceil') }} {{ 2.5|round }} {{ 3.5|round }} {{ 0.125|round(2) }} {{ 2.675|round(2) }} {{ 42|round }} {{ 42|round(1, 'floor') }} {{ 1234.5|round(-2) }} {{ 1250|round(-2) }} {{ 1350|round(-2) }} {{ -0.5|round }} {{ 42.55|round|int }}")
add("round-bad-method", "{{ 1.5|round(0, 'up') }}")
add("abs-string", "{{ 'x'|abs }}")
add("sum-min-max", "{{ nums|sum }} {{ floats|sum }} {{ people|sum(attribute='age') }} {{ nums|sum(start=100) }} {{ [[1], [2]]|sum(start=[])|tojson }} {{ nums|min }} {{ nums|max }} {{ words|min }} {{ words|max }} {{ words|min(case_sensitive=true) }} {{ people|max(attribute='age')|tojson }} {{ people|min(attribute='name')|tojson }} {{ empty|max is undefined }} {{ 'bca'|max }}")
add("sum-strings", "{{ words|sum(start='') }}")
add("min-mixed", "{{ [1, 'a']|min }}")

# ---- sequences ----
add("first-last", "{{ nums|first }} {{ nums|last }} {{ 'abc'|first }}{{ 'abc'|last }} {{ nested|first }} {{ empty|first is undefined }} {{ empty|last is undefined }} {{ missing|first is undefined }} {{ nums|select('odd')|first }}")
add("last-of-generator", "{{ nums|select('odd')|last }}")
add("list", "{{ 'abc'|list|tojson }} {{ nested|list|tojson }} {{ missing|list|tojson }} {{ (1, 2)|list|tojson }} {{ nums|select('even')|list|tojson }}")
add("list-of-int", "{{ 3|list }}")
add("join", "{{ words|join }}|{{ words|join(', ') }}|{{ nums|join('-') }}|{{ people|join(', ', attribute='name') }}|{{ people|join(attribute='age') }}|{{ 'abc'|join('.') }}|{{ nested|join(',') }}|{{ [none, true, 1.0]|join(' ') }}|{{ people|map(attribute='name')|join('/') }}")
add("unique", "{{ words|unique|list|tojson }} {{ words|unique(case_sensitive=true)|list|tojson }} {{ [1, 1.0, true, 2]|unique|list|tojson }} {{ people|unique(attribute='age')|map(attribute='name')|join(',') }} {{ 'hello'|unique|join }}")
add("unique-unhashable", "{{ [[1], [1]]|unique|list|tojson }}")
add("sort", "{{ nums|sort|tojson }} {{ nums|sort(reverse=true)|tojson }} {{ words|sort|tojson }} {{ words|sort(case_sensitive=true)|tojson }} {{ people|sort(attribute='age')|map(attribute='name')|join(',') }} {{ people|sort(attribute='age', reverse=true)|map(attribute='name')|join(',') }} {{ people|sort(attribute='age,name')|map(attribute='name')|join(',') }} {{ [[2, 'b'], [1, 'z'], [2, 'a']]|sort|tojson }} {{ 'cab'|sort|join }} {{ nested|sort|tojson }}")
add("sort-mixed", "{{ [1, 'a', 2]|sort }}")
add("sort-missing-attribute", "{{ people|sort(attribute='tags.0')|tojson }}")
add("dictsort", "{{ nested|dictsort|map('first')|join(',') }} {{ {'b': 1, 'A': 2, 'a': 3}|dictsort|tojson }} {{ {'b': 1, 'A': 2, 'a': 3}|dictsort(true)|tojson }} {{ {'x': 2, 'y': 1}|dictsort(by='value')|tojson }} {{ {'x': 2, 'y': 1}|dictsort(reverse=true)|tojson }}")
add("dictsort-bad-by", "{{ {'a': 1}|dictsort(by='k') }}")
add("items", "{% for k, v in nested|items %}{{ k }}={{ v is mapping }};{% endfor %}{{ missing|items|list|tojson }}{{ nested|items|list|length }}")
add("items-of-list", "{{ nums|items|list }}")
add("batch-slice", "{{ nums|batch(2)|list|tojson }} {{ nums|batch(2, 0)|list|tojson }} {{ nums|slice(2)|list|tojson }} {{ nums|slice(3, 'x')|list|tojson }} {{ empty|batch(3)|list|tojson }} {{ [1, 2, 3, 4]|slice(4, 0)|list|tojson }}")
add("default", "{{ missing|default('d') }}|{{ missing|d }}|{{ ''|default('e', true) }}|{{ ''|default('e') }}|{{ none|default('n') }}|{{ none|default('n', boolean=true) }}|{{ 0|d(5, true) }}|{{ nested.q|default(nested.z) }}")

# ---- map / select / reject ----
add("map", "{{ words|map('upper')|join }}|{{ people|map(attribute='name')|join(',') }}|{{ people|map(attribute='tags.0', default='-')|join(',') }}|{{ people|map(attribute='tags')|map('length')|join }}|{{ nums|map('string')|map('length')|sum }}|{{ ['a,b', 'c']|map('replace', ',', ';')|join('|') }}|{{ words|map('default', 'z')|join }}|{{ [nested]|map(attribute='a.y.1')|first }}|{{ empty|map('nosuchfilter')|list|tojson }}")
add("map-unknown-filter", "{{ words|map('nosuchfilter')|list }}")
add("map-no-argument", "{{ words|map|list }}")
add("map-unexpected-keyword", "{{ people|map(attribute='name', x=1)|list }}")
add("map-through-undefined", "{{ people|map(attribute='tags.0')|list|length }}")
add("map-through-undefined-deeper", "{{ [{'a': 1}]|map(attribute='b.c')|list }}")
add("select-reject", "{{ nums|select('odd')|join(',') }}|{{ nums|reject('odd')|join(',') }}|{{ nums|select|join(',') }}|{{ [0, 1, '', 'a', none]|select|list|length }}|{{ nums|select('gt', 2)|join(',') }}|{{ nums|select('>', 2)|join(',') }}|{{ nums|reject('lessthan', 2)|join(',') }}|{{ nums|select('divisibleby', 2)|join(',') }}|{{ words|select('in', ['a', 'b'])|join }}|{{ words|select('upper')|join }}|{{ words|reject('equalto', 'a')|join }}|{{ [1, 'x', none, 2.5]|select('number')|list|length }}|{{ empty|select('nosuchtest')|list|length }}")
add("select-unknown-test", "{{ nums|select('nosuchtest')|list }}")
add("selectattr-rejectattr", "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}|{{ messages|rejectattr('role', 'eq', 'tool')|map(attribute='role')|join(',') }}|{{ people|selectattr('tags')|map(attribute='name')|join }}|{{ people|selectattr('tags', 'defined')|map(attribute='name')|join }}|{{ people|rejectattr('tags', 'defined')|map(attribute='name')|join }}|{{ messages|selectattr('tool_calls', 'undefined')|list|length }}|{{ people|selectattr('age', 'ge', 30)|map(attribute='name')|join }}|{{ messages|selectattr('content', 'none')|list|length }}")
add("selectattr-missing-name", "{{ people|selectattr|list }}")
add("generator-once", "{% set g = nums|select('odd') %}{{ g|list|length }},{{ g|list|length }}{% set h = nums|map('abs') %}{% for x in h %}{{ x }}{% endfor %}/{% for x in h %}{{ x }}{% else %}empty{% endfor %}")
add("generator-truthy", "{% if empty|select %}T{% else %}F{% endif %}{% if empty|select|list %}T{% else %}F{% endif %}{{ (nums|select('odd')) is iterable }}{{ (nums|select('odd')) is sequence }}{{ 3 in nums|map('abs') }}")
add("generator-error-late", "{{ [1, 'a']|map('abs')|first }}")
add("generator-error-consumed", "{{ [1, 'a']|map('abs')|list }}")
add("generator-tojson", "{{ nums|select|tojson }}")
add("generator-loop", "{% for x in nums|select('odd') %}{{ loop.index }}/{{ loop.length }}:{{ x }}{% if loop.last %}!{% endif %} {% endfor %}")

# ---- tojson ----
add("tojson", "{{ nested|tojson }}|{{ nested|tojson(indent=2) }}|{{ nested|tojson(ensure_ascii=true) }}|{{ nested|tojson(separators=(',', ':')) }}|{{ nested|tojson(sort_keys=true) }}|{{ nested|tojson(indent='\\t') }}|{{ [1]|tojson(indent=0) }}|{{ '😀\\u007f'|tojson(true) }}|{{ (1, 'a')|tojson }}|{{ nested|tojson(4) }}|{{ 1e16|tojson }}|{{ nested|tojson(indent=2, separators=(', ', ' = ')) }}")
add("tojson-undefined", "{{ missing|tojson }}")
add("tojson-items-view", "{{ nested.items()|tojson }}")

# ---- tests ----
add("tests-types", "{% for v in [1, 1.0, true, none, 'a', [1], {'a': 1}, (1,)] %}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is boolean }}{{ v is none }}{{ v is string }}{{ v is mapping }}{{ v is sequence }}{{ v is iterable }}{{ v is callable }}|{% endfor %}{{ missing is defined }}{{ missing is undefined }}{{ missing is sequence }}{{ missing is iterable }}{{ missing is callable }}{{ range is callable }}{{ strftime_now is defined }}{{ raise_exception is defined }}{{ namespace is callable }}{{ nested.items() is sequence }}{{ nested.items() is iterable }}")
add("tests-bool", "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ none is none }}{{ true is boolean }}{{ 1 is boolean }}")
add("tests-numbers", "{{ 3 is odd }}{{ 3 is even }}{{ 4 is even }}{{ 3.0 is odd }}{{ -3 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 9 is divisibleby(num=3) }}{{ 2.5 is divisibleby 0.5 }}")
add("tests-odd-string", "{{ 'a' is odd }}")
add("tests-case", "{{ 'abc' is lower }}{{ 'aBc' is lower }}{{ 'ABC' is upper }}{{ '123' is upper }}{{ 'ǅ' is upper }}{{ 'ß' is lower }}{{ 'Σ1' is upper }}{{ 42 is lower }}{{ missing is lower }}")
add("tests-compare", "{{ 1 is eq 1.0 }}{{ 1 is equalto 2 }}{{ 'a' is ne 'b' }}{{ 2 is lt 3 }}{{ 2 is lessthan 2 }}{{ 3 is gt 2 }}{{ 3 is greaterthan 3 }}{{ 2 is le 2 }}{{ 2 is ge 3 }}{{ 'a' is in 'cat' }}{{ 2 is in nums }}{{ 'role' is in messages[0] }}{{ 1 is not in nums }}{{ [1] is eq [1] }}{{ (1,) is eq [1] }}")
add("tests-compare-types", "{{ 'a' is lt 1 }}")
add("tests-sameas", "{{ none is sameas none }}{{ true is sameas true }}{{ 1 is sameas true }}{{ 5 is sameas 5 }}{{ messages[0] is sameas messages[0] }}{{ messages[0] is sameas messages[1] }}{{ flag is sameas true }}{{ nothing is sameas none }}")
add("tests-filter-test", "{{ 'upper' is filter }}{{ 'urlize' is filter }}{{ 'nosuch' is filter }}{{ 'odd' is test }}{{ 'sameas' is test }}{{ 'nosuch' is test }}{{ 'upper' is test }}")
add("tests-in-if", "{% if messages[0].content is string and messages[0].role is in ['system', 'developer'] %}S{% endif %}{% if messages[2].content is not string and messages[2].tool_calls is defined %}T{% endif %}")
add("tests-unknown-arg-count", "{{ 3 is odd(1) }}")

# ---- globals ----
add("range-dict-namespace", "{{ range(3)|list|tojson }}{{ range(1, 10, 3)|list|tojson }}{{ range(5, 0, -2)|join }}{{ dict(a=1, b='x')|tojson }}{{ dict({'a': 1}, b=2)|tojson }}{{ dict([('k', 'v')])|tojson }}{% set ns = namespace(n=0, items=[]) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}{% set ns2 = namespace({'a': 1}, b=2) %}{{ ns2.a }}{{ ns2.b }}{{ ns2.c is defined }}")
add("range-too-big", "{{ range(200000)|length }}")
add("range-step-zero", "{{ range(1, 2, 0)|list }}")
add("cycler-joiner", "{% set c = cycler('odd', 'even') %}{% for m in messages %}{{ c.next() }},{% endfor %}{{ c.current }}{% set r = c.reset() %}{{ c.current }}|{% set comma = joiner(', ') %}{% for w in words %}{{ comma() }}{{ w }}{% endfor %}|{% set j = joiner() %}{{ j() }}{{ j() }}{{ j() }}")
add("raise-exception", "{{ raise_exception('bad ' ~ messages|length) }}")
add("strftime-now", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('%A %B %j %U %W %w %H:%M:%S %I %p %y %e|%f|%z|%Z|%%|%') }}|{{ strftime_now('') }}")
add("strftime-now-not-string", "{{ strftime_now(5) }}")
add("globals-shadowed", "{{ range }}", range="mine")

# ---- methods ----
add("str-split", "{{ 'a,b,,c'.split(',')|tojson }}{{ '  a  b  '.split()|tojson }}{{ 'a b c'.split(none, 1)|tojson }}{{ 'a b  c  '.split(maxsplit=1)|tojson }}{{ 'a,b,c'.rsplit(',', 1)|tojson }}{{ '  a  b  '.rsplit(None, 1)|tojson }}{{ 'x'.split('x')|tojson }}{{ ''.split()|tojson }}{{ ''.split(',')|tojson }}{{ 'a\\nb\\r\\nc\\n'.splitlines()|tojson }}{{ 'a\\nb'.splitlines(true)|tojson }}")
add("str-split-empty-sep", "{{ 'abc'.split('') }}")
add("str-strip", "[{{ '  x  '.strip() }}][{{ '  x  '.lstrip() }}][{{ '  x  '.rstrip() }}][{{ 'xxaxx'.strip('x') }}][{{ '\\n\\nx\\n'.lstrip('\\n') }}][{{ 'abcxcba'.rstrip('abc') }}][{{ '  x'.strip(none) }}]")
add("str-strip-keyword", "{{ 'x'.strip(chars='x') }}")
add("str-startswith", "{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}{{ 'hello'.startswith(('x', 'h')) }}{{ 'hello'.endswith(('x', 'y')) }}{{ 'hello'.startswith('l', 2) }}{{ 'hello'.startswith('ll', 2, 3) }}{{ 'héllo'.endswith('é', 0, 2) }}{{ 'a'.startswith('', 5) }}")
add("str-startswith-list", "{{ 'hello'.startswith(['h']) }}")
add("str-case-methods", "{{ 'hello wORLD'.upper() }}|{{ 'HeLLo'.lower() }}|{{ \"they're bill's friends\".title() }}|{{ 'hello World'.capitalize() }}|{{ 'Hello'.swapcase() }}|{{ 'ǆ x'.title() }}|{{ 'ΣΑΣ ΑΣ'.lower() }}|{{ 'ﬁ'.upper() }}")
add("str-find-count", "{{ 'héllo'.find('l') }} {{ 'héllo'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.find('l', 3) }} {{ 'hello'.find('', 5) }} {{ 'hello'.find('', 6) }} {{ 'hello'.index('e') }} {{ 'banana'.count('a') }} {{ 'banana'.count('an', 2) }} {{ 'abc'.count('') }} {{ 'hello'.rfind('l', 0, -2) }}")
add("str-index-missing", "{{ 'hello'.index('z') }}")
add("str-misc-methods", "{{ '-'.join(['a', 'b']) }}|{{ ', '.join(words) }}|{{ '123'.isdigit() }}{{ '12a'.isdigit() }}{{ ''.isdigit() }}{{ 'a1'.isalnum() }}{{ ' \\t'.isspace() }}{{ 'abc'.islower() }}{{ 'ABC'.isupper() }}|{{ 'prefix-x'.removeprefix('prefix-') }}|{{ 'x.py'.removesuffix('.py') }}|{{ 'a=b=c'.partition('=')|tojson }}|{{ 'a=b=c'.rpartition('=')|tojson }}|{{ 'abc'.partition('z')|tojson }}|{{ 'ab'.center(6, '*') }}|{{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }}|{{ '-42'.zfill(6) }}|{{ '42'.zfill(1) }}")
add("str-join-non-string", "{{ '-'.join([1, 2]) }}")
add("str-replace-method", "{{ 'aaa'.replace('a', 'b') }}{{ 'aaa'.replace('a', 'b', 1) }}{{ 'abc'.replace('', '.') }}")
add("str-format-method", "{{ '{} and {}'.format('a', 'b') }}|{{ '{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='n') }}|{{ '{{x}} {0[role]} {0.role}'.format(messages[0]) }}|{{ '{!r}'.format('q') }}")
add("dict-methods", "{{ nested.get('z') }}{{ nested.get('q') }}{{ nested.get('q', 'dflt') }}{{ nested.keys()|list|tojson }}{{ nested.values()|list|length }}{% for k, v in nested.items() %}{{ k }};{% endfor %}{{ 'z' in nested.keys() }}{{ nested.keys()|first }}{{ nested.items()|list|first|tojson }}")
add("list-methods", "{{ nums.index(2) }}{{ nums.count(3) }}{{ [1, 2, 1].count(1) }}{{ (1, 2).index(2) }}{{ nums.index(10, 1, 4) }}")
add("list-index-missing", "{{ nums.index(99) }}")
add("list-append-refused", "{% set x = [] %}{{ x.append(1) }}")
add("dict-update-refused", "{{ nested.update({'a': 1}) }}")

# ---- tuples, loop filters, operators ----
add("tuples", "{{ (1, 2) == (1, 2) }}{{ (1, 2) == [1, 2] }}{{ (1,)|length }}{{ ()|length }}{% set t = 1, 'a' %}{{ t|tojson }}{{ t[1] }}{{ 'a' in ('a', 'b') }}{{ ((1, 2) + (3,))|tojson }}{{ (1, 2)[1:]|tojson }}")
add("tuple-plus-list", "{{ (1, 2) + [3] }}")
add("loop-filter", "{% for m in messages if m.role != 'tool' %}{{ loop.index }}/{{ loop.length }}={{ m.role }}{% if loop.last %}.{% endif %} {% endfor %}|{% for k, v in tools[0].function.items() if k != 'parameters' %}{{ k }}{{ ',' if not loop.last }}{% endfor %}|{% for x in nums if x > 100 %}{{ x }}{% else %}none{% endfor %}")
add("compare-sequences", "{{ [1, 2] < [1, 3] }}{{ [1, 2] < [1, 2, 0] }}{{ (2, 'a') > (1, 'z') }}{{ 'abc' < 'abd' }}{{ [1] <= [1] }}")

add("markup-methods", "{{ ('<b>'|safe).replace('b', '<i>') }}|{{ ('<b>'|safe).split('b')[0] + '<' }}|{{ ('x'|safe) * 2 + '<' }}|{{ '-'.join(['<a>'|safe, '<b>']) }}|{{ ('<a>'|safe).join(['<', '>']) }}|{{ ('<b>'|safe).upper() + '&' }}|{{ ('<b>'|safe)[1:] + '>' }}|{{ (('<b>'|safe)|trim) + '<' }}|{{ ('ab'|safe).center(4, '*') }}|{{ ('<b>'|safe|string) + '<' }}|{{ ('<b>'|safe|replace('b', 'i')) + '<' }}")
add("markup-center-escaped-fill", "{{ ('ab'|safe).center(4, '&') }}")
add("iterator-partial", "{% set g = nums|select('odd') %}{{ g|first }}{{ g|list|tojson }}{% set h = nums|map('string') %}{{ '1' in h }}{{ h|list|tojson }}{{ range(3)|reverse|list|tojson }}{% set r = nums|reverse %}{{ r|list|length }}{{ r|list|length }}")
add("misc-values", "{{ {'a': 1} == {'a': 1} }}{{ {'a': 1} == {'a': 1.0, 'b': 2} }}{{ messages|map(attribute='content')|select('string')|map('length')|list|tojson }}{{ nested.keys() == nested.keys() }}{{ strftime_now('%c|%x|%X|%D|%G-W%V-%u') }}")

# ---- groupby (sorted, then grouped; _GroupTuple) and attr (attributes, never items) ----
add("groupby", "{{ people|groupby('age') }}|{% for age, ps in people|groupby('age') %}{{ age }}:{{ ps|map(attribute='name')|join(',') }};{% endfor %}|{% for g in people|groupby('tags.0', default='none') %}{{ g.grouper }}={{ g.list|length }}{{ g[0] }}{{ g['grouper'] }};{% endfor %}|{{ words|groupby(0) }}|{% for g in words|groupby(0, case_sensitive=true) %}{{ g.grouper }}{{ g.list|length }}{% endfor %}|{{ (people|groupby('age'))[0] == (25, [people[1]]) }}{{ people|groupby('age')|tojson }}{{ people|groupby('age')|length }}{{ (people|groupby('age'))[0]|length }}|{{ [[1], [1.0], [true], [2]]|groupby(0) }}|{{ [{'k': 'B'}, {'k': 'a'}, {'k': 'b'}, {'k': 'A'}]|groupby('k') }}|{{ (people|groupby('age'))[0].foo is defined }}{{ (people|groupby('age'))[0][1:] }}|{{ 'abca'|groupby(0)|map('first')|join }}|{{ empty|groupby('x') }}{{ [5]|groupby('x')|length }}|{{ people|groupby(attribute='age', default=0)|map(attribute='grouper')|list }}")
add("groupby-undefined-keys", "{{ [1, 'a']|groupby(0) }}")
add("groupby-no-attribute", "{{ people|groupby }}")
add("groupby-through-undefined", "{{ people|groupby('tags.0') }}")
add("groupby-mixed-keys", "{{ [{'k': 1}, {'k': 'a'}]|groupby('k') }}")
add("groupby-not-iterable", "{{ 5|groupby('a') }}")
add("attr", "{{ nested|attr('z') }}|{{ nested|attr('z') is defined }}|{{ 5|attr('real') }}{{ true|attr('imag') }}{{ 2.5|attr('imag') }}{{ -7|attr('numerator') }}{{ 7|attr('denominator') }}{{ 1.5|attr('real') }}|{% set ns = namespace(a=1) %}{{ ns|attr('a') }}{{ ns|attr('b') is defined }}|{% set c = cycler(1, 2) %}{{ c|attr('current') }}{{ c|attr('items') }}{{ c.pos }}{{ c['items'] }}|{% for x in nums %}{{ loop|attr('index') }}{{ loop|attr('nope') is defined }}{% endfor %}|{{ 'x'|attr('nope') is defined }}|{{ nested|attr('__class__') }}{{ nested|attr('__class__') is defined }}{{ nested|attr('update') is defined }}{{ nums|attr('append') is defined }}|{% set j = joiner('/') %}{{ j|attr('sep') }}{{ j.used }}{{ j() }}{{ j['used'] }}|{{ (people|groupby('age'))[0]|attr('grouper') }}|{{ none|attr('x') is defined }}{{ messages[0]|attr('role') is defined }}")
add("attr-undefined", "{{ missing|attr('x') }}")
add("attr-no-name", "{{ nested|attr() }}")
add("attr-not-a-string", "{{ nested|attr(1) }}")

# ---- striptags (markupsafe, html.unescape) and urlencode ----
add("striptags", "{{ '  <p class=\"x\">Hello <b>World</b></p>\n\t<!-- <c> --> x &amp; y &lt;3 &#65;&#x42;&#X43 &#0; &#128; &#xD800; &#99999999999; &#1; &#13;| AT&T a & b Q&A; &#; &#x; 1&2a &nbsp;!&quot;&apos;&GT&AMP;&lt\u3000z'|striptags }}|{{ missing|striptags }}|{{ none|striptags }}|{{ [1, '<a>']|striptags }}|{{ ('<b>x</b> &amp;'|safe)|striptags }}|{{ '<a <b>c> d' |striptags }}|{{ 'x <!-- y' | striptags }}|{{ 'a < b > c <' | striptags }}|{{ '<!-- a --> <!-- b' | striptags }}|{{ 'é&é;&T;&1'|striptags }}|{{ ('a<b>'|striptags) is escaped }}")
add("striptags-argument", "{{ 'x'|striptags(1) }}")
add("urlencode", "{{ 'a b/c?d=é&e~f_g.h-i+j%\x01'|urlencode }}|{{ {'a b': 'c/d', 'e': 1, 'f': none, 'é': [1]}|urlencode }}|{{ [('k', 'v w'), ['x', 'y']]|urlencode }}|{{ 42|urlencode }}|{{ missing|urlencode }}|{{ nested.a.items()|urlencode }}|{{ ['ab']|urlencode }}|{{ ('<x>'|safe)|urlencode }}|{{ none|urlencode }}|{{ [1, 2, 3, 4]|batch(2)|urlencode }}|{{ nested.a|items|urlencode }}")
add("urlencode-unpack-short", "{{ [1, 2, 3]|batch(2)|urlencode }}")
add("urlencode-unpack-long", "{{ ['abc']|urlencode }}")
add("urlencode-unpack-int", "{{ [1]|urlencode }}")
add("urlencode-argument", "{{ 'x'|urlencode(1) }}")

# ---- wordwrap (textwrap.wrap per line): fixed texts, then random ones over the characters
# textwrap's word splitting treats specially (hyphens, em-dashes, digits, punctuation) ----
def wordwrap_texts():
    import random
    rng = random.Random(20260307)
    alphabet = ["a", "b", "Z", "é", "ß", "1", "9", "-", "-", "--", ".", ",", "!", "?", "'", '"', "&", "_",
                " ", " ", " ", "  ", "\t", "(", "٣", "\u3000", "x-y", "well-known", "re-re-run"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(120)]


add("wordwrap", "{{ 'The quick brown fox jumps over the lazy dog, twice.'|wordwrap(10) }}|{{ 'a well-known self-evident well-to-do thing'|wordwrap(8) }}|{{ 'one--two three---four x--y'|wordwrap(6) }}|{{ 'supercalifragilisticexpialidocious word'|wordwrap(10) }}|{{ 'supercalifragilisticexpialidocious word'|wordwrap(10, false) }}|{{ 'hyphen-ated-words-here'|wordwrap(7, break_on_hyphens=false) }}|{{ 'line one\n\nline  two is longer\r\nthree'|wordwrap(7, wrapstring='<br>') }}|{{ '  lead and trail  '|wordwrap(5) }}|{{ ''|wordwrap }}|{{ 'x'|wordwrap(0.5) }}|{{ 'ab cd'|wordwrap(2.5) }}|{{ 'tab\tseparated\twords'|wordwrap(9) }}|{{ 'a-b-c-d-e-f'|wordwrap(3) }}|{{ '---- ----'|wordwrap(2) }}|{{ 'abc-defghijk'|wordwrap(5) }}|{{ ('<b>x y</b>'|safe)|wordwrap(3) }}|{{ 'x'|wordwrap(true) }}")
add("wordwrap-random", "{% for w in [1, 3, 5, 8, 13] %}{% for t in texts %}{{ t|wordwrap(w, wrapstring='/') }}|{{ t|wordwrap(w, break_on_hyphens=false, wrapstring='/') }}|{{ t|wordwrap(w, false, '/') }}#{% endfor %}{% endfor %}", texts=wordwrap_texts())
add("wordwrap-zero-width", "{{ 'x'|wordwrap(0) }}")
add("wordwrap-float-width-long-word", "{{ 'abcdef'|wordwrap(2.5) }}")
add("wordwrap-not-a-string", "{{ 5|wordwrap }}")
add("wordwrap-undefined", "{{ missing|wordwrap }}")
add("wordwrap-string-width", "{{ 'x'|wordwrap('5') }}")

# ---- printing lists, tuples, dicts and dict views: Python's repr (ASCII text) ----
add("print-containers", "{{ nums }}|{{ floats }}|{{ people }}|{{ nested.a }}|{{ (1,) }}{{ () }}{{ (1, 'a') }}|{{ nested.a.items() }}|{{ nested.a.keys() }}|{{ nested.a.values() }}|{{ [none, true, false, 1e16, 1e-5, -0.0, 0.1, 2.5e-320, 123456789012345678] }}|{{ ['it\\'s', 'say \"hi\"', 'both \\'\"', 'back\\\\slash', 'tab\\tnl\\ncr\\rbell\\x07del\\x7f\\x1b'] }}|{{ [missing] }}|{{ ['<b>'|safe, '<'|e, \"'\"|safe] }}|{{ {} }}{{ [] }}{{ [[]] }}{{ [()] }}|{{ 'x' ~ [1] }}|{{ [1, 2]|string }}|{{ [1]|join }}{{ [[1, 2], (3,)]|join('-') }}|{{ '%s|%r' % ([1], ['a']) }}|{{ '%5s|' % ((1,),) }}|{{ '{}{!r}'.format({'a': 1}, ('b',)) }}|{{ messages[2].tool_calls[0].function.arguments }}|{{ tools[0].function.parameters.required }}|{{ [1]|replace('1', '2') }}|{{ [nothing, flag] }}|{{ {'a': [1, {'b': (2,)}]}|string|length }}|{% for x in nums %}{{ [loop] }}{% endfor %}")
add("print-non-ascii", "{{ ['café', 'ΣΑΣ', '你好', '١٢٣', 'ǅ²', {'clé': 'straße'}] }}|{{ messages[5].content.split() }}|{{ '%a|%r' % ('é😀\u3002\x80', 'ß') }}|{{ '{!a}{!r}'.format(['ü', '\U0001F600'], ('Ω',)) }}|{{ '%a' % (('<b>é'|safe),) }}")


# The blocks of symbols router/chat_template/value.cc's repr() takes as printable
# (kPrintableBlocks): every character of them printed through repr().
PRINTABLE_BLOCKS = [(0x00A1, 0x00AC), (0x00AE, 0x00FF), (0x0300, 0x036F), (0x0900, 0x097F), (0x2010, 0x2027),
                    (0x2030, 0x205E), (0x20A0, 0x20C0), (0x2100, 0x214F), (0x2190, 0x22FF), (0x2500, 0x257F),
                    (0x25A0, 0x27BF), (0x3001, 0x303F), (0xFE30, 0xFE4F), (0xFF01, 0xFF60), (0x1F300, 0x1F64F),
                    (0x1F680, 0x1F6D7), (0x1F900, 0x1F9FF)]
add("print-printable-blocks", "{{ blocks }}",
    blocks=["".join(chr(c) for c in range(a, b + 1)) for a, b in PRINTABLE_BLOCKS])

# ---- the loop object (Jinja's LoopContext): cycle(), changed(), printing ----
add("loop-cycle-changed", "{% for x in nums %}{{ loop.cycle('a', 'b', 'c') }}{{ loop.cycle(x) }}{% endfor %}|{% for p in people|sort(attribute='age') %}{% if loop.changed(p.age) %}[{{ p.age }}]{% endif %}{{ p.name }}{{ loop.changed() }}{% endfor %}|{% for w in words %}{{ loop.changed(w|lower, 1) }}{% endfor %}|{% for x in nums %}{{ loop }}{{ loop|length }}{{ loop.previtem }}{{ loop.nextitem is defined }}{{ loop is iterable }}{{ loop is mapping }}{{ loop is sequence }}{% set outer = loop %}{% for y in [1, 2] %}{{ outer.index }}{{ loop.changed(outer.index) }}{% endfor %};{% endfor %}|{% for x in [1] %}{{ loop.changed(1.0) }}{{ loop.changed(true) }}{{ loop['index'] }}{{ loop == loop }}{% endfor %}")
add("loop-cycle-nothing", "{% for x in nums %}{{ loop.cycle() }}{% endfor %}")
add("loop-cycle-keyword", "{% for x in nums %}{{ loop.cycle(a=1) }}{% endfor %}")
add("loop-changed-keyword", "{% for x in nums %}{{ loop.changed(x=1) }}{% endfor %}")
add("loop-tojson", "{% for x in nums %}{{ loop|tojson }}{% endfor %}")
add("loop-no-previtem", "{% for x in nums %}{{ loop.previtem + 1 }}{% endfor %}")

# ---- transformers' {% generation %} block (AssistantTracker): the body rendered in place ----
add("generation", "{%- for m in messages %}{%- if m.role == 'assistant' %}{%- generation -%}\n  [{{ loop.index }}:{{ m.content or 'calls' }}]{% set inner = 1 %}{{ outer }}\n{%- endgeneration %}{{ inner is defined }}{% endif %}{% set outer = 'o' %}{% endfor %}|{% generation: %}{{ varargs|length }}{{ kwargs|tojson }}{% endgeneration %}")
add("generation-break", "{% for x in nums %}{% generation %}{% break %}{% endgeneration %}{% endfor %}")
add("generation-caller", "{% generation %}{{ caller() }}{% endgeneration %}")
add("generation-unclosed", "{% generation %}x{% endfor %}")

# ---- real templates' idioms ----
add("llama3-date", "{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n        {%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{{- \"Tools: \" + ['brave_search', 'code_interpreter', 'wolfram_alpha'] | reject('equalto', 'code_interpreter') | join(\", \") + \"\\n\\n\"}}\n{%- for t in tools %}{{ t | tojson(indent=4) }}{{ \"\\n\\n\" }}{%- endfor %}{%- for arg_name, arg_val in messages[2].tool_calls[0].function.arguments | items %}{{ arg_name + '=\"' + arg_val + '\"' }}{% if not loop.last %}, {% endif %}{% endfor %}")
add("llama3-date-given", "{%- if not date_string is defined %}{%- set date_string = strftime_now(\"%d %b %Y\") %}{%- endif %}Today Date: {{ date_string }}", date_string="01 Jan 2025")
add("mistral-idioms", "{%- set user_messages = messages | selectattr(\"role\", \"equalto\", \"user\") | list %}\n{%- set ns = namespace(index=0) %}\n{%- for message in messages[1:] %}\n    {%- if not (message.role == \"tool\" or message.get('tool_calls')) %}\n        {%- set ns.index = ns.index + 1 %}\n    {%- endif %}\n{%- endfor %}\n{{ ns.index }}|{% for message in messages %}{% if message == user_messages[-1] %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{% endif %}{% if message.tool_calls is defined %}{% for tc in message.tool_calls %}{% if not tc.id is defined or tc.id is not string or tc.id|length != 9 %}{{ raise_exception('bad id') }}{% endif %}{% set out = tc.function|tojson %}{{ out[:-1] }}, \"id\": \"{{ tc.id }}\"}{% endfor %}{% endif %}{% endfor %}|{% for key, val in tools[0].function.items() if key != \"return\" %}{% if val is string %}\"{{ key }}\": \"{{ val }}\"{% else %}\"{{ key }}\": {{ val|tojson }}{% endif %}{% if not loop.last %}, {% endif %}{% endfor %}")
add("qwen3-idioms", "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n{%- for message in messages[::-1] %}\n    {%- set index = (messages|length - 1) - loop.index0 %}\n    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n        {%- set ns.multi_step_tool = false %}\n        {%- set ns.last_query_index = index %}\n    {%- endif %}\n{%- endfor %}\n{{ ns.last_query_index }}|{% set c = messages[4].content %}{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}|{{ messages|selectattr('role', 'equalto', 'system')|list|length }}|{{ (messages|rejectattr('role', 'equalto', 'system')|first).role }}")
add("kimi-glm-gptoss-idioms", "{{ tools|tojson(separators=(',', ':')) }}|{{ tools[0]|tojson(ensure_ascii=False) }}|{{ '\"' + tools[0].function.parameters.properties.unit.enum|join('\" | \"') + '\"' }}|{{ tools|map(attribute='function.name')|map('lower')|join(',') }}|{{ tools|sort(attribute='function.name')|map(attribute='function.name')|join(',') }}|{% set _args = messages[2].tool_calls[0].function.arguments or {} %}{% for k, v in _args.items() %}<{{ k }}>{{ v | tojson(ensure_ascii=False) if v is not string else v }}{% endfor %}")
add("gemma-phi-idioms", "{% for message in messages %}{% if message['content'] is string %}{{ message['content'] | trim }}{% elif message['content'] is iterable %}[list]{% else %}[{{ message['content'] }}]{% endif %};{% endfor %}|{{ messages[0]['content'] | capitalize }}|{{ messages|map(attribute='role')|unique|join(',') }}")


def main():
    import transformers
    import transformers.utils.chat_template_utils as ctu

    class FixedDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return CLOCK

    ctu.datetime = FixedDatetime
    cases = []
    for name, template, kwargs in CASES:
        tok = tokenizer_for(template, SPECIAL)
        variables = dict(DATA)
        variables.update(kwargs)
        variables["tools"] = TOOLS
        case = {"name": name, "template": template, "kwargs": kwargs}
        case.update(render(tok, MESSAGES, True, variables))
        cases.append(case)
    out = {"made_by": "tools/make_chat_template_filter_fixtures.py with transformers "
                      f"{transformers.__version__}",
           "clock": {"year": CLOCK.year, "month": CLOCK.month, "day": CLOCK.day, "hour": CLOCK.hour,
                     "minute": CLOCK.minute, "second": CLOCK.second, "microsecond": CLOCK.microsecond},
           "special_tokens": SPECIAL, "messages": MESSAGES, "tools": TOOLS, "data": DATA, "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = [c for c in cases if "error" in c]
    print(f"{len(cases)} cases ({len(errors)} expected errors)")
    for c in errors:
        print(f"  {c['name']}: {c['error'][:150]}")


if __name__ == "__main__":
    main()
