#!/usr/bin/env python3
"""Generates the tiktoken tokenizer fixtures (Moonlight / Kimi-K2 style) that
model/tokenizer/tiktoken_test.cc holds mlaserve's tokenizer to.

Needs only PyPI's `tiktoken` and `regex` (pinned below), no network files:

    python3 -m venv /tmp/tt && /tmp/tt/bin/pip install tiktoken==0.12.0 regex==2026.5.9
    /tmp/tt/bin/python tools/make_tiktoken_fixtures.py --out tests/fixtures/tokenizer/tiktoken_kimi
    /tmp/tt/bin/python tools/make_tiktoken_fixtures.py --out DIR --merges 256 --no-cases  # a model's

What it writes into --out:
  tiktoken.model          "base64(bytes) rank" lines: the 256 single bytes, then --merges
                          byte-pair merges learned here, deterministically, from the corpus
                          below (pieces split with the Kimi pattern, most frequent adjacent
                          pair first, ties to the smaller byte string). Rank = token id.
  tokenizer_config.json   the structure Moonlight's and Kimi-K2's have: tokenizer_class
                          TikTokenTokenizer, bos "[BOS]" / eos "[EOS]" / unk / pad, the
                          additional_special_tokens list, added_tokens_decoder naming some
                          ids of the 256-id reserved block after the base vocabulary at the
                          offsets Kimi's use (the others become <|reserved_token_ID|>), and a
                          small chat template.
  expected.json           (unless --no-cases) for each text: the ids the Moonshot tokenizer
                          class's own encode() gives, i.e. tiktoken.Encoding(pattern = the
                          class's pat_str, specials = the reserved block) .encode(substr,
                          allowed_special="all") over the class's substrings (400,000-character
                          chunks, runs of more than 25,000 whitespace / non-whitespace
                          characters cut), and decodes of id lists (tiktoken's decode: bytes
                          joined, invalid UTF-8 replaced) with and without the special ids
                          (transformers' all_special_ids: bos, eos, unk, pad and
                          additional_special_tokens). Also Python's str.isspace() code points,
                          which the class's whitespace-run cut uses.

The class's behaviour (tokenization_kimi.py / tokenization_moonshot.py, TikTokenTokenizer) is
reimplemented here from reading it; the BPE and the regex are tiktoken's own, so the expected
ids come from code mlaserve did not write.
"""

import argparse
import base64
import json
import os
import random
import sys

import regex
import tiktoken

# The pre-tokenizer pattern of Moonshot's TikTokenTokenizer (pat_str), as tiktoken compiles it
# (Rust regex / fancy-regex syntax: `&&` intersects character classes).
KIMI_PATTERN = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

NUM_RESERVED = 256  # the class's num_reserved_special_tokens
MAX_ENCODE_CHARS = 400_000  # the class encodes at most this many characters at a time
MAX_RUN_CHARS = 25_000  # and cuts longer runs of whitespace / non-whitespace characters

# Offsets into the reserved block that Kimi-K2's / Moonlight's added_tokens_decoder name.
NAMED_SPECIALS = {
    0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
    6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
    11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>",
    13: "<|tool_call_begin|>", 14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>",
    17: "<|im_middle|>", 254: "[UNK]", 255: "[PAD]",
}
ADDITIONAL_SPECIAL = ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
                      "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"]

