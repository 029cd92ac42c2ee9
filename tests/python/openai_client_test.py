#!/usr/bin/env python3
"""The real `openai` Python client, and curl, against the router's OpenAI HTTP API.

A router (--http-port 0), a prefill and a decode worker on loopback with the demo model.
Run by run_openai_client_test.sh, which installs `openai` from PyPI into a venv (the test
skips with a message when PyPI cannot be reached). Checks: models, completions and chat,
streamed and not, with the same text and usage; OpenAI-shaped errors as the client's
exception types; logprobs (completions and chat, streamed and not), presence / frequency
penalties and logit_bias held to their semantics; prompt logprobs (echo + logprobs + max_tokens 0
on token ids, as lm-eval-harness asks: a greedy continuation scored as prompt equals its generation
logprobs; vLLM's prompt_logprobs on both endpoints); tool calls in the client's types (a named
tool_choice's arguments held to the tool's parameters schema); JSON mode;
structured outputs (response_format json_schema, answers parsed with json and validated with
jsonschema, streamed the same; the SDK's parse() helper with a Pydantic model); vLLM's
/tokenize and /detokenize (with urllib: the counts equal the requests' usage); the Responses API
(client.responses.create / stream / parse / retrieve / delete: the same answers and usage as chat,
instructions and input items counted as the chat's messages, previous_response_id, a tool round
trip, text.format json_schema judged by jsonschema, max_output_tokens incomplete, streamed deltas
making the final text); a client that closes a stream mid-way is
aborted (router metric) and its pages freed; the curl examples of docs/api.md run as written.
"""
import argparse
import functools
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request

import jsonschema
import openai

from http_harness import MODEL_DIR, HttpCluster, check, http_get, http_post_json



def metric(router_log, name):
    with open(router_log) as f:
        m = re.search(r"metrics on (http://\S+/metrics)", f.read())
    status, body = http_get(m.group(1))
    v = re.search(rf"^{name} (\S+)$", body, re.M)
    return float(v.group(1))


def run_checks(client, base, router_log):
    models = client.models.list()
    check([m.id for m in models.data] == ["demo"], "models.list() names the demo model")

    c = client.completions.create(model="demo", prompt="count from 17:", max_tokens=12, temperature=0)
    text = c.choices[0].text
    check("17 18 19" in text, f"completion counts: {text!r}")
    check(c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens == c.usage.prompt_tokens + 12,
          f"completion usage {c.usage}")
    check(c.choices[0].finish_reason == "length", "finish_reason length")

    pieces, usage = [], None
    for chunk in client.completions.create(model="demo", prompt="count from 17:", max_tokens=12,
                                           temperature=0, stream=True,
                                           stream_options={"include_usage": True}):
        if chunk.choices:
            pieces.append(chunk.choices[0].text)
        if chunk.usage is not None:
            usage = chunk.usage
    check("".join(pieces) == text, "streamed completion equals the unstreamed one")
    check(usage is not None and usage.model_dump() == c.usage.model_dump(), "streamed usage equals")

    chat = client.chat.completions.create(model="demo", max_tokens=12, temperature=0,
                                          messages=[{"role": "user", "content": "count from 17:"}])
    check(chat.choices[0].message.role == "assistant", "chat role")
    check(chat.choices[0].message.content == text, "chat through the demo template equals the completion")
    check(chat.usage.prompt_tokens == c.usage.prompt_tokens, "chat prompt tokens equal (one BOS)")
    run_tokenize_checks(base, c, chat)
    run_continue_final_message_checks(client, base)
    run_request_chat_template_checks(client, base)

    deltas = []
    for chunk in client.chat.completions.create(model="demo", max_tokens=12, temperature=0, stream=True,
                                                messages=[{"role": "user", "content": "count from 17:"}]):
        if chunk.choices and chunk.choices[0].delta.content:
            deltas.append(chunk.choices[0].delta.content)
    check("".join(deltas) == text, "streamed chat equals")

    try:
        client.completions.create(model="gpt-4", prompt="x")
        check(False, "unknown model refused")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and e.body["code"] == "model_not_found", "unknown model: NotFoundError 404")
    many = client.chat.completions.create(model="demo", n=3, max_tokens=12, temperature=0,
                                          messages=[{"role": "user", "content": "count from 17:"}])
    check([ch.index for ch in many.choices] == [0, 1, 2] and all(ch.message.content == text for ch in many.choices),
          "n=3: three greedy choices, indexed")
    check(many.usage.prompt_tokens == chat.usage.prompt_tokens and many.usage.completion_tokens == 3 * 12,
          f"n=3 usage: prompt once, completions summed ({many.usage})")
    streamed = {}
    for chunk in client.completions.create(model="demo", prompt="count from 17:", max_tokens=12, temperature=0,
                                           n=2, stream=True):
        for ch in chunk.choices:
            streamed[ch.index] = streamed.get(ch.index, "") + ch.text
    check(streamed == {0: text, 1: text}, "n=2 streamed: each choice's text under its index")
    batch = client.completions.create(model="demo", prompt=["count from 17:", "count from 17:"], max_tokens=12,
                                      temperature=0)
    check([ch.index for ch in batch.choices] == [0, 1] and all(ch.text == text for ch in batch.choices)
          and batch.usage.prompt_tokens == 2 * c.usage.prompt_tokens, f"two prompts in one request ({batch.usage})")
    try:
        client.chat.completions.create(model="demo", n=17, messages=[{"role": "user", "content": "x"}])
        check(False, "n=17 refused")
    except openai.BadRequestError as e:
        check(e.body["param"] == "n", "n=17: BadRequestError naming n")
    try:
        client.completions.create(model="demo", prompt="x", temperature=-1)
        check(False, "temperature -1 refused")
    except openai.BadRequestError as e:
        check("temperature -1 is out of range" in e.message, f"router validation message: {e.message}")

    run_demanding_client_checks(client, text)
    run_sampling_knob_checks(client, text)
    run_prompt_logprobs_checks(client, base)
    run_tool_call_checks(client)
    run_json_mode_checks(client)
    run_json_schema_checks(client)
    run_responses_checks(client, base, text, chat)
    run_responses_shape_checks(base)

    aborted = metric(router_log, "mlaserve_router_requests_aborted_total")
    stream = client.completions.create(model="demo", prompt="count from 1:", max_tokens=1000,
                                       stream=True, extra_body={"ignore_eos": True})
    first = next(iter(stream))
    check(first.choices[0].text is not None, "a long stream started")
    stream.close()
    deadline = time.monotonic() + 30
    while metric(router_log, "mlaserve_router_requests_aborted_total") < aborted + 1:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)  # polling a metric against a deadline
    check(metric(router_log, "mlaserve_router_requests_aborted_total") == aborted + 1,
          "closing the stream aborted the request")
    # The abort counter and the running gauge are two updates: wait for the gauge too.
    deadline = time.monotonic() + 30
    while metric(router_log, "mlaserve_router_requests_running") != 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # polling a metric against a deadline
    running = metric(router_log, "mlaserve_router_requests_running")
    check(running == 0, "no request left running")


