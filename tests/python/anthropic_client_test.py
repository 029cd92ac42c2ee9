#!/usr/bin/env python3
"""The real `anthropic` Python client, and curl, against the router's Anthropic Messages API.

A router (--http-port 0, an API key file, a chat template that renders every message), a prefill
and a decode worker on loopback with the demo model. Run by run_anthropic_client_test.sh, which
installs `anthropic` from PyPI into a venv (the test skips with a message when PyPI cannot be
reached). Checks: messages.create (the demo model's answer with stop_reason end_turn, max_tokens,
stop_sequences with stop_sequence; the same text and token counts as /v1/chat/completions; a
system prompt counted as chat's system message), messages.stream (text deltas make the final
message, its usage the unstreamed one's), messages.count_tokens equal to the call's
usage.input_tokens (+ cache reads) and to /tokenize's count of the chat messages it stands for, a
tool use round trip (a forced tool_use block with a toolu_ id and a dict input, streamed the same;
given back with its tool_result), thinking blocks, errors as the client's exception types
(BadRequestError naming the field, NotFoundError, AuthenticationError), the API key as x-api-key
and as auth_token (Bearer), and docs/api.md's curl example as written.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import anthropic

import http_harness
from http_harness import MODEL_DIR, HttpCluster, check

API_KEY = "anthropic-test-key-0123456789abcdef"
# The demo model was trained on bare prompts ("count from 17:"), so the last user message is
# rendered bare; the rest of the conversation (system, tool section, calls, results) before it in
# brackets, so counts see every message. A `thinking` kwarg opens <think>.
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if loop.last and m.role == 'user' %}{{ m.content }}"
    "{% else %}[{{ m.role }}: {% if m.content %}{{ m.content }}{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %} call {{ c.function.name }}({{ c.function.arguments }})"
    "{% endfor %}{% endif %}]{% endif %}{% endfor %}"
    "{% if add_generation_prompt and thinking is defined and thinking %}<think>\n{% endif %}")
# Strict, with an enum: the demo model knows no tools, so the schema alone (structured decoding
# of the forced call) makes it write a complete call, in about 150 tokens of whitespace and JSON.
WEATHER_TOOL = {"name": "get_weather", "description": "The weather in a city now.", "strict": True,
                "input_schema": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                                 "required": ["city"], "additionalProperties": False}}
GREEDY = {"temperature": 0}  # sampling parameters go in extra_body with this client


def http_post_json(url, body, timeout=30):
    return http_harness.http_post_json(url, body, timeout, headers={"Authorization": f"Bearer {API_KEY}"})


def expect_error(call, error_class, says, what):
    try:
        call()
    except error_class as e:
        message = e.body["error"]["message"] if isinstance(e.body, dict) else str(e.body)
        check(e.body["type"] == "error" and says in message, f"{what}: {error_class.__name__} saying {says!r}")
        return e
    raise AssertionError(f"{what}: no {error_class.__name__}")


def tokenized(base, messages, **fields):
    """/tokenize's count of chat `messages` (the server's template)."""
    status, t = http_post_json(base + "/tokenize", dict(model="demo", messages=messages, **fields))
    check(status == 200, f"/tokenize answers ({t.get('count') if status == 200 else t})")
    return t["count"]


def run_text_checks(client, base, demo):
    user = [{"role": "user", "content": demo["prompt"]}]
    m = client.messages.create(model="demo", max_tokens=64, messages=user, extra_body=GREEDY)
    check(m.type == "message" and m.role == "assistant" and m.id.startswith("msg_") and m.model == "demo",
          f"a Message ({m.id})")
    check([b.type for b in m.content] == ["text"] and m.content[0].text == demo["answer"],
          f"the demo model's answer: {m.content[0].text!r}")
    check(m.stop_reason == "end_turn" and m.stop_sequence is None, f"stop_reason end_turn ({m.stop_reason})")
    check(m.usage.output_tokens == len(demo["answer_ids"]), f"output_tokens count EOS too ({m.usage.output_tokens})")
    check(m.usage.cache_read_input_tokens == 0 and m.usage.cache_creation_input_tokens == 0
          and m.usage.input_tokens == len(demo["prompt_ids"]), f"usage of a fresh prompt ({m.usage})")
    counted = client.messages.count_tokens(model="demo", messages=user)
    check(counted.input_tokens == m.usage.input_tokens, f"count_tokens equals usage.input_tokens ({counted})")

    status, chat = http_post_json(base + "/v1/chat/completions",
                                  dict(model="demo", max_tokens=64, temperature=0, messages=user))
    check(status == 200 and chat["choices"][0]["message"]["content"] == m.content[0].text
          and chat["usage"]["prompt_tokens"] == m.usage.input_tokens + m.usage.cache_read_input_tokens
          and chat["usage"]["completion_tokens"] == m.usage.output_tokens, "the same answer and counts as chat")

    cut = client.messages.create(model="demo", max_tokens=5, messages=user, extra_body=GREEDY)
    check(cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 5
          and demo["answer"].startswith(cut.content[0].text), f"max_tokens: {cut.content[0].text!r}")
    stopped = client.messages.create(model="demo", max_tokens=64, messages=user, stop_sequences=["20", "99"],
                                     extra_body=GREEDY)
    check(stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "20"
          and stopped.content[0].text == demo["answer"].split("20")[0],
          f"stop_sequences: {stopped.content[0].text!r} then {stopped.stop_sequence!r}")

    system = "Count as asked."
    with_system = client.messages.count_tokens(model="demo", system=system, messages=user)
    check(with_system.input_tokens > counted.input_tokens
          and with_system.input_tokens == tokenized(base, [{"role": "system", "content": system}] + user),
          f"a system prompt is chat's system message ({with_system.input_tokens} tokens)")
    ms = client.messages.create(model="demo", max_tokens=16, system=[{"type": "text", "text": system}], messages=user,
                                extra_body=GREEDY)
    check(ms.usage.input_tokens + ms.usage.cache_read_input_tokens == with_system.input_tokens,
          "system as text blocks: counted the same")
    return m


def run_stream_checks(client, m):
    user = [{"role": "user", "content": "count from 17:"}]
    with client.messages.stream(model="demo", max_tokens=64, messages=user, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    check(text == m.content[0].text and final.content[0].text == text, f"streamed text deltas make the message: {text!r}")
    check(final.stop_reason == "end_turn" and final.usage.output_tokens == m.usage.output_tokens
          and final.usage.input_tokens + final.usage.cache_read_input_tokens
          == m.usage.input_tokens + m.usage.cache_read_input_tokens, f"streamed final usage ({final.usage})")
    types = [e.type for e in client.messages.create(model="demo", max_tokens=4, messages=user, stream=True,
                                                    extra_body=GREEDY)]
    check(types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
          and types[1] == "content_block_start" and types[-3] == "content_block_stop",
          f"stream=True events in Anthropic's order: {types}")


def run_tool_checks(client, base):
    ask = [{"role": "user", "content": "count from 17:"}]
    forced = {"type": "tool", "name": "get_weather"}
    m = client.messages.create(model="demo", max_tokens=200, messages=ask, tools=[WEATHER_TOOL], tool_choice=forced,
                               extra_body=GREEDY)
    uses = [b for b in m.content if b.type == "tool_use"]
    check(len(uses) == 1 and uses[0].name == "get_weather" and uses[0].id.startswith("toolu_")
          and isinstance(uses[0].input, dict), f"a forced tool_use block: {uses}")
    check(m.stop_reason == "tool_use", f"stop_reason of a complete call: {m.stop_reason}")
    check(uses[0].input in ({"city": "Paris"}, {"city": "Rome"}), f"the input holds to the schema: {uses[0].input}")
    with client.messages.stream(model="demo", max_tokens=200, messages=ask, tools=[WEATHER_TOOL], tool_choice=forced,
                                extra_body=GREEDY) as stream:
        streamed = stream.get_final_message()
    s_uses = [b for b in streamed.content if b.type == "tool_use"]
    check(len(s_uses) == 1 and s_uses[0].name == "get_weather" and streamed.stop_reason == "tool_use"
          and s_uses[0].input == uses[0].input, f"streamed input_json deltas make the same input: {s_uses[0].input}")
    cut = client.messages.create(model="demo", max_tokens=8, messages=ask, tools=[WEATHER_TOOL], tool_choice=forced,
                                 extra_body=GREEDY)
    check(cut.stop_reason == "max_tokens" and cut.content[0].type == "tool_use" and cut.content[0].input == {},
          "a call cut before its object: max_tokens, input {}")

    # The round trip: the call given back, its result, and a question.
    turn = [{"role": "user", "content": "Weather in Paris?"}, m.to_param(),
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"},
                                         {"type": "text", "text": "count from 17:"}]}]
    answer = client.messages.create(model="demo", max_tokens=16, messages=turn, tools=[WEATHER_TOOL],
                                    extra_body=GREEDY)
    check(answer.stop_reason in ("end_turn", "max_tokens") and all(b.type == "text" for b in answer.content),
          f"the round trip answers ({answer.stop_reason})")
    counted = client.messages.count_tokens(model="demo", messages=turn, tools=[WEATHER_TOOL])
    check(counted.input_tokens == answer.usage.input_tokens + answer.usage.cache_read_input_tokens,
          f"count_tokens of the round trip equals its usage ({counted.input_tokens})")
    text = "".join(b.text for b in m.content if b.type == "text")
    chat_messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": text or None,
         "tool_calls": [{"id": uses[0].id, "type": "function",
                         "function": {"name": "get_weather", "arguments": uses[0].input}}]},
        {"role": "tool", "tool_call_id": uses[0].id, "content": "sunny"},
        {"role": "user", "content": "count from 17:"}]
    chat_tools = [{"type": "function", "function": {"name": WEATHER_TOOL["name"], "description":
                   WEATHER_TOOL["description"], "parameters": WEATHER_TOOL["input_schema"], "strict": True}}]
    check(counted.input_tokens == tokenized(base, chat_messages, tools=chat_tools),
          "the round trip is counted as chat's messages with tool_calls and a tool result")


def run_thinking_checks(client):
    user = [{"role": "user", "content": "count from 17:"}]
    m = client.messages.create(model="demo", max_tokens=12, messages=user, thinking={"type": "adaptive"},
                               extra_body=GREEDY)
    check(m.content and m.content[0].type == "thinking" and m.content[0].thinking and m.content[0].signature == "",
          f"thinking on: a thinking block first ({m.content[0].type})")
    with client.messages.stream(model="demo", max_tokens=12, messages=user, thinking={"type": "adaptive"},
                                extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    check([b.model_dump() for b in final.content] == [b.model_dump() for b in m.content],
          "streamed thinking deltas make the same blocks")
    off = client.messages.create(model="demo", max_tokens=64, messages=user, thinking={"type": "disabled"},
                                 extra_body=GREEDY)
    check([b.type for b in off.content] == ["text"], "thinking disabled: text only")


def run_error_checks(client, base):
    user = [{"role": "user", "content": "x"}]
    e = expect_error(lambda: client.messages.create(model="demo", max_tokens=8, messages=user,
                                                    extra_body={"frequency_penalty": 1}),
                     anthropic.BadRequestError, "frequency_penalty: Extra inputs are not permitted", "an unknown field")
    check(e.status_code == 400 and e.body["error"]["type"] == "invalid_request_error", "400 invalid_request_error")
    expect_error(lambda: client.messages.create(model="demo", max_tokens=8, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]),
                 anthropic.BadRequestError, "'image'", "an image block")
    expect_error(lambda: client.messages.create(model="demo", max_tokens=8, messages=user,
                                                tools=[{"type": "web_search_20250305", "name": "web_search"}]),
                 anthropic.BadRequestError, "'web_search_20250305'", "a server tool")
    expect_error(lambda: client.messages.create(model="demo", max_tokens=8, messages=user,
                                                extra_body={"temperature": 2}),
                 anthropic.BadRequestError, "temperature", "temperature above 1")
    e = expect_error(lambda: client.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=user),
                     anthropic.NotFoundError, "claude-sonnet-4-5", "another model")
    check(e.body["error"]["type"] == "not_found_error", "404 not_found_error")
    wrong = anthropic.Anthropic(base_url=base, api_key="wrong-key-0123456789", max_retries=0, timeout=60)
    e = expect_error(lambda: wrong.messages.create(model="demo", max_tokens=8, messages=user),
                     anthropic.AuthenticationError, "x-api-key", "a wrong key")
    check(e.body["error"]["type"] == "authentication_error", "401 authentication_error")
    bearer = anthropic.Anthropic(base_url=base, api_key=None, auth_token=API_KEY, max_retries=0, timeout=60)
    m = bearer.messages.create(model="demo", max_tokens=4, messages=user, extra_body=GREEDY)
    check(m.usage.output_tokens == 4, "auth_token (Authorization: Bearer) is accepted too")


def run_curl_example(base):
    """Runs the curl command between the anthropic-curl-example markers of docs/api.md."""
    doc = open("docs/api.md").read()
    block = doc.split("<!-- anthropic-curl-example -->")[1].split("<!-- /anthropic-curl-example -->")[0]
    cmd = re.sub(r"\\\n\s*", " ", block.replace("```sh", "").replace("```", "")).strip()
    cmd = cmd.replace("localhost:8080", base.replace("http://", ""))
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, MLASERVE_API_KEY=API_KEY))
    check(out.returncode == 0, "the curl example exits 0")
    body = json.loads(out.stdout)
    check(body.get("type") == "message" and body["content"][0]["type"] == "text",
          f"the curl example gets a message: {out.stdout[:100]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router-bin", required=True)
    ap.add_argument("--prefill-bin", required=True)
    ap.add_argument("--decode-bin", required=True)
    args = ap.parse_args()
    logs = tempfile.mkdtemp(prefix="mlaserve-anthropic-test-")
    with open(f"{logs}/api.keys", "w") as f:
        f.write(API_KEY + "\n")
    with open(f"{logs}/template.jinja", "w") as f:
        f.write(TEMPLATE)
    with open(os.path.join(MODEL_DIR, "demo_prompts.json")) as f:
        demo = next(p for p in json.load(f)["prompts"] if p["prompt"] == "count from 17:")
    flags = ["--metrics-port", "-1", "--chat-template", f"{logs}/template.jinja", "--api-key-file", f"{logs}/api.keys"]
    with HttpCluster(args, logs, flags) as cluster:
        base = cluster.base
        client = anthropic.Anthropic(base_url=base, api_key=API_KEY, max_retries=0, timeout=60)
        m = run_text_checks(client, base, demo)
        run_stream_checks(client, m)
        run_tool_checks(client, base)
        run_thinking_checks(client)
        run_error_checks(client, base)
        run_curl_example(base)
        print("anthropic_client_test: all checks passed")

if __name__ == "__main__":
    sys.exit(main())