# Our own template in the structure of Kimi's (role markers, name or role, tool calls in the
# section markers, tool results, content parts); not Moonshot's text.
CHAT_TEMPLATE = (
    "{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "<|im_system|>system<|im_middle|>You are a helpful assistant.<|im_end|>{%- endif -%}"
    "{%- set who = message.get('name') or message['role'] -%}"
    "{%- if message['role'] == 'user' -%}<|im_user|>{{ who }}<|im_middle|>"
    "{%- elif message['role'] == 'assistant' -%}<|im_assistant|>{{ who }}<|im_middle|>"
    "{%- else -%}<|im_system|>{{ who }}<|im_middle|>{%- endif -%}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') -%}"
    "{%- if message['content'] -%}{{ message['content'] }}{%- endif -%}"
    "<|tool_calls_section_begin|>{%- for call in message['tool_calls'] -%}"
    "<|tool_call_begin|>{{ call['id'] }}<|tool_call_argument_begin|>"
    "{%- if call['function']['arguments'] is string -%}{{ call['function']['arguments'] }}"
    "{%- else -%}{{ call['function']['arguments'] | tojson }}{%- endif -%}"
    "<|tool_call_end|>{%- endfor -%}<|tool_calls_section_end|>"
    "{%- elif message['role'] == 'tool' -%}## Result of {{ message['tool_call_id'] }}\n{{ message['content'] }}"
    "{%- elif message['content'] is string -%}{{ message['content'] }}"
    "{%- elif message['content'] is not none -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or 'image_url' in part -%}<|media_start|>image<|media_end|>"
    "{%- else -%}{{ part['text'] }}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
    "It's the servers' job: they're fast, we've tested them, and I'm sure you'll agree they'd win.",
    "DON'T SHOUT. We'RE fine, THEY'LL see. O'Neil's café serves crème brûlée and naïve piña coladas.",
    "def encode(self, text: str) -> list[int]:\n    return [self.vocab[t] for t in text.split()]\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\nreturn sum;\n",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC LIMIT 100;",
    "{\"model\": \"kimi\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 1}",
    "人工智能正在改变世界。我们今天讨论大型语言模型的推理服务，以及它们的延迟和吞吐量。",
    "北京是中华人民共和国的首都，上海是最大的城市。中文分词与英文不同。",
    "東京は日本の首都です。ひらがなとカタカナと漢字を使います。コンピューターで計算します。",
    "서울은 대한민국의 수도입니다. 한국어는 한글로 씁니다.",
    "Москва — столица России. Привет, как дела? Ёлка и ёж.",
    "Αθήνα είναι η πρωτεύουσα της Ελλάδας. Καλημέρα κόσμε!",
    "مرحبا بالعالم. اللغة العربية جميلة ١٢٣٤٥.",
    "नमस्ते दुनिया। हिन्दी भाषा सुंदर है।",
    "Numbers: 1234567890, 3.14159, 2,718,281, -42, 1e-9, 0x7fff, ３２１, ⅫⅣ.",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇯🇵 ❤️ ✨ and symbols ©®™ ±×÷ → ⇒ ∀∃∈.",
    "Whitespace:  two  spaces,\ttab,\n\nblank line,\r\nCRLF,   trailing   \n    indented code\n",
    "Mixed中文English混合text数字123和emoji😀在一起。Kimi可以读English和中文。",
    "URL https://example.com/path?q=1&r=2#frag and email someone@example.org, path /usr/local/bin.",
    "Title Case Words Are Here. camelCaseIdentifier snake_case_identifier SCREAMING_CASE.",
    "ǅemal ǈubav ǋenan are titlecase letters; ʰʲʷ are modifier letters; 々 repeats kanji.",
    "Combining marks: e\u0301 a\u0308 n\u0303 and Devanagari क्षत्रिय; Thai ภาษาไทย.",
]

FIXED_TEXTS = [
    "", " ", "  ", "\n", "\r\n", "\t", "a", "A", "Hello", " Hello", "Hello world", "hello, world!",
    "Hello, world! How are you?", "I'm", "I'M", "we'll", "WE'LL", "they'd've", "it'S", "x'y",
    "don't'll", "'s", "'S alone", "Mc'Donald's", "ſ", "it'ſ", "it'ſt", "ǅungla", "ǅUNGLA", "aǅb",
    "ʰello", "hello々world", "々々", "中文", "中文汉字测试", "中文。标点，符号！", "「引号」",
    "漢字かな交じり文", "カタカナー", "ー", "〆切", "〇一二三", "中a文", "a中", "中\u0301", "Ａｂｃ",
    "１２３４", "١٢٣٤٥٦", "Ⅻ", "123", "1234", "12345678901", "3.14", "-1", "+1", "1,000,000",
    "a1b2c3", "abc123def", "   leading", "trailing   ", "mid   dle", "a  b", "a \n b",
    "a\n\nb", "a\r\n\r\nb", "line1\nline2\n", "\n\n\n", " \n \n ", "\t\tindent", "x\u00a0y",
    "x\u3000y", "x\u2028y", "x\u0085y", "x\u000by", "x\u000cy", "x\u001cy", "x\u1680y",
    "x\u180ey", "x\u200by", "x\u2009y", "  \u00a0 x", "!!!", "!!!\n\n", " !!!", "...", "?!?!",
    "(a+b)*c", "a.b.c", "foo_bar_baz", "<tag attr=\"v\">", "a->b", "i++", "x==y", "#include <x>",
    "😀", "😀😀", "a😀b", " 😀", "👨‍👩‍👧", "🇺🇸", "e\u0301", "\u0301", "\u0301a", "n\u0303o",
    "क्ष", "ภาษา", "한국어", "ひらがな", "Ёж", "Καλημέρα", "مرحبا",
    "\u00e9\u00e8\u00ea", "ÀÉÎÕÜ", "ß", "ẞ", "ﬁ", "İstanbul", "ı", "Ω", "µ", "\u212b",
    "<|im_end|>", "a<|im_end|>b", "<|im_user|>user<|im_middle|>hi<|im_end|>",
    "<|im_assistant|>assistant<|im_middle|>", "[BOS]text[EOS]", "[BOS][EOS][UNK][PAD]",
    "<|im_end", "<|im_end|", "im_end|>", "<|IM_END|>", "< |im_end|>", "<|im_end|><|im_end|>",
    " <|im_end|> ", "x\n<|im_end|>\n", "<|tool_calls_section_begin|><|tool_call_begin|>"
    "functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"北京\"}<|tool_call_end|>"
    "<|tool_calls_section_end|>", "[EOT]", "[EOT ]", "<|start_header_id|>x<|end_header_id|>",
    "<|reserved_token_RESERVED|>", "<|reserved_token_99999|>", "<|reserved_token_|>",
]