def run_tokenize_checks(base, completion, chat):
    """vLLM's /tokenize and /detokenize with the demo tokenizer: the counts are what the
    completion and the chat reported as usage.prompt_tokens for the same prompt."""
    user = [{"role": "user", "content": "count from 17:"}]
    status, t = http_post_json(base + "/tokenize", {"model": "demo", "messages": user})
    check(status == 200 and t["count"] == len(t["tokens"]) == chat.usage.prompt_tokens,
          f"/tokenize messages counts the chat's prompt tokens ({t})")
    _, models = http_get(base + "/v1/models")
    card = json.loads(models)["data"][0]
    check(t["max_model_len"] == card["max_model_len"], "/tokenize gives the model's context")
    status, p = http_post_json(base + "/tokenize", {"prompt": "count from 17:", "return_token_strs": True})
    check(status == 200 and p["count"] == completion.usage.prompt_tokens and p["tokens"] == t["tokens"],
          "/tokenize prompt counts the completion's prompt tokens (the demo template adds nothing but BOS)")
    check(len(p["token_strs"]) == p["count"] and "".join(p["token_strs"][1:]) == "count from 17:",
          f"token_strs spell the text ({p['token_strs']})")
    status, bare = http_post_json(base + "/tokenize", {"prompt": "count from 17:", "add_special_tokens": False})
    check(status == 200 and bare["tokens"] == p["tokens"][1:], "add_special_tokens false drops the BOS")
    status, d = http_post_json(base + "/detokenize", {"model": "demo", "tokens": bare["tokens"]})
    check(status == 200 and d == {"prompt": "count from 17:"}, f"/detokenize round-trips ({d})")
    status, d = http_post_json(base + "/detokenize", {"tokens": p["tokens"]})
    check(status == 200 and d["prompt"].endswith("count from 17:") and d["prompt"] != "count from 17:",
          f"/detokenize keeps special tokens, as vLLM ({d['prompt']!r})")
    vocab = card["mlaserve"]["vocab_size"]
    status, e = http_post_json(base + "/detokenize", {"tokens": [1, vocab]})
    check(status == 400 and e["error"]["param"] == "tokens" and str(vocab) in e["error"]["message"],
          f"/detokenize of an id outside the vocabulary: 400 naming tokens ({e['error']['message']})")
    status, e = http_post_json(base + "/tokenize", {"model": "gpt-4", "prompt": "x"})
    check(status == 404 and e["error"]["code"] == "model_not_found", "/tokenize of another model: 404")


def run_continue_final_message_checks(client, base):
    """vLLM's continue_final_message. The demo template renders a chat as BOS and its last user
    message, so continuing a final user message is the completion of its text; a final assistant
    message is not rendered, so it cannot be continued (a 400 naming the parameter)."""
    prefix = "count from 17: 17 18"
    completion = client.completions.create(model="demo", prompt=prefix, max_tokens=12, temperature=0)
    cont = {"continue_final_message": True, "add_generation_prompt": False}
    chat = client.chat.completions.create(model="demo", max_tokens=12, temperature=0, extra_body=cont,
                                          messages=[{"role": "user", "content": prefix}])
    answer = chat.choices[0].message.content
    check(answer == completion.choices[0].text and chat.usage.prompt_tokens == completion.usage.prompt_tokens,
          f"continue_final_message: the chat continues the message as the completion does ({answer!r})")
    check(answer.lstrip().startswith("19"), f"continue_final_message: the count goes on ({answer!r})")
    status, t = http_post_json(base + "/tokenize", {"messages": [{"role": "user", "content": prefix}], **cont})
    check(status == 200 and t["count"] == chat.usage.prompt_tokens,
          f"/tokenize with continue_final_message counts the chat's prompt tokens ({t})")
    for extra, what in (({**cont}, "the template drops the final assistant message"),
                        ({"continue_final_message": True}, "add_generation_prompt defaults to true")):
        try:
            client.chat.completions.create(model="demo", max_tokens=4, extra_body=extra,
                                           messages=[{"role": "user", "content": "count from 17:"},
                                                     {"role": "assistant", "content": "17 18"}])
            check(False, f"continue_final_message refused: {what}")
        except openai.BadRequestError as e:
            check(e.body["param"] == "continue_final_message",
                  f"continue_final_message refused, {what}: {e.message}")


def run_request_chat_template_checks(client, base):
    """vLLM's request-level chat_template (extra_body; the router runs with
    --trust-request-chat-template). This one writes the first message and then " 17 18" itself,
    so the chat is the completion of "count from 17: 17 18"; one the interpreter refuses is a
    400 naming chat_template with its line."""
    own = "{{ bos_token }}{{ messages[0]['content'] }} 17 18"
    completion = client.completions.create(model="demo", prompt="count from 17: 17 18", max_tokens=12, temperature=0)
    chat = client.chat.completions.create(model="demo", max_tokens=12, temperature=0,
                                          extra_body={"chat_template": own},
                                          messages=[{"role": "user", "content": "count from 17:"}])
    answer = chat.choices[0].message.content
    check(answer == completion.choices[0].text and chat.usage.prompt_tokens == completion.usage.prompt_tokens,
          f"chat_template: the request's template renders the prompt ({answer!r})")
    check(answer.lstrip().startswith("19"), f"chat_template: the count goes on ({answer!r})")
    status, t = http_post_json(base + "/tokenize", {"messages": [{"role": "user", "content": "count from 17:"}],
                                                   "chat_template": own})
    check(status == 200 and t["count"] == chat.usage.prompt_tokens,
          f"/tokenize with chat_template counts the chat's prompt tokens ({t})")
    try:
        client.chat.completions.create(model="demo", max_tokens=4, extra_body={"chat_template": "{% if x %}\nno end"},
                                       messages=[{"role": "user", "content": "hi"}])
        check(False, "chat_template that does not compile refused")
    except openai.BadRequestError as e:
        check(e.body["param"] == "chat_template" and "line" in e.body["message"],
              f"chat_template that does not compile: 400 naming it ({e.message})")


