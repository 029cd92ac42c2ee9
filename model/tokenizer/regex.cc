#include "model/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace mlaserve::model {
namespace {

// Backtracking over long whitespace runs (\s+(?!\S)) can outgrow PCRE2's default 32 KiB JIT
// stack; each thread gets its own, grown on demand up to this size.
constexpr size_t kJitStackStart = 32 * 1024;
constexpr size_t kJitStackMax = 8 * 1024 * 1024;

// Per-thread match data and context, reused by every match on the thread (allocating them
// per word costs more than matching). Only the whole-match offsets are read, so one
// ovector pair is enough (pcre2_match then returns 0 for patterns with groups).
struct ThreadScratch {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);

  ThreadScratch() {
    if (mc != nullptr && stack != nullptr) pcre2_jit_stack_assign(mc, nullptr, stack);
  }
  ~ThreadScratch() {
    if (md != nullptr) pcre2_match_data_free(md);
    if (mc != nullptr) pcre2_match_context_free(mc);
    if (stack != nullptr) pcre2_jit_stack_free(stack);
  }
};

absl::StatusOr<ThreadScratch*> GetThreadScratch() {
  thread_local ThreadScratch scratch;
  if (scratch.md == nullptr || scratch.mc == nullptr) {
    return absl::ResourceExhaustedError("out of memory for PCRE2 match data");
  }
  return &scratch;
}

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return absl::StrCat("PCRE2 error ", code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Oniguruma's (Ruby syntax) meaning of the escapes whose PCRE2 meaning differs, as PCRE2
// properties. Found by running every assigned code point through both engines:
//   \s  Unicode White_Space in Oniguruma (and in Rust regex, tiktoken's engine); PCRE2's UCP
//       \s also takes U+180E MONGOLIAN VOWEL SEPARATOR (a format character since Unicode 6.3).
//   \w  Alphabetic, marks, Nd and Pc in Oniguruma, and outside a class also the Latin-1 No
//       characters its byte table marks as word (¹ ² ³ ¼ ½ ¾); PCRE2 10.42's UCP \w is L, N
//       and '_' (it misses combining marks and takes every No, such as ①).
//   \h  Ruby's hexadecimal digit; PCRE2's horizontal whitespace.
// Each maps to class bodies, one for inside [...] and one bracketed outside. The negated forms
// use a \P property where one exists; \W inside a class has no single-property spelling and is
// left to PCRE2 (no known tokenizer.json writes it).
struct EscapeTranslation {
  char escape;
  std::string_view positive;  // class body, outside a class
  std::string_view in_class;  // class body, inside a class
  std::string_view negated;   // a single item usable inside a class, or empty
};
constexpr EscapeTranslation kEscapes[] = {
    {'s', R"(\p{White_Space})", R"(\p{White_Space})", R"(\P{White_Space})"},
    {'w', R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})",
     R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc})", ""},
    {'h', R"(\p{ASCII_Hex_Digit})", R"(\p{ASCII_Hex_Digit})", R"(\P{ASCII_Hex_Digit})"},
};

bool CompilesAsPcre2(const std::string& pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) return false;
  pcre2_code_free(code);
  return true;
}