def is_space_py(ch):
    return ch.isspace()


def split_runs(s, limit):
    """The substrings the class encodes one by one: runs of whitespace / non-whitespace
    characters longer than `limit` are cut after `limit` characters."""
    out = []
    run_len = 0
    run_is_space = s[0].isspace() if s else False
    start = 0
    for i, ch in enumerate(s):
        space = ch.isspace()
        if space != run_is_space:
            run_len = 1
            run_is_space = space
        else:
            run_len += 1
            if run_len > limit:
                out.append(s[start:i])
                start = i
                run_len = 1
    out.append(s[start:])
    return out


def moonshot_encode(enc, text):
    ids = []
    for i in range(0, max(len(text), 1), MAX_ENCODE_CHARS):
        for sub in split_runs(text[i:i + MAX_ENCODE_CHARS], MAX_RUN_CHARS):
            ids.extend(enc.encode(sub, allowed_special="all"))
    return ids


def train_merges(corpus, count):
    """Byte-level BPE in tiktoken's form: returns the byte strings of `count` merges in rank
    order (each the concatenation of two existing tokens)."""
    split = regex.compile("(?V1)" + KIMI_PATTERN)
    words = {}
    for text in corpus:
        for piece in split.findall(text):
            b = piece.encode("utf-8")
            words[b] = words.get(b, 0) + 1
    seqs = {w: [bytes([c]) for c in w] for w in words}
    merges = []
    while len(merges) < count:
        pairs = {}
        for w, freq in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + freq
        known = set(merges)
        best = None
        for (a, b), f in pairs.items():
            if a + b in known or len(a + b) < 2:
                continue
            key = (-f, a + b)
            if best is None or key < best[0]:
                best = (key, a, b)
        if best is None:
            break
        _, a, b = best
        merges.append(a + b)
        for w in words:
            s = seqs[w]
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def random_texts(rng, n):
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") +
            list("     \t\n\r.,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`") +
            list("中文汉字国人大小的是了我们世界。，、！？「」々〇") + list("ひらがなカタカナー") +
            list("한국어ёжЖΩωαβ") + ["e\u0301", "\u0308", "ǅ", "ʰ", "ſ", "ß", "İ", "١", "３", "Ⅻ"] +
            ["😀", "👍", "🏽", "\u200d", "\u00a0", "\u3000", "\u2028", "\u0085", "\u000b"] +
            ["'s", "'T", "'re", "'LL", "'ve", "'M", "'d"] +
            ["<|im_end|>", "[BOS]", "<|im_middle|>", "<|tool_call_begin|>", "<|im_end"])
    words = ["the", "The", "model", "Kimi", "server", "token", "tokens", "hello", "world",
             "中文", "模型", "推理", " ", "  ", "\n", "123", "2026"]
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        parts = [rng.choice(pool) if rng.random() < 0.7 else rng.choice(words) for _ in range(k)]
        out.append("".join(parts))
    return out


def isspace_ranges():
    ranges = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if chr(cp).isspace():
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    return ranges