WEATHER_TOOL = {"type": "function",
                "function": {"name": "get_weather", "description": "The weather in a city.",
                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                            "required": ["city"]}}}


def run_tool_call_checks(client):
    """Tool calls as the client's types read them. The demo model knows no tools, so a named
    tool_choice makes the call (the router writes its opening, DeepSeek-V3.1's syntax with
    --tool-call-parser deepseek_v31) and the tool's parameters schema holds its arguments
    (structured outputs), cut by max_tokens or ended by EOS: the shapes are what is checked,
    streamed and not, and complete arguments validate with jsonschema."""
    messages = [{"role": "user", "content": "count from 17:"}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    chat = client.chat.completions.create(model="demo", max_tokens=48, temperature=0, messages=messages,
                                          tools=[WEATHER_TOOL], tool_choice=named)
    message = chat.choices[0].message
    calls = message.tool_calls or []
    check(len(calls) == 1 and calls[0].type == "function" and calls[0].function.name == "get_weather"
          and calls[0].id.startswith("call_") and isinstance(calls[0].function.arguments, str),
          f"a named tool_choice gives the client a tool call: {calls}")
    check(message.content is None, "an answer that only calls a tool has no content")
    check(chat.choices[0].finish_reason in ("length", "tool_calls"),
          f"finish_reason of a call: {chat.choices[0].finish_reason}")
    # The forced call's arguments are held to the tool's parameters schema (cut by max_tokens,
    # its start: 48 tokens pass the at most 32 bytes of whitespace before it).
    arguments_text = calls[0].function.arguments if calls else ""
    if chat.choices[0].finish_reason == "tool_calls":
        jsonschema.validate(json.loads(arguments_text), WEATHER_TOOL["function"]["parameters"])
    else:
        check(arguments_text.lstrip().startswith("{"), f"forced arguments start an object: {arguments_text!r}")
    # Sampled, with the tool strict (no property but "city"): a complete call's arguments
    # validate with jsonschema; a cut one is a prefix of {"city": "..."} (JSON mode alone would
    # allow any key: the demo model writes mostly whitespace and random words).
    strict_tool = {"type": "function", "function": dict(WEATHER_TOOL["function"], strict=True)}
    pieces = [r'\{\s*', '"', 'c', 'i', 't', 'y', '"', r'\s*:\s*', r'"(?:[^"\\]|\\.)*', r'(?:\\$|"\s*)',
              r'\}\s*']
    city_prefix = re.compile(r'\s*' + functools.reduce(lambda rest, p: f"(?:{p}{rest})?", reversed(pieces), ""))
    for seed in range(6):
        sampled = client.chat.completions.create(
            model="demo", max_tokens=64, temperature=1, seed=seed, messages=messages,
            tools=[strict_tool], tool_choice=named)
        sampled_calls = sampled.choices[0].message.tool_calls or []
        check(len(sampled_calls) == 1, f"seed {seed}: one forced call: {sampled_calls}")
        text = sampled_calls[0].function.arguments
        if sampled.choices[0].finish_reason == "tool_calls":
            jsonschema.validate(json.loads(text), dict(WEATHER_TOOL["function"]["parameters"],
                                                       additionalProperties=False))
        else:
            check(city_prefix.fullmatch(text) is not None,
                  f"seed {seed}: cut arguments are a prefix of the strict schema's object: {text!r}")
    arguments, names, ids = "", [], set()
    for chunk in client.chat.completions.create(model="demo", max_tokens=48, temperature=0, messages=messages,
                                                tools=[WEATHER_TOOL], tool_choice=named, stream=True):
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            check(delta.index == 0, "one call, index 0")
            if delta.id is not None:
                ids.add(delta.id)
                names.append(delta.function.name)
            arguments += delta.function.arguments or ""
    check(names == ["get_weather"] and len(ids) == 1, f"streamed: the name once, with an id: {names}")
    check(arguments == calls[0].function.arguments,
          f"streamed arguments equal the unstreamed ones: {arguments!r}")
    # "auto" on a model that answers in text: no calls, the text as content.
    plain = client.chat.completions.create(model="demo", max_tokens=12, temperature=0, messages=messages,
                                           tools=[WEATHER_TOOL])
    check(plain.choices[0].message.tool_calls is None and plain.choices[0].finish_reason == "length"
          and "18 19" in (plain.choices[0].message.content or ""),
          f"tool_choice auto without a call answers in text: {plain.choices[0].message.content!r}")
    expect_bad_request(lambda: client.chat.completions.create(
        model="demo", messages=messages, tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_time"}}), "tool_choice",
        "a tool_choice naming no tool")


def run_json_mode_checks(client):
    """JSON mode (response_format json_object): the answer is a JSON object, or the start of one
    when max_tokens cuts it; streamed the same."""
    messages = [{"role": "user", "content": "count from 17:"}]
    for seed in range(4):
        kwargs = dict(model="demo", max_tokens=48, temperature=1.0, seed=seed, messages=messages,
                      response_format={"type": "json_object"})
        chat = client.chat.completions.create(**kwargs)
        text, finish = chat.choices[0].message.content, chat.choices[0].finish_reason
        if finish == "stop":
            check(isinstance(json.loads(text), dict), f"JSON mode, seed {seed}: a JSON object: {text!r}")
        else:
            check(finish == "length" and text.lstrip().startswith("{"),
                  f"JSON mode, seed {seed}: cut by max_tokens inside an object: {text!r}")
        streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**kwargs, stream=True)
                           if c.choices)
        check(streamed == text, f"JSON mode, seed {seed}: streamed equals unstreamed")
    expect_bad_request(lambda: client.chat.completions.create(
        model="demo", messages=messages, response_format={"type": "json_object"}, extra_body={"ignore_eos": True}),
        "response_format", "JSON mode with ignore_eos")


SCHEMA = {
    "type": "object",
    "properties": {
        "numbers": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
                    "minItems": 1, "maxItems": 3},
        "label": {"enum": ["low", "high"]},
        "note": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]},
    },
    "required": ["numbers", "label", "note"],
    "additionalProperties": False,
}


