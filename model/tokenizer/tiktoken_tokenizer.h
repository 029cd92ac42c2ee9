// The tiktoken tokenizer Moonshot's DeepSeek-V3-architecture checkpoints ship (Moonlight-16B-A3B,
// Kimi-K2): `tiktoken.model` plus tokenizer_config.json naming the class TikTokenTokenizer
// (tokenization_moonshot.py / tokenization_kimi.py, remote code transformers runs). mlaserve
// reads it through Tokenizer::FromTiktoken / Tokenizer::FromModelDir (tokenizer.h); this header
// holds the pieces of the class's behaviour, exposed for tests.
//
// What the class does, and so what Tokenizer does with these files:
//   * ids 0..n-1 are tiktoken.model's ranks; the 256 ids n..n+255 are tiktoken special tokens,
//     each named by tokenizer_config.json's added_tokens_decoder or else
//     "<|reserved_token_ID|>". The vocabulary is n + 256 ids.
//   * encode(text) cuts the text into 400,000-character chunks and cuts runs of more than
//     25,000 whitespace (Python str.isspace) or non-whitespace characters, then runs tiktoken's
//     encode(substring, allowed_special="all") on each piece: special token texts become their
//     ids, the rest is split by the class's regex (`pat_str`, translated to PCRE2 below) and
//     byte-pair merged (TiktokenBpe). No BOS or EOS is added (transformers' base
//     build_inputs_with_special_tokens adds none for this class).
//   * decode(ids) is tiktoken's: the tokens' bytes joined, invalid UTF-8 replaced by U+FFFD.
//     With skip_special_tokens, transformers drops all_special_ids: bos, eos, unk, pad and
//     additional_special_tokens (default: the class's list of eight), not the tool-call markers.
//     (Its slow-tokenizer _decode also puts spaces around other added tokens,
//     spaces_between_special_tokens; mlaserve does not: its decode is the class's own.)
//   * the token strings (IdToToken / TokenId) are the class's: GPT-2 byte-level characters of
//     the bytes for base tokens, the name for special tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mlaserve::model::tiktoken {

// The pre-tokenizer pattern of Moonshot's TikTokenTokenizer in PCRE2 syntax. The original is
// written for tiktoken's Rust regex, whose classes may intersect: [\p{Lu}...\p{M}&&[^\p{Han}]].
// PCRE2 10.42 has no intersection, so each such class is (?:(?!\p{sc:Han})[\p{Lu}...\p{M}]):
// one character that is not Han, then one of the class. \p{Han} is Script=Han in Rust regex;
// in PCRE2 a bare \p{Han} is Script_Extensions=Han (which adds CJK punctuation such as 。、),
// so the translation spells \p{sc:Han}.
const std::string& KimiPattern();

// Python's str.isspace() for one code point (bidirectional class WS, B or S, or category Zs):
// the whitespace test of the class's run cut. Includes U+001C..U+001F, unlike \s.
bool PythonIsSpace(char32_t c);

// The substrings the class passes to tiktoken one by one (see above), in order; for empty text,
// one empty substring. `text` must be valid UTF-8.
std::vector<std::string_view> EncodeSubstrings(std::string_view text);

inline constexpr size_t kMaxEncodeChars = 400'000;
inline constexpr size_t kMaxRunChars = 25'000;
inline constexpr int kNumReservedSpecialTokens = 256;

}  // namespace mlaserve::model::tiktoken
