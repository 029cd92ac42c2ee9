#!/usr/bin/python3
"""Makes tests/fixtures/json_schema/cases.json: JSON Schemas with texts labelled valid or
invalid by Python's `jsonschema` (Debian's python3-jsonschema, Draft 2020-12 validator with
its FormatChecker), for model/constraint/json_schema_fixture_test.cc.

Valid texts are random instances written the way structured outputs write them (keys in the
schema's property order, enum / const values in compact canonical form, whitespace runs of at
most 3 bytes between tokens, none after the value); only those jsonschema accepts are kept.
Invalid texts are byte-level mutations of valid ones and value-level mutations (a property
dropped or added, a type changed, a bound crossed, an item added), kept only when jsonschema
refuses them (or json.loads does: NaN / Infinity count as not JSON here, as in RFC 8259).
Each invalid text records `alive`: the length of its longest prefix shared with the valid text
it came from, which the recognizer must take before refusing.

`date-time` and `time` are checked with this script's own RFC 3339 check (jsonschema needs
rfc3339-validator for them, which Debian 12 does not package); `hostname` and `duration` by
jsonschema's FormatChecker through fqdn 1.6.0 and isoduration 20.11.0 (not packaged by Debian 12:
pinned in tools/requirements-json-schema.txt); `date`, `uuid`, `email`, `ipv4` and `ipv6` by
jsonschema's FormatChecker alone.

Numbers under bounds are written as structured outputs write them: in decimal without exponent,
between the decimal bounds json_schema's compiler derives (model/constraint/schema_number.h:
an exclusive bound moves to the next double past it), so texts that Python rounds onto a bound
are among the invalid ones; fractional multipleOf values are k * step in shortest decimal.

Run (needs Debian's python3-jsonschema, and fqdn / isoduration from a venv):
  python3 -m venv /tmp/js-formats && /tmp/js-formats/bin/pip install -r tools/requirements-json-schema.txt
  PYTHONPATH=/usr/lib/python3/dist-packages:$(echo /tmp/js-formats/lib/python3*/site-packages) \
    /usr/bin/python3 tools/make_json_schema_fixtures.py
"""

import datetime
import decimal
import importlib.metadata
import json
import math
import os
import random
import re
import sys
from decimal import Decimal

import jsonschema

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "json_schema",
                   "cases.json")
SEED = 20250605
VALID_PER_SCHEMA = 24
INVALID_PER_SCHEMA = 40