def run_json_schema_checks(client):
    """Structured outputs (response_format json_schema): a finished answer parses with json and
    validates with jsonschema, with its keys in the schema's order; a cut one is its prefix;
    streamed the same; a schema we cannot enforce is a 400 naming the keyword."""
    messages = [{"role": "user", "content": "count from 17:"}]
    response_format = {"type": "json_schema",
                       "json_schema": {"name": "numbers", "strict": True, "schema": SCHEMA}}
    # The demo model likes whitespace: banned, so that the bounded answers finish.
    finished = 0
    for seed in range(5):
        kwargs = dict(model="demo", max_tokens=80, temperature=1.0, seed=seed, messages=messages,
                      response_format=response_format, logit_bias=whitespace_banned())
        chat = client.chat.completions.create(**kwargs)
        text, finish = chat.choices[0].message.content, chat.choices[0].finish_reason
        if finish == "stop":
            value = json.loads(text)
            jsonschema.validate(value, SCHEMA)
            check(list(value) == ["numbers", "label", "note"],
                  f"json_schema, seed {seed}: keys in the schema's order: {text!r}")
            finished += 1
        else:
            check(finish == "length" and text.startswith("{"),
                  f"json_schema, seed {seed}: cut by max_tokens inside the object: {text!r}")
        streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**kwargs, stream=True)
                           if c.choices)
        check(streamed == text, f"json_schema, seed {seed}: streamed equals unstreamed")
    check(finished >= 3, f"json_schema: {finished} of 5 answers finished and validated")
    # The SDK's structured-output helper: parse() sends a strict json_schema and parses the
    # answer into the model class.
    try:
        import pydantic
    except ImportError:
        pydantic = None
    if pydantic is not None:
        import typing

        class Reading(pydantic.BaseModel):
            value: int = pydantic.Field(ge=0, le=99)
            unit: typing.Literal["cm", "kg"]
        parsed = client.chat.completions.parse(model="demo", max_tokens=60, temperature=1.0, seed=1,
                                               messages=messages, response_format=Reading,
                                               logit_bias=whitespace_banned())
        message = parsed.choices[0].message
        check(isinstance(message.parsed, Reading) and 0 <= message.parsed.value <= 99,
              f"parse() with a Pydantic model: {message.content!r} -> {message.parsed!r}")
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "not": {}}}}
    expect_bad_request(lambda: client.chat.completions.create(
        model="demo", messages=messages, response_format=bad), "response_format.json_schema.schema",
        "a schema with an unsupported keyword")
    expect_bad_request(lambda: client.chat.completions.create(
        model="demo", messages=messages, response_format={"type": "json_schema", "json_schema": {"schema": SCHEMA}}),
        "response_format.json_schema.name", "json_schema without a name")


# The template the Responses checks render requests with (extra_body chat_template): every
# role, content, tool call and tool result, so a request's prompt shows what its items became.
ALL_MESSAGES_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{% if m.content %}{{ m.content }}{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}[{{ c.function.name }}({{ c.function.arguments }})#{{ c.id }}]"
    "{% endfor %}{% endif %}{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}{% endfor %}")
RESPONSES_WEATHER_TOOL = dict(WEATHER_TOOL["function"], type="function")  # the Responses API's flat shape


def tokenized(base, messages, **fields):
    """/tokenize's count of `messages` rendered with ALL_MESSAGES_TEMPLATE."""
    status, t = http_post_json(base + "/tokenize", dict(messages=messages, chat_template=ALL_MESSAGES_TEMPLATE,
                                                         **fields))
    check(status == 200, f"/tokenize answers ({t['count'] if status == 200 else t})")
    return t["count"]


