#!/usr/bin/env python3
"""Expected DeepSeek-V3.2 tool calls (DSML) for router/openai/tool_call_parser.cc.

The reference is DeepSeek's own decoder, parse_message_from_completion_text(text, mode) in
SGLang's adaptation of DeepSeek-V3.2's encoding_dsv32.py (the PyPI wheel and sha256 check of
tools/make_deepseek_v32_encoding_fixtures.py, whose load_reference this script reuses). Each
completion text below (ending with <｜end▁of▁sentence｜>, as the decoder expects) is decoded in
chat or thinking mode and its result (content, reasoning_content, tool call names and
arguments) or its error is written to tests/fixtures/chat_template/deepseek_v32_tool_calls.json.
tool_call_parser_test.cc strips the end-of-sentence token (the router never sees the stop
token), splits thinking-mode texts at the first </think>, and checks that our parser gives
the same content and arguments byte for byte; for refused texts it checks only that the
parser copes (ours is lenient where the decoder refuses).

Usage (any machine with PyPI):
  python3 tools/make_deepseek_v32_tool_call_fixtures.py
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_deepseek_v32_encoding_fixtures import (MEMBER, MEMBER_SHA256, PACKAGE, load_reference,  # noqa: E402
                                                write_fixture)  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "chat_template",
                   "deepseek_v32_tool_calls.json")
EOS = "<｜end▁of▁sentence｜>"
D = "｜DSML｜"


def param(key, value, string):
    return f'<{D}parameter name="{key}" string="{"true" if string else "false"}">{value}</{D}parameter>'


def invoke(name, *params):
    return f'<{D}invoke name="{name}">\n' + "".join(p + "\n" for p in params) + f"</{D}invoke>"


def block(*invokes):
    return f"\n\n<{D}function_calls>\n" + "\n".join(invokes) + f"\n</{D}function_calls>"


WEATHER = invoke("get_weather", param("city", "Paris", True))
TIME = invoke("get_time", param("tz", "CET", True), param("format", "24", False))
TYPED = invoke("typed", param("s", "text", True), param("i", "3", False), param("f", "-1.5e-3", False),
               param("t", "true", False), param("n", "null", False), param("list", '[1, "x", {"k": "ü"}]', False),
               param("obj", '{\n  "a": {"b": [true, 2.5]}\n}', False), param("empty", "", True))
ESCAPES = invoke("write", param("text", 'say "hi" \\ back\nslash\r\n\ttab \b\f \x01\x1f\x7f end', True),
                 param("unicode", "naïve 日本語 😀 \u2028 done", True))

# (name, thinking mode, completion text without the end-of-sentence token)
CASES = [
    ("content_only", "chat", "Hello! How can I help?"),
    ("content_multiline", "chat", "Line one.\n\nLine two.\n"),
    ("one_call", "chat", block(WEATHER)),
    ("content_then_call", "chat", "Let me check." + block(WEATHER)),
    ("two_calls", "chat", "Checking both." + block(WEATHER, TIME)),
    ("typed_params", "chat", block(TYPED)),
    ("string_escapes", "chat", block(ESCAPES)),
    ("no_params", "chat", block(invoke("list_files"))),
    ("look_alikes", "chat",
     block(invoke("echo", param("a", f'<{D}invoke name="x"> and </{D}invoke> and <｜tool▁calls▁begin｜>', True),
                  param("b", "a < b && c > d </ not a tag", True),
                  param("c", f"x\n\n<{D}function_calls>\n<｜end▁of▁sentence y", True)))),
    ("unicode_names", "chat", "Voilà 😀:" + block(invoke("météo_查询", param("ville_名", "Zürich", True)))),
    ("content_ends_with_newlines", "chat", "Sure:\n\n\n" + block(WEATHER)),
    ("three_calls_mixed", "chat", block(TIME, invoke("list_files"), ESCAPES)),
    ("thinking_content", "thinking", "The user greets me.</think>Hi there!"),
    ("thinking_then_call", "thinking", "Need the weather tool.</think>" + block(WEATHER)),
    ("thinking_content_and_calls", "thinking", "Two tools.</think>On it." + block(WEATHER, TYPED)),
    ("thinking_empty_reasoning", "thinking", "</think>" + block(invoke("list_files"))),
    # The decoder refuses these; our parser is lenient and must only cope.
    ("refused_text_after_block", "chat", block(WEATHER) + "\nDone."),
    ("refused_duplicate_param", "chat", block(invoke("f", param("a", "1", False), param("a", "2", False)))),
    ("refused_no_blank_line", "chat", "Checking." + block(WEATHER)[2:]),
    ("refused_no_string_attribute", "chat",
     block(f'<{D}invoke name="f">\n<{D}parameter name="a">1</{D}parameter>\n</{D}invoke>')),
    ("refused_unclosed_block", "chat", block(WEATHER)[:-len(f"\n</{D}function_calls>")]),
    ("refused_call_in_reasoning", "thinking", "Let me call." + block(WEATHER) + "</think>"),
    ("refused_no_think_end", "thinking", "Still thinking"),
    ("refused_stray_text_between_calls", "chat",
     block(WEATHER).replace(f"</{D}invoke>\n", f"</{D}invoke>\nand also\n")),
]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        encoding = load_reference(tmp)
        cases = []
        for name, mode, text in CASES:
            case = {"name": name, "mode": mode, "text": text + EOS}
            try:
                m = encoding.parse_message_from_completion_text(text + EOS, mode)
                case["parsed"] = {"content": m["content"], "reasoning_content": m["reasoning_content"],
                                  "tool_calls": [{"name": c["function"]["name"],
                                                  "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]}
            except Exception as e:  # the decoder's refusals
                case["error"] = f"{type(e).__name__}: {e}"
            cases.append(case)
    write_fixture(OUT, {"reference": {"package": PACKAGE, "file": MEMBER, "sha256": MEMBER_SHA256,
                                      "function": "parse_message_from_completion_text"},
                        "made_by": "tools/make_deepseek_v32_tool_call_fixtures.py", "cases": cases})


if __name__ == "__main__":
    main()