# (name, schema, strict, {pattern or format: canonical example strings}).
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
SCHEMAS = [
    ("string", {"type": "string"}, False),
    ("string_length", {"type": "string", "minLength": 2, "maxLength": 4}, False),
    ("number", {"type": "number"}, False),
    ("integer", {"type": "integer"}, False),
    ("bounded_integer", {"type": "integer", "minimum": -20, "exclusiveMaximum": 300}, False),
    ("big_lower_bound", {"type": "integer", "exclusiveMinimum": 99999}, False),
    ("boolean_or_null", {"type": ["boolean", "null"]}, False),
    ("any", {}, False),
    ("enum_mixed", {"enum": ["red", "green", 1, 12, 1.5, None, True, [1, "a"],
                             {"k": {"z": 0}}]}, False),
    ("const_object", {"const": {"a": [1, 2], "b": "x\ny"}}, False),
    ("enum_with_type", {"type": "string", "enum": ["a", "b", 3]}, False),
    ("person", PERSON, False),
    ("person_strict_no_additional",
     {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}},
     True),
    ("open_object",
     {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, False),
    ("additional_schema",
     {"type": "object", "properties": {"id": {"type": "string"}},
      "additionalProperties": {"type": "number"}}, False),
    ("required_not_listed",
     {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["y"]}, False),
    ("array_bounds",
     {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
      "minItems": 1, "maxItems": 4}, False),
    ("tuple",
     {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}],
      "items": False}, False),
    ("tuple_strict", {"type": "array", "prefixItems": [{"type": "boolean"}]}, True),
    ("any_of",
     {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 5},
                {"type": "array", "items": {"type": "null"}}]}, False),
    ("any_of_objects",
     {"anyOf": [
         {"type": "object", "properties": {"kind": {"const": "circle"},
                                           "r": {"type": "number"}},
          "required": ["kind", "r"], "additionalProperties": False},
         {"type": "object", "properties": {"kind": {"const": "rect"},
                                           "w": {"type": "number"}, "h": {"type": "number"}},
          "required": ["kind", "w", "h"], "additionalProperties": False}]}, False),
    ("one_of_disjoint", {"oneOf": [{"type": "string"}, {"type": "boolean"}]}, False),
    ("all_of_one", {"allOf": [{"type": "integer", "maximum": 3}]}, False),
    ("recursive_list",
     {"$defs": {"node": {"type": "object",
                         "properties": {"v": {"type": "integer"},
                                        "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                           {"type": "null"}]}},
                         "required": ["v", "next"], "additionalProperties": False}},
      "$ref": "#/$defs/node"}, False),
    ("tree", {"type": "array", "items": {"$ref": "#"}, "maxItems": 3}, False),
    ("pattern", {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2,3}$"}, False),
    ("pattern_unanchored", {"type": "string", "pattern": "ab|c\\.d"}, False),
    ("date", {"type": "string", "format": "date"}, False),
    ("date_time", {"type": "string", "format": "date-time"}, False),
    ("time", {"type": "string", "format": "time"}, False),
    ("uuid", {"type": "string", "format": "uuid"}, False),
    ("typeless_keywords", {"properties": {"a": {"type": "null"}}, "maxLength": 2}, False),
    ("number_bounds", {"type": "number", "minimum": -1.5, "exclusiveMaximum": 2}, False),
    ("number_exclusive_zero", {"type": "number", "exclusiveMinimum": 0}, False),
    ("number_upper", {"type": "number", "maximum": -0.25}, False),
    ("number_rounding",
     {"type": "number", "exclusiveMinimum": 0.1, "maximum": 0.30000000000000004}, False),
    ("integer_multiple", {"type": "integer", "multipleOf": 5, "minimum": -12, "maximum": 40},
     False),
    ("integer_multiple_wide",
     {"type": "integer", "multipleOf": 7, "minimum": -10 ** 18, "maximum": 10 ** 18}, False),
    # Bounded above too: the test's validator reads integers past int64 as doubles.
    ("number_multiple_integral",
     {"type": "number", "multipleOf": 3, "exclusiveMinimum": -10.5, "maximum": 1e15}, False),
    ("number_multiple_decimal",
     {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.01}, False),
    ("ipv4", {"type": "string", "format": "ipv4"}, False),
    ("ipv6", {"type": "string", "format": "ipv6"}, False),
    ("hostname", {"type": "string", "format": "hostname"}, False),
    ("duration", {"type": "string", "format": "duration"}, False),
    ("pydantic_fields",
     {"type": "object",
      "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1},
                     "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                     "count": {"type": "integer", "multipleOf": 5, "minimum": 0,
                               "maximum": 100000},
                     "price": {"type": "number", "minimum": 0, "maximum": 2,
                               "multipleOf": 0.25},
                     "ttl": {"type": "string", "format": "duration"},
                     "host": {"type": "string", "format": "hostname"},
                     "address": {"anyOf": [{"type": "string", "format": "ipv4"},
                                           {"type": "string", "format": "ipv6"}]}},
      "required": ["score", "count", "address"], "additionalProperties": False}, True),
    ("order",
     {"type": "object",
      "properties": {"id": {"type": "integer"},
                     "status": {"enum": ["open", "closed"]},
                     "items": {"type": "array",
                               "items": {"type": "object",
                                         "properties": {"sku": {"type": "string"},
                                                        "qty": {"type": "integer",
                                                                "minimum": 1}},
                                         "required": ["sku", "qty"],
                                         "additionalProperties": False}},
                     "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
      "required": ["id", "status", "items"], "additionalProperties": False}, True),
]