def run_responses_checks(client, base, counted, chat):
    """OpenAI's Responses API (client.responses.*): a response is the chat completion of its
    items, its text, usage and status as chat's; the stream's deltas make the final text; stored
    responses continue with previous_response_id; tools round-trip; text.format holds the answer
    to a schema. `counted`: the demo model's 12-token answer to "count from 17:"; `chat`: that
    chat completion."""
    r = client.responses.create(model="demo", input="count from 17:", max_output_tokens=12, temperature=0)
    check(r.object == "response" and r.id.startswith("resp_") and r.model == "demo", f"a response object ({r.id})")
    check(r.output_text == counted and r.output[0].type == "message" and r.output[0].role == "assistant"
          and r.output[0].content[0].annotations == [], f"responses.create answers as chat does ({r.output_text!r})")
    check(r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
          and r.output[0].status == "incomplete", f"cut by max_output_tokens: incomplete ({r.status})")
    check(r.usage.input_tokens == chat.usage.prompt_tokens and r.usage.output_tokens == 12
          and r.usage.total_tokens == r.usage.input_tokens + 12 and r.usage.output_tokens_details.reasoning_tokens == 0,
          f"responses usage ({r.usage})")
    full = client.responses.create(model="demo", input="count from 17:", max_output_tokens=64, temperature=0)
    check(full.status == "completed" and full.incomplete_details is None and full.output_text.startswith(counted),
          f"an answer that ends by itself: completed ({full.output_text!r})")

    # instructions and a list of message items: what the chat template is given (the request's
    # own template, through extra_body, renders them all; /tokenize counts the same messages).
    own = {"chat_template": ALL_MESSAGES_TEMPLATE}
    listed = client.responses.create(
        model="demo", instructions="Count.", max_output_tokens=4, temperature=0, extra_body=own,
        input=[{"role": "developer", "content": "In digits."},
               {"role": "user", "content": [{"type": "input_text", "text": "count"},
                                            {"type": "input_text", "text": "from 17:"}]}])
    expected = tokenized(base, [{"role": "system", "content": "Count."}, {"role": "system", "content": "In digits."},
                                {"role": "user", "content": "count\nfrom 17:"}])
    check(listed.instructions == "Count." and listed.usage.input_tokens == expected,
          f"instructions and input items are the chat's messages ({listed.usage.input_tokens} vs {expected})")
    plain = client.responses.create(model="demo", input=[{"role": "user", "content": "count from 17:"}],
                                    instructions="Count.", max_output_tokens=12, temperature=0)
    check(plain.output_text == counted, "instructions reach the demo template (which shows the last user message)")

    # previous_response_id: the stored turn comes before the new input.
    again = client.responses.create(model="demo", input="count from 17:", previous_response_id=r.id,
                                    max_output_tokens=12, temperature=0, extra_body=own)
    expected = tokenized(base, [{"role": "user", "content": "count from 17:"},
                                {"role": "assistant", "content": counted},
                                {"role": "user", "content": "count from 17:"}])
    check(again.previous_response_id == r.id and again.usage.input_tokens == expected,
          f"previous_response_id continues the stored conversation ({again.usage.input_tokens} vs {expected})")
    got = client.responses.retrieve(r.id)
    check(got.id == r.id and got.output_text == r.output_text and got.usage.output_tokens == 12,
          "responses.retrieve returns the stored response")
    client.responses.delete(r.id)
    for call, what in ((lambda: client.responses.retrieve(r.id), "a deleted response"),
                       (lambda: client.responses.create(model="demo", input="x", previous_response_id=r.id),
                        "previous_response_id of a deleted response")):
        try:
            call()
            check(False, f"{what} is gone")
        except openai.NotFoundError as e:
            check(e.status_code == 404 and r.id in e.body["message"], f"{what}: NotFoundError naming it")
    unstored = client.responses.create(model="demo", input="x", max_output_tokens=2, store=False)
    try:
        client.responses.retrieve(unstored.id)
        check(False, "store=False keeps nothing")
    except openai.NotFoundError:
        check(True, "store=False keeps nothing")

    # Streamed: the helper's events, deltas making the final text, the final usage.
    deltas, types = [], []
    with client.responses.stream(model="demo", input="count from 17:", max_output_tokens=64, temperature=0) as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    check("".join(deltas) == final.output_text == full.output_text and len(deltas) > 1,
          f"responses.stream: the deltas make the final text ({len(deltas)} deltas)")
    check(types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed",
          f"responses.stream event order ({types[:4]} ... {types[-3:]})")
    check((final.usage.input_tokens, final.usage.output_tokens) == (full.usage.input_tokens, full.usage.output_tokens),
          f"streamed usage equals the unstreamed ({final.usage})")
    events = list(client.responses.create(model="demo", input="count from 17:", max_output_tokens=5, temperature=0,
                                          stream=True))
    check([e.sequence_number for e in events] == list(range(len(events))), "stream=True: events numbered in order")
    check(events[-1].type == "response.incomplete" and events[-1].response.usage.output_tokens == 5
          and "".join(e.delta for e in events if e.type == "response.output_text.delta")
          == events[-1].response.output_text, "stream=True cut by max_output_tokens ends with response.incomplete")

    # A tool round trip: the forced call (as chat's), then its output with previous_response_id.
    named = {"type": "function", "name": "get_weather"}
    called = client.responses.create(model="demo", input="count from 17:", tools=[RESPONSES_WEATHER_TOOL],
                                     tool_choice=named, max_output_tokens=48, temperature=0)
    chat_call = client.chat.completions.create(
        model="demo", max_tokens=48, temperature=0, messages=[{"role": "user", "content": "count from 17:"}],
        tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = [item for item in called.output if item.type == "function_call"]
    check(len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_")
          and calls[0].arguments == chat_call.choices[0].message.tool_calls[0].function.arguments,
          f"a named tool_choice: a function_call item with chat's arguments ({calls})")
    if called.status == "completed":
        jsonschema.validate(json.loads(calls[0].arguments), WEATHER_TOOL["function"]["parameters"])
    call = calls[0]
    after = client.responses.create(
        model="demo", previous_response_id=called.id, tools=[RESPONSES_WEATHER_TOOL], max_output_tokens=12,
        temperature=0, extra_body=own,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
               {"role": "user", "content": "count from 17:"}])
    expected = tokenized(base, [
        {"role": "user", "content": "count from 17:"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.call_id, "type": "function",
                         "function": {"name": "get_weather", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"},
        {"role": "user", "content": "count from 17:"}], tools=[WEATHER_TOOL])
    check(after.usage.input_tokens == expected,
          f"function_call_output after the stored call: the chat's tool round trip ({after.usage.input_tokens} vs {expected})")
    whole = client.responses.create(
        model="demo", tools=[RESPONSES_WEATHER_TOOL], max_output_tokens=12, temperature=0, store=False,
        input=[{"role": "user", "content": "count from 17:"}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
               {"role": "user", "content": "count from 17:"}])
    check(whole.output_text == counted, f"a round trip sent whole answers the last message ({whole.output_text!r})")

    # text.format json_schema: structured outputs, judged by jsonschema (seed and logit_bias
    # are vLLM's extensions, through extra_body).
    fmt = {"format": {"type": "json_schema", "name": "numbers", "strict": True, "schema": SCHEMA}}
    finished = 0
    for seed in range(4):
        j = client.responses.create(model="demo", input="count from 17:", max_output_tokens=80, temperature=1.0,
                                    text=fmt, extra_body={"seed": seed, "logit_bias": whitespace_banned()})
        if j.status == "completed":
            jsonschema.validate(json.loads(j.output_text), SCHEMA)
            finished += 1
        else:
            check(j.output_text.startswith("{"), f"json_schema, seed {seed}: cut inside the object ({j.output_text!r})")
    check(finished >= 2, f"text.format json_schema: {finished} of 4 answers finished and validated")
    try:
        import pydantic
    except ImportError:
        pydantic = None
    if pydantic is not None:
        import typing

        class Reading(pydantic.BaseModel):
            value: int = pydantic.Field(ge=0, le=99)
            unit: typing.Literal["cm", "kg"]
        parsed = client.responses.parse(model="demo", input="count from 17:", max_output_tokens=60, temperature=1.0,
                                        text_format=Reading, extra_body={"seed": 1, "logit_bias": whitespace_banned()})
        check(isinstance(parsed.output_parsed, Reading), f"responses.parse with a Pydantic model: {parsed.output_text!r}")

    expect_bad_request(lambda: client.responses.create(model="demo", input="x", tools=[{"type": "web_search"}]),
                       "tools", "a built-in tool")
    expect_bad_request(lambda: client.responses.create(model="demo", input="x", background=True), "background",
                       "background true")
    expect_bad_request(lambda: client.responses.create(model="demo", input="x", extra_body={"frobnicate": 1}),
                       "frobnicate", "an unknown Responses field")
    expect_bad_request(lambda: client.responses.create(model="demo", input="x", max_output_tokens=100000),
                       "max_output_tokens", "max_output_tokens past the context")
    try:
        client.responses.create(model="demo", input="x", previous_response_id="resp_unknown")
        check(False, "an unknown previous_response_id refused")
    except openai.NotFoundError as e:
        check(e.body["param"] == "previous_response_id", "an unknown previous_response_id: NotFoundError naming it")


def responses_event_types():
    """The `openai` package's stream event classes by their `type`."""
    import typing
    from openai.types.responses import ResponseStreamEvent
    union = typing.get_args(ResponseStreamEvent)[0] if typing.get_origin(ResponseStreamEvent) is typing.Annotated \
        else ResponseStreamEvent
    return {t: cls for cls in typing.get_args(union) for t in typing.get_args(cls.model_fields["type"].annotation)}


def run_responses_shape_checks(base):
    """The raw JSON of responses and of every streamed event, validated by the `openai` package's
    own pydantic types (the client itself builds its objects unvalidated, so a missing required
    field only shows as a None where the types promise a value)."""
    from openai.types.responses import Response
    event_types = responses_event_types()
    bodies = {
        "a text answer": dict(input="count from 17:", max_output_tokens=12, temperature=0, top_logprobs=2),
        "a forced call": dict(input="count from 17:", max_output_tokens=48, temperature=0,
                              tools=[RESPONSES_WEATHER_TOOL], tool_choice={"type": "function", "name": "get_weather"}),
        # A request template that opens <think>: a reasoning item, then the message.
        "reasoning": dict(input="count from 17:", max_output_tokens=40, temperature=0,
                          chat_template="{% for m in messages %}{{ m.content }}{% endfor %}<think>\n"),
    }
    for what, body in bodies.items():
        status, r = http_post_json(base + "/v1/responses", dict(body, model="demo"))
        check(status == 200, f"{what}: answered" + (f" ({r})" if status != 200 else ""))
        try:
            Response.model_validate(r)
            check(True, f"{what}: the response validates as the client's Response type")
        except Exception as e:  # pydantic.ValidationError, named without importing pydantic
            check(False, f"{what}: the response validates as the client's Response type ({e})")
        request = urllib.request.Request(base + "/v1/responses",
                                         data=json.dumps(dict(body, model="demo", stream=True)).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as sse:
            events = [json.loads(line[len(b"data: "):]) for line in sse.read().split(b"\n") if line.startswith(b"data: ")]
        bad = []
        for e in events:
            try:
                event_types[e["type"]].model_validate(e)
            except Exception as error:
                bad.append(f"{e['type']}: {error}")
        check(events and not bad, f"{what}: all {len(events)} streamed events validate as the client's types {bad}")
        if what == "reasoning":
            check([item["type"] for item in r["output"]] == ["reasoning", "message"]
                  and "response.reasoning_text.delta" in [e["type"] for e in events],
                  f"reasoning: a reasoning item and its events ({[item['type'] for item in r['output']]})")


def expect_bad_request(call, param, what):
    try:
        call()
        check(False, f"{what} refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body["param"] == param and e.body["type"] == "invalid_request_error",
              f"{what}: BadRequestError naming {param} ({e.body['message']})")


def run_demanding_client_checks(client, counted):
    """What a demanding `openai` user sends: each works as OpenAI documents or is a 400 naming
    the parameter (docs/compatibility.md)."""
    user = [{"role": "user", "content": "count from 17:"}]
    # stop: a string or a list; the text before the first stop, finish_reason stop.
    for stop in ("19", ["zzz", "19"]):
        c = client.completions.create(model="demo", prompt="count from 17:", max_tokens=12, temperature=0,
                                      stop=stop)
        check(c.choices[0].text == counted[:counted.index("19")] and c.choices[0].finish_reason == "stop",
              f"stop={stop!r} cuts before it: {c.choices[0].text!r}")
    # max_completion_tokens (chat's current name) bounds the answer like max_tokens.
    chat = client.chat.completions.create(model="demo", max_completion_tokens=5, temperature=0, messages=user)
    check(chat.usage.completion_tokens == 5 and chat.choices[0].finish_reason == "length",
          "max_completion_tokens bounds the chat answer")
    # No max_tokens on chat: no 128-token cut; the demo model ends its count with EOS.
    chat = client.chat.completions.create(model="demo", temperature=0, messages=user)
    check(chat.choices[0].finish_reason == "stop", f"chat without max_tokens ends by itself ({chat.usage})")
    # No max_tokens on completions: OpenAI's default of 16 (or less when EOS comes first).
    c = client.completions.create(model="demo", prompt="count from 1:", temperature=0, extra_body={"ignore_eos": True})
    check(c.usage.completion_tokens == 16, f"completions default max_tokens 16 ({c.usage})")
    # seed: the same seed samples the same text.
    a, b = (client.completions.create(model="demo", prompt="reverse: a b c ->", max_tokens=10, temperature=1.0,
                                      seed=1234).choices[0].text for _ in range(2))
    check(a == b, "seed makes sampling reproducible")
    # Parameters that are off are accepted: user, n=1, zero penalties, text response_format,
    # store false, metadata, service_tier auto, logprobs false.
    chat = client.chat.completions.create(model="demo", max_tokens=4, temperature=0, messages=user, n=1, user="u-1",
                                          presence_penalty=0, frequency_penalty=0, logprobs=False,
                                          response_format={"type": "text"}, store=False,
                                          metadata={"team": "a"}, service_tier="auto")
    check(chat.choices[0].message.content is not None, "off parameters accepted")
    # Streamed chat with include_usage: the last chunk has usage and no choices.
    chunks = list(client.chat.completions.create(model="demo", max_tokens=4, temperature=0, messages=user,
                                                 stream=True, stream_options={"include_usage": True}))
    check(chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
          and all(ch.usage is None for ch in chunks[:-1]), "streamed chat usage in the last chunk only")
    # cache_salt (vLLM's, through extra_body): prefix-cache pages are shared within a salt only.
    # A prompt of 200 token ids: its 3 whole pages are cached, the next one like it reuses them.
    ids = [2 + (i * 37) % 400 for i in range(200)]
    def cached(salt):
        c = client.completions.create(model="demo", prompt=ids, max_tokens=4, temperature=0,
                                      extra_body={"cache_salt": salt, "ignore_eos": True})
        return c.choices[0].text, c.usage.prompt_tokens_details.cached_tokens
    first, again, other = cached("tenant-a"), cached("tenant-a"), cached("tenant-b")
    check(first[1] == 0 and again[1] == 192 and other[1] == 0 and first[0] == again[0] == other[0],
          f"cache_salt: cached tokens 0, then 192 under the same salt, 0 under another ({first}, {again}, {other})")
    expect_bad_request(lambda: client.completions.create(model="demo", prompt="x", extra_body={"cache_salt": 7}),
                       "cache_salt", "a non-string cache_salt")
    expect_bad_request(lambda: client.chat.completions.create(model="demo", messages=user,
                                                              extra_body={"cache_salt": "s" * 257}),
                       "cache_salt", "a cache_salt over 256 bytes")
    # What the engine cannot do is a 400 naming the parameter.
    expect_bad_request(lambda: client.completions.create(model="demo", prompt="x", max_tokens=0), "max_tokens",
                       "max_tokens 0")
    expect_bad_request(lambda: client.chat.completions.create(model="demo", messages=user,
                                                              max_completion_tokens=100000),
                       "max_completion_tokens", "max_completion_tokens past the context")
    expect_bad_request(lambda: client.chat.completions.create(model="demo", messages=user, top_logprobs=2),
                       "top_logprobs", "top_logprobs without logprobs")
    expect_bad_request(lambda: client.completions.create(model="demo", prompt="x", logprobs=21), "logprobs",
                       "completions logprobs 21")
    echoed = client.completions.create(model="demo", prompt="count from 17:", max_tokens=12, temperature=0, echo=True)
    check(echoed.choices[0].text == "count from 17:" + counted and echoed.usage.completion_tokens == 12,
          f"echo: the prompt, then the completion ({echoed.choices[0].text!r})")
    expect_bad_request(lambda: client.completions.create(model="demo", prompt="x", suffix="y"), "suffix", "suffix")
    expect_bad_request(lambda: client.chat.completions.create(model="demo", messages=user, presence_penalty=2.5),
                       "presence_penalty", "presence_penalty 2.5")
    expect_bad_request(lambda: client.chat.completions.create(model="demo", messages=user,
                                                              logit_bias={"100000": 1}),
                       "logit_bias", "logit_bias outside the vocabulary")
    # response_format json_schema (was a 400): served, run_json_schema_checks.
    expect_bad_request(lambda: client.chat.completions.create(
        model="demo", messages=user,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}},
                         "strict": True}),
        "response_format", "response_format json_schema with strict outside json_schema")
    expect_bad_request(lambda: client.chat.completions.create(model="demo", messages=user, stop=[""]), "stop",
                       "empty stop string")
    expect_bad_request(lambda: client.chat.completions.create(model="demo", messages=user, top_p=1.5), "top_p",
                       "top_p 1.5")
    expect_bad_request(lambda: client.chat.completions.create(model="demo", messages=user,
                                                              reasoning_effort="low"),
                       "reasoning_effort", "a parameter this server does not have")
    model = client.models.retrieve("demo")
    check(model.id == "demo" and model.object == "model", "models.retrieve")
    try:
        client.models.retrieve("gpt-4")
        check(False, "unknown model retrieve refused")
    except openai.NotFoundError:
        check(True, "models.retrieve of an unknown model: NotFoundError")