// `pattern` (Oniguruma / Rust regex syntax) with the escapes above and script properties
// spelled so PCRE2 gives them Oniguruma's meaning. A bare script name (\p{Han}) is the Script
// property in Oniguruma and Rust regex but Script_Extensions in PCRE2 10.40+, which adds
// characters shared with other scripts (CJK punctuation such as 。 is Han there);
// \p{sc:Han} is Script in PCRE2.
std::string TranslateEscapes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size());
  int class_depth = 0;
  size_t class_start = std::string_view::npos;  // just after the '[' or '[^' opening a class
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c != '\\' || i + 1 == pattern.size()) {
      if (c == '[') {
        ++class_depth;
        class_start = i + 1 < pattern.size() && pattern[i + 1] == '^' ? i + 2 : i + 1;
      } else if (c == ']' && class_depth > 0 && i != class_start) {
        --class_depth;
      }
      out.push_back(c);
      continue;
    }
    const char e = pattern[++i];
    const char lower = static_cast<char>(e | 0x20);
    const EscapeTranslation* t = nullptr;
    for (const EscapeTranslation& candidate : kEscapes) {
      if (candidate.escape == lower) t = &candidate;
    }
    if (t != nullptr && e == lower) {
      out.append(class_depth > 0 ? std::string(t->in_class) : "[" + std::string(t->positive) + "]");
      continue;
    }
    if (t != nullptr && !t->negated.empty()) {
      out.append(t->negated);
      continue;
    }
    if (t != nullptr && class_depth == 0) {
      out.append("[^" + std::string(t->positive) + "]");
      continue;
    }
    const size_t close = pattern.find('}', i);
    if ((e == 'p' || e == 'P') && i + 1 < pattern.size() && pattern[i + 1] == '{' &&
        close != std::string_view::npos) {
      std::string_view name = pattern.substr(i + 2, close - i - 2);
      const bool caret = !name.empty() && name[0] == '^';
      if (caret) name.remove_prefix(1);
      if (!name.empty() && name.find(':') == std::string_view::npos &&
          CompilesAsPcre2(absl::StrCat("\\p{sc:", std::string(name), "}"))) {
        out.append(absl::StrCat("\\", std::string(1, e), "{", caret ? "^" : "", "sc:",
                                std::string(name), "}"));
        i = close;
        continue;
      }
    }
    out.push_back('\\');
    out.push_back(e);
  }
  return out;
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;

  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }

  // Runs one match from `start`; returns the match or nullopt on no match.
  absl::StatusOr<std::optional<Match>> MatchFrom(const ThreadScratch& s, std::string_view text,
                                                 size_t start, uint32_t options) const {
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                               start, options | PCRE2_NO_UTF_CHECK, s.md, s.mc);
    if (rc == PCRE2_ERROR_NOMATCH) return std::optional<Match>();
    if (rc < 0) {
      return absl::InternalError(absl::StrCat("regex match failed at byte ", start, " of a ",
                                              text.size(), "-byte text: ", Pcre2Message(rc)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    return std::optional<Match>(Match{ov[0], ov[1]});
  }
};

Regex::Regex(std::string pattern, std::unique_ptr<Impl> impl)
    : pattern_(std::move(pattern)), impl_(std::move(impl)) {}

Regex::~Regex() = default;

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  if (auto bad = utf8::FirstInvalidByte(pattern)) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex pattern is not valid UTF-8 at byte ", *bad));
  }
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  if (cc == nullptr) return absl::ResourceExhaustedError("out of memory for PCRE2 context");
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  const std::string translated = TranslateEscapes(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                   translated.size(), PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE,
                                   &error_code, &error_offset, cc);
  pcre2_compile_context_free(cc);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot compile regex '", std::string(pattern), "'",
        translated == pattern ? "" : absl::StrCat(" (as PCRE2: '", translated, "')"), ": ",
        Pcre2Message(error_code), " at offset ", error_offset));
  }
  auto impl = std::make_unique<Impl>();
  impl->code = code;
  // JIT is an optimisation only: where the library lacks it, the interpreter runs.
  impl->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<Regex>(new Regex(std::string(pattern), std::move(impl)));
}

absl::StatusOr<std::vector<Regex::Match>> Regex::FindAll(std::string_view text) const {
  absl::StatusOr<ThreadScratch*> scratch = GetThreadScratch();
  if (!scratch.ok()) return scratch.status();
  std::vector<Match> matches;
  size_t start = 0;
  std::optional<size_t> last_match_end;
  while (start <= text.size()) {
    absl::StatusOr<std::optional<Match>> m = impl_->MatchFrom(**scratch, text, start, 0);
    if (!m.ok()) return m.status();
    if (!m->has_value()) break;
    const auto [begin, end] = **m;
    if (begin == end && last_match_end == end) {
      // Step over one character so an empty match cannot repeat forever.
      start += start < text.size() ? utf8::ScanAt(text, start).length : 1;
      continue;
    }
    matches.push_back(**m);
    start = end;
    last_match_end = end;
  }
  return matches;
}

absl::StatusOr<std::optional<size_t>> Regex::MatchLengthAt(std::string_view text,
                                                           size_t pos) const {
  absl::StatusOr<ThreadScratch*> scratch = GetThreadScratch();
  if (!scratch.ok()) return scratch.status();
  absl::StatusOr<std::optional<Match>> m = impl_->MatchFrom(**scratch, text, pos, PCRE2_ANCHORED);
  if (!m.ok()) return m.status();
  if (!m->has_value()) return std::optional<size_t>();
  return std::optional<size_t>((*m)->second - (*m)->first);
}

}  // namespace mlaserve::model