EXAMPLES = {
    "^[A-Z]{2}-[0-9]{2,3}$": ["AB-12", "ZZ-999", "QX-07"],
    "ab|c\\.d": ["ab", "xxab", "c.d", "1c.d2", "\u00e9ab\n"],
    "date": ["2024-02-29", "1999-12-31", "0001-01-01", "2023-04-30"],
    "date-time": ["2024-02-29T23:59:59Z", "2000-01-01T00:00:00.123+05:30",
                  "1970-06-15T12:30:00-08:00"],
    "time": ["23:59:59Z", "00:00:00.5+01:00", "12:34:56-11:59"],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000", "ABCDEF01-2345-6789-ABCD-EF0123456789"],
    "email": ["a@b.co", "first.last+x@mail.example.org", "x_y@host-1.net"],
    "ipv4": ["192.168.0.1", "0.0.0.0", "255.255.255.255", "10.200.30.4"],
    "ipv6": ["::", "::1", "2001:db8::8a2e:370:7334", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::",
             "::ffff:192.168.0.1", "fe80::1:2", "ABCD:EF01::9"],
    "hostname": ["example.com", "api.eu-west-1.example.COM", "a-b.c", "1.2.3.4",
                 "x" * 30 + ".io"],
    "duration": ["P1Y2M3DT4H5M6S", "PT1M", "P1W", "P3D", "PT36H", "P0D", "P1YT1S",
                 "P12M30D", "PT1H30M"],
}

RFC3339_TIME = re.compile(
    r"^(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-](\d{2}):(\d{2}))$")


def rfc3339_time(s):
    m = RFC3339_TIME.match(s)
    if not m:
        return False
    h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if m.group(6) and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    return h <= 23 and mi <= 59 and sec <= 60


def rfc3339_date_time(s):
    if len(s) < 11 or s[10] not in "Tt":
        return False
    try:
        datetime.date.fromisoformat(s[:10])
    except ValueError:
        return False
    return re.match(r"^\d{4}-\d{2}-\d{2}$", s[:10]) is not None and rfc3339_time(s[11:].upper())


FORMATS = jsonschema.FormatChecker()
FORMATS.checks("date-time")(lambda s: not isinstance(s, str) or rfc3339_date_time(s))
FORMATS.checks("time")(lambda s: not isinstance(s, str) or rfc3339_time(s.upper()))
# hostname and duration: jsonschema's own checkers, which it registers only when fqdn and
# isoduration are importable (tools/requirements-json-schema.txt); without them it would
# accept every string, so the fixture could not be trusted.
if not {"hostname", "duration"} <= set(FORMATS.checkers):
    sys.exit("make_json_schema_fixtures.py: jsonschema's hostname / duration checks need fqdn and "
             "isoduration; install tools/requirements-json-schema.txt into a venv and put its "
             "site-packages on PYTHONPATH (see the docstring)")


def reject_constant(name):
    raise ValueError("not JSON: " + name)


def label(schema, text):
    """True / False per jsonschema (False when the text is not RFC 8259 JSON)."""
    try:
        value = json.loads(text, parse_constant=reject_constant)
    except ValueError:
        return False
    try:
        jsonschema.Draft202012Validator(schema, format_checker=FORMATS).validate(value)
        return True
    except jsonschema.ValidationError:
        return False
    except ValueError:
        # fqdn raises on "" ("fqdn must be str") and jsonschema 4.10.3 lets it through: no host
        # name, so invalid.
        return False


