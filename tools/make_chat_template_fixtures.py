#!/usr/bin/env python3
"""Expected chat-template renderings for router/chat_template, from transformers itself.

Renders every (template, conversation, add_generation_prompt, template kwargs) case with
transformers' PreTrainedTokenizerFast.apply_chat_template(tokenize=False) and writes
tests/fixtures/chat_template/expected.json, which chat_template_fixture_test.cc compares
with our interpreter byte for byte. A case transformers refuses is recorded as an error;
ours must refuse it too.

Templates:
  - DeepSeek's published ones (V2, V2.5, V3, R1, V3.1, whose template DeepSeek-V3.2-Exp
    reuses), read from tests/fixtures/chat_template/<name>/tokenizer_config.json, which
    tools/fetch_deepseek_tokenizers.sh fetches (DeepSeek's files: not committed). The
    expected file records each template's sha256 so the test knows it has the same text.
    DeepSeek-V3.2 (final) publishes no Jinja template (a Python encoder instead): its format
    is checked by tools/make_deepseek_v32_encoding_fixtures.py.
  - constructs.json (ours, committed): small templates exercising each construct of the
    subset and the whitespace rules.

Usage (any machine with PyPI; no torch needed):
  python3 -m venv /tmp/ct && /tmp/ct/bin/pip install transformers==5.17.0 tokenizers==0.23.3 jinja2==3.1.6
  tools/fetch_deepseek_tokenizers.sh
  /tmp/ct/bin/python tools/make_chat_template_fixtures.py
"""
import hashlib
import json
import os
import sys

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                    "chat_template")
DEEPSEEK = ["deepseek_v2", "deepseek_v2_5", "deepseek_v3", "deepseek_r1", "deepseek_v3_1"]

TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
TOOL_CALL_2 = {"id": "call_2", "type": "function",
               "function": {"name": "get_time", "arguments": "{\"tz\": \"CET\"}"}}

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Count to 3."}],
    "two_systems": [{"role": "system", "content": "Rule one."},
                    {"role": "system", "content": "Rule two."},
                    {"role": "user", "content": "Go."}],
    "multi_turn": [{"role": "system", "content": "Be kind."},
                   {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke.\nA short one."}],
    "reasoning_history": [{"role": "user", "content": "2+2?"},
                          {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
                          {"role": "user", "content": "and 3+3?"}],
    "tool_calls": [{"role": "user", "content": "Weather and time in Paris?"},
                   {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL, TOOL_CALL_2]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                   {"role": "tool", "tool_call_id": "call_2", "content": "10:00"},
                   {"role": "assistant", "content": "Sunny, 10:00."},
                   {"role": "user", "content": "Thanks"}],
    "tool_last": [{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "rain"}],
    "unicode": [{"role": "user", "content": "Ünïcödé ✓ 你好 \t tabs \"quotes\" 'single' {{ not jinja }}"}],
    "empty_content": [{"role": "user", "content": ""}],
    "assistant_last": [{"role": "user", "content": "Say hi"},
                       {"role": "assistant", "content": "hi"}],
}
KWARGS = [{}, {"thinking": True}]


def tokenizer_for(template, special):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), **special)
    tok.chat_template = template
    return tok


def render(tok, messages, add_generation_prompt, kwargs):
    try:
        text = tok.apply_chat_template(messages, tokenize=False,
                                       add_generation_prompt=add_generation_prompt, **kwargs)
        return {"rendered": text}
    except Exception as e:  # noqa: BLE001 - the error is the expected outcome
        return {"error": f"{type(e).__name__}: {e}"}


def special_tokens(config):
    out = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        v = config.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    return out


def main():
    import transformers
    cases = []
    templates = {}
    for name in DEEPSEEK:
        path = os.path.join(HERE, name, "tokenizer_config.json")
        if not os.path.exists(path):
            sys.exit(f"{path} missing: run tools/fetch_deepseek_tokenizers.sh first")
        config = json.load(open(path, encoding="utf-8"))
        template = config["chat_template"]
        special = special_tokens(config)
        templates[name] = {"sha256": hashlib.sha256(template.encode()).hexdigest(),
                           "special_tokens": special}
        tok = tokenizer_for(template, special)
        for conv_name, messages in CONVERSATIONS.items():
            for agp in (False, True):
                for kwargs in KWARGS:
                    case = {"template": name, "conversation": conv_name,
                            "add_generation_prompt": agp, "kwargs": kwargs}
                    case.update(render(tok, messages, agp, kwargs))
                    cases.append(case)
    constructs = json.load(open(os.path.join(HERE, "constructs.json"), encoding="utf-8"))
    for c in constructs:
        special = c.get("special_tokens", {"bos_token": "<s>", "eos_token": "</s>"})
        tok = tokenizer_for(c["template"], special)
        messages = c.get("messages", CONVERSATIONS["multi_turn"])
        case = {"template": "constructs/" + c["name"], "messages": messages,
                "add_generation_prompt": c.get("add_generation_prompt", True),
                "kwargs": c.get("kwargs", {}), "special_tokens": special}
        case.update(render(tok, messages, case["add_generation_prompt"], case["kwargs"]))
        cases.append(case)
    out = {"made_by": f"tools/make_chat_template_fixtures.py with transformers {transformers.__version__}",
           "conversations": CONVERSATIONS, "templates": templates, "cases": cases}
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases ({sum('error' in c for c in cases)} expected errors)")


if __name__ == "__main__":
    main()