def demo_token_id(token):
    """The demo tokenizer's id of an ASCII token string (byte-level: a space is 'Ġ')."""
    with open(os.path.join(MODEL_DIR, "tokenizer.json")) as f:
        vocab = json.load(f)["model"]["vocab"]
    return vocab[token.replace(" ", "\u0120")]


def whitespace_banned():
    """logit_bias banning the demo tokenizer's whitespace-only tokens (byte-level: Ġ Ċ ĉ č)."""
    with open(os.path.join(MODEL_DIR, "tokenizer.json")) as f:
        vocab = json.load(f)["model"]["vocab"]
    return {str(i): -100 for t, i in vocab.items() if t and all(c in "\u0120\u010a\u0109\u010d" for c in t)}


def run_sampling_knob_checks(client, counted):
    """logprobs / top_logprobs, presence / frequency penalties and logit_bias through the real
    cluster (CPU engine), streamed and not, checked for their semantics (docs/api.md)."""
    prompt = "count from 17:"
    user = [{"role": "user", "content": prompt}]
    # Completions logprobs: greedy, so each sampled token is the most likely one (the values
    # are the raw model's log_softmax), and its dict holds it and the top 3.
    c = client.completions.create(model="demo", prompt=prompt, max_tokens=12, temperature=0, logprobs=3)
    lp = c.choices[0].logprobs
    check(c.choices[0].text == counted and "".join(lp.tokens) == counted and len(lp.tokens) == 12,
          f"completions logprobs: one token string per generated token ({lp.tokens})")
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        if not (val <= 0 and top[tok] == val and max(top.values()) == val and 3 <= len(top) <= 4):
            check(False, f"completions logprobs entry {tok!r} {val} {top}")
    check(lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(12)], "text_offset accumulates")
    streamed_tokens, streamed_values = [], []
    for chunk in client.completions.create(model="demo", prompt=prompt, max_tokens=12, temperature=0, logprobs=3,
                                           stream=True):
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed_tokens += chunk.choices[0].logprobs.tokens
            streamed_values += chunk.choices[0].logprobs.token_logprobs
    check(streamed_tokens == lp.tokens and all(abs(a - b) < 1e-6 for a, b in zip(streamed_values, lp.token_logprobs)),
          "streamed completions logprobs equal the unstreamed ones")
    # Chat logprobs with top_logprobs: sorted, of the requested length, bytes are the token's.
    chat = client.chat.completions.create(model="demo", max_tokens=12, temperature=0, messages=user,
                                          logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    check(len(content) == 12 and "".join(e.token for e in content) == counted, "chat logprobs: one entry per token")
    for e in content:
        if not (len(e.top_logprobs) == 2 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
                and e.top_logprobs[0].token == e.token and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6
                and bytes(e.bytes) == e.token.encode()):
            check(False, f"chat logprobs entry {e}")
    streamed = []
    for chunk in client.chat.completions.create(model="demo", max_tokens=12, temperature=0, messages=user,
                                                logprobs=True, top_logprobs=2, stream=True):
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed += chunk.choices[0].logprobs.content
    check([(e.token, round(e.logprob, 5)) for e in streamed] == [(e.token, round(e.logprob, 5)) for e in content],
          "streamed chat logprobs equal the unstreamed ones")
    # Presence / frequency penalties over the generated tokens, checked with the raw logprobs:
    # each greedy token beats every listed alternative once both are penalised.
    # The demo model is sure of its count (alternatives ~20 nats below): the penalties change a
    # token once a space has been generated about ten times.
    presence, frequency = 2.0, 2.0
    c = client.completions.create(model="demo", prompt="count from 1:", max_tokens=32, temperature=0, logprobs=20,
                                  presence_penalty=presence, frequency_penalty=frequency,
                                  extra_body={"ignore_eos": True})
    lp = c.choices[0].logprobs
    counts = {}
    for tok, top in zip(lp.tokens, lp.top_logprobs):
        penalised = {t: v - (presence + frequency * counts[t] if t in counts else 0.0) for t, v in top.items()}
        if penalised[tok] < max(penalised.values()) - 1e-3:
            check(False, f"penalised greedy token {tok!r} lost to {max(penalised, key=penalised.get)!r}: {penalised}")
        counts[tok] = counts.get(tok, 0) + 1
    plain = client.completions.create(model="demo", prompt="count from 1:", max_tokens=32, temperature=0,
                                      extra_body={"ignore_eos": True}).choices[0].text
    check(c.choices[0].text != plain, f"the penalties change the greedy text ({plain!r} -> {c.choices[0].text!r})")
    check(True, "every penalised greedy token is the argmax of the penalised logprobs")
    # logit_bias: -100 bans the greedy first token, +100 forces a token.
    first = content[0].token
    banned = client.completions.create(model="demo", prompt=prompt, max_tokens=1, temperature=0,
                                       logit_bias={str(demo_token_id(first)): -100}).choices[0].text
    check(banned != first, f"logit_bias -100 bans {first!r} (got {banned!r})")
    forced = client.chat.completions.create(model="demo", max_tokens=3, temperature=0.8, messages=user, seed=5,
                                            logit_bias={str(demo_token_id("Q")): 100})
    check(forced.choices[0].message.content == "QQQ", f"logit_bias +100 forces a token: {forced.choices[0].message.content!r}")


def run_prompt_logprobs_checks(client, base):
    """Prompt logprobs as lm-eval-harness reads them (echo + logprobs + max_tokens 0, on token
    ids) and vLLM's prompt_logprobs: a greedy continuation's logprobs, scored again as prompt
    tokens of prompt + continuation, are the ones it was generated with (same model, other
    chunking: within 2e-3)."""
    status, t = http_post_json(base + "/tokenize", {"model": "demo", "prompt": "count from 17:"})
    check(status == 200, f"/tokenize for the scoring prompt ({t})")
    ids = t["tokens"]
    gen = client.completions.create(model="demo", prompt=ids, max_tokens=4, temperature=0, logprobs=0,
                                    extra_body={"ignore_eos": True})
    cont = [demo_token_id(tok) for tok in gen.choices[0].logprobs.tokens]
    scored = client.completions.create(model="demo", prompt=ids + cont, max_tokens=0, echo=True, logprobs=2)
    choice = scored.choices[0]
    lp = choice.logprobs
    check(len(lp.tokens) == len(ids) + len(cont) and scored.usage.completion_tokens == 0
          and choice.finish_reason == "length", f"echo + max_tokens 0: the prompt alone ({scored.usage})")
    check(lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, "the first prompt token's logprob is null")
    want = gen.choices[0].logprobs.token_logprobs
    got = lp.token_logprobs[len(ids):]
    check(all(abs(a - b) < 2e-3 for a, b in zip(got, want)),
          f"the continuation scored as prompt equals its generation logprobs ({got} vs {want})")
    check(all(len(top) <= 3 for top in lp.top_logprobs[1:]), "each prompt dict: the token and its top 2")
    # vLLM's prompt_logprobs on both endpoints (extra_body), the same values.
    c = client.completions.create(model="demo", prompt=ids + cont, max_tokens=1,
                                  extra_body={"prompt_logprobs": 1})
    plp = c.choices[0].model_extra["prompt_logprobs"]
    check(len(plp) == len(ids) + len(cont) and plp[0] is None, "prompt_logprobs: one per prompt token, null first")
    firsts = [next(iter(d.values())) for d in plp[1:]]
    check(all(abs(f["logprob"] - v) < 1e-6 for f, v in zip(firsts, lp.token_logprobs[1:]))
          and all(f["rank"] >= 1 for f in firsts), "prompt_logprobs' values equal the echoed ones")
    chat = client.chat.completions.create(model="demo", max_tokens=1, messages=[{"role": "user", "content": "hi"}],
                                          extra_body={"prompt_logprobs": 0})
    check(chat.model_extra["prompt_logprobs"][0] is None and len(chat.model_extra["prompt_logprobs"]) ==
          chat.usage.prompt_tokens, "chat prompt_logprobs on the response, one per prompt token")
    expect_bad_request(lambda: client.completions.create(model="demo", prompt="x", stream=True,
                                                         extra_body={"prompt_logprobs": 2}),
                       "prompt_logprobs", "prompt_logprobs with stream")


def run_curl_examples(base):
    """Runs the curl commands between the curl-examples markers of docs/api.md."""
    doc = open("docs/api.md").read()
    block = doc.split("<!-- curl-examples -->")[1].split("<!-- /curl-examples -->")[0]
    commands = re.sub(r"\\\n\s*", " ", block.replace("```sh", "").replace("```", ""))
    ran = 0
    for cmd in re.split(r"\n\s*\n", commands.strip()):
        cmd = " ".join(cmd.split("\n")).replace("localhost:8080", base.replace("http://", ""))
        out = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=60)
        check(out.returncode == 0, f"curl example exits 0: {cmd[:60]}...")
        body = out.stdout
        if "data: " in body:
            events = [l[6:] for l in body.splitlines() if l.startswith("data: ")]
            check(events[-1] == "[DONE]" and all("error" not in json.loads(e) for e in events[:-1]),
                  "streamed example ends with [DONE], no error")
        else:
            check(json.loads(body).get("error") is None, f"example answers without error: {body[:80]}")
        ran += 1
    check(ran == 7, "all seven curl examples ran")
    bad = subprocess.run(["curl", "-s", "-o", "/dev/stderr", "-w", "%{http_code}", base + "/v1/completions",
                          "-H", "Content-Type: application/json", "-d", "{not json"],
                         capture_output=True, text=True, timeout=30)
    check(bad.stdout == "400" and json.loads(bad.stderr)["error"]["type"] == "invalid_request_error",
          "curl with bad JSON gets an OpenAI-shaped 400")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router-bin", required=True)
    ap.add_argument("--prefill-bin", required=True)
    ap.add_argument("--decode-bin", required=True)
    args = ap.parse_args()
    logs = tempfile.mkdtemp(prefix="mlaserve-openai-test-")
    with HttpCluster(args, logs, ["--metrics-port", "0", "--trust-request-chat-template"]) as cluster:
        client = openai.OpenAI(base_url=cluster.base + "/v1", api_key="unused", max_retries=0, timeout=60)
        run_checks(client, cluster.base, cluster.router_log)
        run_curl_examples(cluster.base)
        print("openai_client_test: all checks passed")

if __name__ == "__main__":
    sys.exit(main())