def rle(ids):
    out = []
    for i in ids:
        if out and out[-1][0] == i:
            out[-1][1] += 1
        else:
            out.append([i, 1])
    return out


def compact_json(obj):
    """JSON with one line per top-level field and per element of a top-level list."""
    lines = []
    for key, value in obj.items():
        head = json.dumps(key) + ": "
        if isinstance(value, list) and value and isinstance(value[0], (dict, list)):
            items = [json.dumps(v, ensure_ascii=False, separators=(",", ":")) for v in value]
            lines.append(head + "[\n" + ",\n".join(items) + "\n]")
        else:
            lines.append(head + json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--merges", type=int, default=3000)
    ap.add_argument("--no-cases", action="store_true", help="vocabulary and config only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    rng = random.Random(20260)
    extra = random_texts(rng, 400)
    train = CORPUS + FIXED_TEXTS + extra[:200]
    merges = train_merges(train, args.merges)
    ranks = {bytes([b]): b for b in range(256)}
    for m in merges:
        ranks[m] = len(ranks)
    n_base = len(ranks)
    with open(os.path.join(args.out, "tiktoken.model"), "w") as f:
        for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(tok).decode()} {rank}\n")

    names = {n_base + off: name for off, name in NAMED_SPECIALS.items()}
    specials = {names.get(i, f"<|reserved_token_{i}|>"): i for i in range(n_base, n_base + NUM_RESERVED)}
    enc = tiktoken.Encoding(name="kimi-fixture", pat_str=KIMI_PATTERN, mergeable_ranks=ranks,
                            special_tokens=specials)
    config = {
        "added_tokens_decoder": {
            str(i): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for i, name in sorted(names.items())},
        "additional_special_tokens": ADDITIONAL_SPECIAL,
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "[EOS]",
        "extra_special_tokens": {},
        "model_max_length": 1048576,
        "pad_token": "[PAD]",
        "tokenizer_class": "TikTokenTokenizer",
        "unk_token": "[UNK]",
    }
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    print(f"{args.out}: {n_base} base tokens ({len(merges)} merges) + {NUM_RESERVED} specials")
    if args.no_cases:
        return

    all_special = {specials[t] for t in ["[BOS]", "[EOS]", "[UNK]", "[PAD]"] + ADDITIONAL_SPECIAL}
    reserved_name = f"<|reserved_token_{n_base + 5}|>"
    texts = [t.replace("RESERVED", str(n_base + 5)) for t in FIXED_TEXTS]
    texts += [reserved_name + "x" + reserved_name, "a" + f"<|reserved_token_{n_base + 300}|>"]
    texts += CORPUS + ["\n".join(CORPUS), " ".join(CORPUS[7:12])] + extra[200:]
    cases = []
    for t in texts:
        ids = moonshot_encode(enc, t)
        assert enc.decode(ids) == t, t
        cases.append({"text": t, "ids": ids})
    # Long runs: the class's 25,000-character cut (and the encode of what is left).
    long_cases = []
    for t in [" " * 25_003 + "x", "ab" * 12_600 + " end", "x" + "\n" * 25_001, "中" * 25_002,
              "a" + " " * 24_999 + "b", "a" * 50_001]:
        long_cases.append({"text_rle": rle(list(t)), "ids_rle": rle(moonshot_encode(enc, t))})
    decodes = []
    for _ in range(300):
        k = rng.randint(1, 12)
        ids = [rng.randrange(enc.n_vocab) if rng.random() < 0.3 else rng.randrange(256)
               for _ in range(k)]
        decodes.append({"ids": ids, "text": enc.decode(ids),
                        "text_skip": enc.decode([i for i in ids if i not in all_special])})
    expected = {
        "tiktoken_version": tiktoken.__version__,
        "python": sys.version.split()[0],
        "n_base": n_base,
        "vocab_size": enc.n_vocab,
        "bos_id": specials["[BOS]"],
        "eos_id": specials["[EOS]"],
        "all_special_ids": sorted(all_special),
        "special_tokens": {name: i for name, i in sorted(specials.items(), key=lambda kv: kv[1])
                           if not name.startswith("<|reserved_token_")},
        "isspace_ranges": isspace_ranges(),
        "cases": cases,
        "long_cases": long_cases,
        "decodes": decodes,
    }
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        f.write(compact_json(expected))
    print(f"{len(cases)} cases, {len(long_cases)} long cases, {len(decodes)} decodes")


if __name__ == "__main__":
    main()
