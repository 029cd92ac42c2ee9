#!/usr/bin/env python3
"""Expected renderings of our macro chat templates, from transformers (Jinja2) itself.

tests/fixtures/chat_template/macros/*.jinja are chat templates we wrote (no third-party
template text) exercising Jinja's {% macro %}, {% call %}, block set and the scoping rules
around them, plus two whole templates in the shapes of Kimi-K2's and Qwen3's (tool calls,
multi-part content). This script renders each of them on several message lists with
transformers' apply_chat_template(tokenize=False), exactly as
tools/make_chat_template_fixtures.py does (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, transformers' tojson, raise_exception), and writes
tests/fixtures/chat_template/macros/expected.json: the templates' text (the test checks the
.jinja files still hold it) and per case the messages, tools, add_generation_prompt, extra template variables and the rendered text,
or the error transformers raised (ours must refuse too).
router/chat_template/chat_template_macro_test.cc checks our interpreter byte for byte.

Usage (any machine with PyPI; no torch needed):
  python3 -m venv /tmp/ct && /tmp/ct/bin/pip install transformers==5.17.0 tokenizers==0.23.3 jinja2==3.1.6
  /tmp/ct/bin/python tools/make_chat_template_macro_fixtures.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_chat_template_fixtures import render, tokenizer_for  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                    "chat_template", "macros")
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city, now.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Local time in a time zone.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
]

CONVERSATIONS = {
    "chat": [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "Hi there"},
             {"role": "assistant", "content": "Hello! What do you need?"},
             {"role": "user", "content": "A haiku, please.\nAbout rain."}],
    "user_only": [{"role": "user", "content": "Hello!"}],
    "unicode_ws": [{"role": "user", "content": "  Ünïcödé ✓ 你好\n\ttabs \"quotes\" {{ not jinja }}  "},
                   {"role": "assistant", "content": "\nok\n"}],
    "nested_content": [
        {"role": "user", "content": [
            {"type": "text", "text": "Look at"},
            {"type": "image"},
            {"type": "group", "parts": [
                {"type": "text", "text": "inner"},
                {"type": "group", "parts": [{"type": "text", "text": "deepest"}, {"type": "audio"}]},
            ]},
            {"type": "text", "text": "please."}]},
        {"role": "assistant", "content": "I see it."},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}],
    "tool_calls": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
            {"id": "call_2", "type": "function",
             "function": {"name": "get_time", "arguments": "{\"tz\": \"CET\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21"},
        {"role": "tool", "tool_call_id": "call_2", "content": "10:00"},
        {"role": "assistant", "content": "Sunny and 21 °C; it is 10:00."},
        {"role": "user", "content": "Thanks"}],
    "reasoning": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "add two and two"},
        {"role": "user", "content": "and 3+3?"},
        {"role": "assistant", "content": "<think>\nadd three\n</think>\n\n6"},
        {"role": "user", "content": "ok"}],
    "reasoning_last": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "add two and two"},
        {"role": "user", "content": "and 3+3?"},
        {"role": "assistant", "content": "<think>\nadd three\n</think>\n\n6"}],
    "tool_round": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "reasoning_content": "need the weather tool",
         "tool_calls": [{"type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "x", "content": [{"type": "text", "text": "snow"}]}],
}

# template -> list of (conversation, tools or None, extra variables); every case is rendered
# with add_generation_prompt false and true.
PLAIN = [("chat", None, {}), ("user_only", None, {}), ("unicode_ws", None, {})]
CASES = {
    "defaults_and_keywords": PLAIN,
    "nested_macros": PLAIN,
    "recursive_content": [("chat", None, {}), ("nested_content", None, {}), ("tool_calls", None, {})],
    "whitespace": [("chat", None, {}), ("user_only", None, {})],
    "loops_and_namespaces": [("chat", None, {}), ("tool_calls", None, {}), ("user_only", None, {})],
    "in_expressions": [("chat", None, {}), ("unicode_ws", None, {})],
    "scoping": [("chat", None, {}), ("chat", None, {"x": "x-global", "y": "y-global",
                                                    "greeting": "hello", "top": "top-global",
                                                    "z": "z-global", "e": "e-global"})],
    "call_blocks": [("chat", None, {}), ("unicode_ws", None, {})],
    "varargs_kwargs": [("chat", None, {}), ("user_only", None, {})],
    "kimi_style": [("chat", None, {}), ("user_only", None, {}), ("nested_content", None, {}),
                   ("tool_calls", TOOLS, {}), ("tool_calls", None, {}), ("reasoning", None, {}),
                   ("tool_round", TOOLS, {})],
    "qwen_style_tools": [("chat", None, {}), ("user_only", TOOLS, {}), ("nested_content", None, {}),
                         ("tool_calls", TOOLS, {}), ("reasoning", None, {}),
                         ("reasoning", None, {"enable_thinking": False}),
                         ("reasoning_last", None, {}), ("tool_round", TOOLS, {})],
    "errors": [("user_only", None, {"which": w}) for w in (
        "none", "before_definition", "too_many", "unknown_keyword", "positional_and_keyword",
        "no_caller", "call_block_without_caller", "recursion", "raise", "list_append")],
}


def main():
    import transformers
    templates = {}
    cases = []
    for name, variants in CASES.items():
        with open(os.path.join(HERE, name + ".jinja"), encoding="utf-8") as f:
            template = f.read()
        templates[name] = {"source": template}
        tok = tokenizer_for(template, SPECIAL)
        for conversation, tools, variables in variants:
            for agp in (False, True):
                messages = CONVERSATIONS[conversation]
                kwargs = dict(variables)
                if tools is not None:
                    kwargs["tools"] = tools
                case = {"template": name, "conversation": conversation, "tools": tools,
                        "add_generation_prompt": agp, "kwargs": variables}
                case.update(render(tok, messages, agp, kwargs))
                cases.append(case)
    out = {"made_by": "tools/make_chat_template_macro_fixtures.py with transformers "
                      f"{transformers.__version__}",
           "special_tokens": SPECIAL, "conversations": CONVERSATIONS, "templates": templates,
           "cases": cases}
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = [c for c in cases if "error" in c]
    print(f"{len(cases)} cases ({len(errors)} expected errors)")
    for c in errors:
        print(f"  {c['template']} / {c['conversation']} / {c['kwargs']}: {c['error']}")


if __name__ == "__main__":
    main()