class Writer:
    def __init__(self, rng, root, strict):
        self.rng, self.root, self.strict = rng, root, strict

    def ws(self):
        return "".join(self.rng.choice(" \t\n\r") for _ in range(self.rng.choice([0, 0, 0, 1, 2, 3])))

    def resolve(self, schema):
        while isinstance(schema, dict) and "$ref" in schema:
            ref = schema["$ref"]
            node = self.root
            for part in ref[2:].split("/") if ref != "#" else []:
                node = node[part]
            schema = node
        return schema

    def string(self, lo=0, hi=6):
        pool = ["a", "Z", "7", " ", "\u00e9", "\u65e5", "\U0001F600", "\\n", "\\\"", "\\\\",
                "\\u00e9", "\\/", "\\t"]
        n = self.rng.randint(lo, hi)
        return '"' + "".join(self.rng.choice(pool) for _ in range(n)) + '"'

    def number(self):
        return self.rng.choice(["0", "-1", "3.25", "1e3", "-2.5E-2", "12", "0.0", "7E+1"])

    def value(self, schema, depth=0):
        schema = self.resolve(schema)
        if schema is True or schema == {}:
            return self.any(depth)
        if "enum" in schema:
            return json.dumps(self.rng.choice(schema["enum"]), separators=(",", ":"),
                              ensure_ascii=False)
        if "const" in schema:
            return json.dumps(schema["const"], separators=(",", ":"), ensure_ascii=False)
        for key in ("anyOf", "oneOf", "allOf"):
            if key in schema:
                return self.value(self.rng.choice(schema[key]), depth)
        types = schema.get("type", ["object", "array", "string", "number", "boolean", "null"])
        if isinstance(types, str):
            types = [types]
        t = self.rng.choice(types)
        if t == "object":
            return self.object(schema, depth)
        if t == "array":
            return self.array(schema, depth)
        if t == "string":
            for key in ("pattern", "format"):
                if key in schema:
                    return json.dumps(self.rng.choice(EXAMPLES[schema[key]]), ensure_ascii=False)
            lo = schema.get("minLength", 0)
            return self.string(lo, min(schema.get("maxLength", lo + 6), lo + 6))
        if t == "integer" or (t == "number" and integral_multiple(schema)):
            lo = math.ceil(schema.get("minimum", schema.get("exclusiveMinimum", -60) + 0.5))
            hi = math.floor(schema.get("maximum", schema.get("exclusiveMaximum", lo + 400) - 0.5))
            m = int(schema.get("multipleOf", 1))
            if self.rng.random() < 0.3:  # somewhere near the ends
                lo, hi = self.rng.choice([(lo, min(hi, lo + 3 * m)), (max(lo, hi - 3 * m), hi)])
            return str(m * self.rng.randint(-(-lo // m), hi // m))
        if t == "number" and "multipleOf" in schema:
            step = Decimal(repr(float(schema["multipleOf"])))
            lo, hi = number_range(schema)
            k = self.rng.randint(math.ceil(lo / step), math.floor(hi / step))
            return plain(k * step)
        if t == "number" and any(k in schema for k in BOUNDS):
            return self.bounded_number(schema)
        if t == "number":
            return self.number()
        if t == "boolean":
            return self.rng.choice(["true", "false"])
        return "null"

    def bounded_number(self, schema):
        """A decimal without exponent inside the compiler's bounds: an end, next to one, or
        anywhere between with 0-7 fraction digits."""
        lo, hi = number_range(schema)
        lo = hi - 1000 if lo is None else lo
        hi = lo + 1000 if hi is None else hi
        tiny = Decimal(10) ** -self.rng.randint(1, 24)
        choice = self.rng.randrange(5)
        if choice == 0:
            v = lo
        elif choice == 1:
            v = hi
        elif choice == 2:
            v = min(hi, lo + tiny)
        elif choice == 3:
            v = max(lo, hi - tiny)
        else:
            digits = self.rng.randint(0, 7)
            v = (lo + (hi - lo) * Decimal(self.rng.random())).quantize(
                Decimal(10) ** -digits, rounding=decimal.ROUND_DOWN if digits else None)
            v = min(max(v, lo), hi)
        text = plain(v)
        if "." in text and self.rng.random() < 0.2:
            text += "0" * self.rng.randint(1, 3)  # trailing zeros are the same number
        return text

    def any(self, depth):
        choice = self.rng.randrange(6 if depth < 3 else 4)
        if choice == 4:
            return self.object({"type": "object"}, depth)
        if choice == 5:
            return self.array({"type": "array"}, depth)
        return [self.string(), self.number(), "true", "null"][choice]

    def object(self, schema, depth):
        props = schema.get("properties", {})
        required = schema.get("required", [])
        extra_schema = schema.get("additionalProperties", False if self.strict else True)
        members = []
        for name, sub in props.items():
            if name in required or self.rng.random() < 0.5:
                members.append((name, sub))
        for name in required:
            if name not in props:
                members.append((name, extra_schema if extra_schema is not False else {}))
        if extra_schema is not False and depth < 3:
            for _ in range(self.rng.choice([0, 0, 1, 2])):
                name = "x" + "".join(self.rng.choice("abc") for _ in range(2))
                if name not in props and name not in [m[0] for m in members]:
                    members.append((name, extra_schema))
        parts = [self.ws() + json.dumps(name, ensure_ascii=False) + self.ws() + ":" + self.ws() +
                 self.value(sub, depth + 1) + self.ws() for name, sub in members]
        return "{" + (",".join(parts) if parts else self.ws()) + "}"

    def array(self, schema, depth):
        prefix = schema.get("prefixItems", [])
        items = schema.get("items", False if (self.strict and prefix) else True)
        lo = schema.get("minItems", 0)
        hi = schema.get("maxItems", max(lo, len(prefix)) + 3)
        if depth >= 3:
            hi = min(hi, max(lo, 0))
        n = self.rng.randint(lo, max(lo, hi))
        if items is False:
            n = min(n, len(prefix))
        parts = [self.ws() + self.value(prefix[i] if i < len(prefix) else items, depth + 1) +
                 self.ws() for i in range(n)]
        return "[" + (",".join(parts) if parts else self.ws()) + "]"


BOUNDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
decimal.getcontext().prec = 2000


def plain(d):
    """A Decimal as JSON text without exponent (integers without '.')."""
    d = d.normalize() if d != 0 else Decimal(0)
    return format(d, "f")


def integral_multiple(schema):
    m = schema.get("multipleOf")
    return m is not None and float(m) == int(float(m))


def number_range(schema):
    """The decimal bounds json_schema's compiler keeps (schema_number.h BoundsForNumber): the
    shortest decimal of the bound's double, or of the next double past an exclusive one."""
    lo = hi = None
    for key in BOUNDS:
        if key not in schema:
            continue
        b = float(schema[key])
        lower = key in ("minimum", "exclusiveMinimum")
        if key.startswith("exclusive"):
            b = math.nextafter(b, math.inf if lower else -math.inf)
        d = Decimal(repr(b))
        if lower:
            lo = d if lo is None else max(lo, d)
        else:
            hi = d if hi is None else min(hi, d)
    return lo, hi


def edge_texts(schema):
    """Numbers next to a top-level number schema's bounds that Python rounds or compares onto
    the wrong side (invalid), e.g. 1e-400 for exclusiveMinimum 0."""
    if schema.get("type") != "number" or "multipleOf" in schema:
        return []
    out = []
    for key in BOUNDS:
        if key not in schema:
            continue
        b = Decimal(repr(float(schema[key])))
        up = key in ("minimum", "exclusiveMaximum")
        sign = -1 if up else 1  # the invalid side of a minimum is below it
        near = Decimal(10) ** -25
        out += [plain(b), plain(b + sign * near), plain(b - sign * Decimal("0.001")),
                plain(b + sign * near) + "1", format(float(schema[key]), ".17g")]
        if b == 0:
            out += ["0." + "0" * 399 + "1", "-0." + "0" * 399 + "1", "1e-400", "-0.0"]
    return [t for t in out if t]


def byte_mutations(rng, text):
    raw = text.encode("utf-8")
    out = []
    for _ in range(6):
        i = rng.randrange(len(raw) + 1)
        junk = rng.choice([b"}", b"]", b",", b'"', b"x", b"1", b"-", b".", b"{", b":", b"e",
                           b"\\", b"\xc3", b"\x01", b"null", b"[", b" "])
        kind = rng.randrange(3)
        if kind == 0:
            m = raw[:i] + junk + raw[i:]
        elif kind == 1 and i < len(raw):
            m = raw[:i] + raw[i + 1:]
        elif i < len(raw):
            m = raw[:i] + junk + raw[i + 1:]
        else:
            continue
        out.append(m)
    return out


def value_mutations(rng, schema, text):
    try:
        v = json.loads(text)
    except ValueError:
        return []
    out = []
    def dumps(x):
        return json.dumps(x, ensure_ascii=False).encode("utf-8")
    if isinstance(v, dict):
        if v:
            w = dict(v)
            w.pop(rng.choice(list(w)))
            out.append(dumps(w))
            w = dict(v)
            k = rng.choice(list(w))
            w[k] = rng.choice(["s", 1.5, None, [1], {"q": 1}, -1000, 10 ** 20])
            out.append(dumps(w))
        w = dict(v)
        w["zz"] = 1
        out.append(dumps(w))
    elif isinstance(v, list):
        out.append(dumps(v + [rng.choice([None, "s", 5, [], {}])]))
        if v:
            out.append(dumps(v[:-1]))
            out.append(dumps([{"bad": True}] + v[1:]))
    elif isinstance(v, str):
        out += [dumps(v + "xyzzy!"), dumps(v[:1]), dumps(""), dumps(123)]
    elif isinstance(v, bool) or v is None:
        out += [dumps(0), dumps("true")]
    else:
        out += [dumps(v * 1000 + 7), dumps(-v - 1000), dumps(v + 0.5), dumps(str(v))]
    return out


def common_prefix(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def main():
    rng = random.Random(SEED)
    cases = []
    for name, schema, strict in SCHEMAS:
        writer = Writer(rng, schema, strict)
        valid, seen = [], set()
        for _ in range(VALID_PER_SCHEMA * 20):
            if len(valid) >= VALID_PER_SCHEMA:
                break
            text = writer.ws() + writer.value(schema)
            if text in seen:
                continue
            seen.add(text)
            if label(schema, text):
                valid.append(text)
        if len(valid) < 4:
            sys.exit(f"{name}: only {len(valid)} valid instances")
        invalid, seen_bad = [], set()
        for source in valid:
            raw = source.encode("utf-8")
            for m in byte_mutations(rng, source) + value_mutations(rng, schema, source):
                if m in seen_bad or len(invalid) >= INVALID_PER_SCHEMA:
                    continue
                seen_bad.add(m)
                try:
                    text = m.decode("utf-8")
                    ok = label(schema, text)
                except UnicodeDecodeError:
                    ok = False
                if not ok:
                    invalid.append({"hex": m.hex(), "alive": common_prefix(m, raw)})
        for text in edge_texts(schema):
            m = text.encode("utf-8")
            if m in seen_bad or label(schema, text):
                continue
            seen_bad.add(m)
            alive = max(common_prefix(m, v.encode("utf-8")) for v in valid)
            invalid.append({"hex": m.hex(), "alive": alive})
        cases.append({"name": name, "schema": schema, "strict": strict, "valid": valid,
                      "invalid": invalid})
        print(f"{name}: {len(valid)} valid, {len(invalid)} invalid")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/make_json_schema_fixtures.py",
                   "validator": "python3-jsonschema " + importlib.metadata.version("jsonschema"),
                   "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
