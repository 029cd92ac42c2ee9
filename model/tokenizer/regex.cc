#include "model/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
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

// Code points assigned in Unicode 15.0-16.0: PCRE2 10.42 (Debian 12's) knows Unicode 14.0 and
// reads them as \p{Cn}, where Oniguruma (`tokenizers`) and Rust regex (`tiktoken`) know 16.0. So
// the emoji U+1FA77 PINK HEART, a symbol there, was not one here, and DeepSeek-V3's
// `[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+` split "you 🩷" differently. Generated from the Unicode
// data by tools/make_regex_unicode_tables.py; TranslateEscapes adds them to the properties.
struct AddedRange {
  char32_t first, last;
};
struct AddedProperty {
  std::string_view name;
  int begin, end;  // into kAddedRanges
};
#include "model/tokenizer/regex_unicode_tables.inc"

using Ranges = std::vector<AddedRange>;

void AppendRanges(const AddedProperty& p, Ranges* out) {
  out->insert(out->end(), kAddedRanges + p.begin, kAddedRanges + p.end);
}

// What Unicode 15.0-16.0 added to a property as Oniguruma names it: a General_Category value (one
// letter: every value it starts with; "LC" / "L&": Lu Ll Lt), a script (any alias, case, '_',
// '-' and spaces ignored, with or without "sc:" / "Script=" before it) or Alphabetic. Empty where
// nothing was added or the name is none of these.
Ranges AddedRanges(std::string_view name) {
  Ranges out;
  const bool category = name.size() <= 2 && !name.empty() && name[0] >= 'A' && name[0] <= 'Z';
  if (category) {
    for (const AddedProperty& p : kAddedCategories) {
      const bool cased_letter = (name == "LC" || name == "L&") && (p.name == "Lu" || p.name == "Ll" || p.name == "Lt");
      if (p.name == name || (name.size() == 1 && p.name[0] == name[0]) || cased_letter) AppendRanges(p, &out);
    }
    return out;
  }
  for (std::string_view prefix : {"sc:", "sc=", "script=", "script:"}) {
    if (name.size() > prefix.size() &&
        absl::EqualsIgnoreCase(std::string(name.substr(0, prefix.size())), std::string(prefix))) {
      name.remove_prefix(prefix.size());
      break;
    }
  }
  std::string key;
  for (const char c : name) {
    if (c == '_' || c == '-' || c == ' ') continue;
    key.push_back(absl::ascii_toupper(static_cast<unsigned char>(c)));
  }
  for (const AddedProperty& p : kAddedScripts) {
    if (p.name == key) AppendRanges(p, &out);
  }
  for (const AddedProperty& p : kAddedBinaryProperties) {
    if (p.name == key) AppendRanges(p, &out);
  }
  return out;
}

// Class items (\x{A}-\x{B} ...) for `ranges`, sorted and merged: PCRE2 tries a class's items in
// turn for a character above U+00FF, so a class with fewer ranges matches faster.
std::string ClassItems(Ranges ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const AddedRange& x, const AddedRange& y) { return x.first < y.first; });
  std::string out;
  for (size_t i = 0; i < ranges.size();) {
    char32_t first = ranges[i].first, last = ranges[i].last;
    for (++i; i < ranges.size() && ranges[i].first <= last + 1; ++i) last = std::max(last, ranges[i].last);
    absl::StrAppend(&out, "\\x{", absl::Hex(first), "}");
    if (last != first) absl::StrAppend(&out, "-\\x{", absl::Hex(last), "}");
  }
  return out;
}

// Oniguruma's (Ruby syntax) meaning of the escapes whose PCRE2 meaning differs, as PCRE2
// properties. Found by running every assigned code point through both engines:
//   \s  Unicode White_Space in Oniguruma (and in Rust regex, tiktoken's engine); PCRE2's UCP
//       \s also takes U+180E MONGOLIAN VOWEL SEPARATOR (a format character since Unicode 6.3).
//   \w  Alphabetic, marks, Nd and Pc in Oniguruma, and outside a class also the Latin-1 No
//       characters its byte table marks as word (¹ ² ³ ¼ ½ ¾); PCRE2 10.42's UCP \w is L, N
//       and '_' (it misses combining marks and takes every No, such as ①).
//   \h  Ruby's hexadecimal digit; PCRE2's horizontal whitespace.
//   \d  Nd, as in PCRE2, with the digits Unicode 15.0-16.0 added (as \w takes the code points
//       they added to Alphabetic, marks, Nd and Pc).
// Each maps to class bodies, one for inside [...] and one bracketed outside, plus the code points
// Unicode 15.0-16.0 added to it. The negated forms use a \P property where one exists; \W and \D
// inside a class have no single-property spelling and are left to PCRE2 (no known tokenizer.json
// writes them).
struct EscapeTranslation {
  char escape;
  std::string positive;  // class body, outside a class
  std::string in_class;  // class body, inside a class
  std::string negated;   // a single item usable inside a class, or empty
  Ranges added;          // Unicode 15.0-16.0's additions to both bodies
};
const std::vector<EscapeTranslation>& Escapes() {
  static const std::vector<EscapeTranslation>* escapes = [] {
    Ranges word;
    for (const char* c : {"Alphabetic", "M", "Nd", "Pc"}) {
      const Ranges r = AddedRanges(c);
      word.insert(word.end(), r.begin(), r.end());
    }
    return new std::vector<EscapeTranslation>{
        {'s', R"(\p{White_Space})", R"(\p{White_Space})", R"(\P{White_Space})", {}},
        {'w', R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})",
         R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc})", "", word},
        {'h', R"(\p{ASCII_Hex_Digit})", R"(\p{ASCII_Hex_Digit})", R"(\P{ASCII_Hex_Digit})", {}},
        {'d', R"(\p{Nd})", R"(\p{Nd})", "", AddedRanges("Nd")},
    };
  }();
  return *escapes;
}

bool CompilesAsPcre2(const std::string& pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) return false;
  pcre2_code_free(code);
  return true;
}

// `pattern` (Oniguruma / Rust regex syntax) with the escapes above and the properties spelled so
// PCRE2 gives them Oniguruma's meaning:
//   - A bare script name (\p{Han}) is the Script property in Oniguruma and Rust regex but
//     Script_Extensions in PCRE2 10.40+, which adds characters shared with other scripts (CJK
//     punctuation such as 。 is Han there); \p{sc:Han} is Script in PCRE2.
//   - A category or script that Unicode 15.0-16.0 added to (AddedRanges) becomes a class with
//     those code points too: [\p{S}...] outside a class, \p{S} inside one with the class's
//     additions merged before its ']', [^\p{S}...] for \P{S} outside a class (inside one \P{S}
//     stays PCRE2's and misses them). A script PCRE2 does not know (Kawi, Garay, ...) is its code
//     points alone.
std::string TranslateEscapes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size());
  int class_depth = 0;
  size_t class_start = std::string_view::npos;  // just after the '[' or '[^' opening a class
  Ranges in_class_added;  // the open class's additions, written merged before its ']'
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c != '\\' || i + 1 == pattern.size()) {
      if (c == '[') {
        ++class_depth;
        class_start = i + 1 < pattern.size() && pattern[i + 1] == '^' ? i + 2 : i + 1;
      } else if (c == ']' && class_depth > 0 && i != class_start) {
        --class_depth;
        if (class_depth == 0) {
          out.append(ClassItems(std::move(in_class_added)));
          in_class_added.clear();
        }
      }
      out.push_back(c);
      continue;
    }
    const char e = pattern[++i];
    const char lower = static_cast<char>(e | 0x20);
    const EscapeTranslation* t = nullptr;
    for (const EscapeTranslation& candidate : Escapes()) {
      if (candidate.escape == lower) t = &candidate;
    }
    if (t != nullptr && e == lower) {
      if (class_depth > 0) {
        out.append(t->in_class);
        in_class_added.insert(in_class_added.end(), t->added.begin(), t->added.end());
      } else {
        out.append("[" + t->positive + ClassItems(t->added) + "]");
      }
      continue;
    }
    if (t != nullptr && !t->negated.empty()) {
      out.append(t->negated);
      continue;
    }
    if (t != nullptr && class_depth == 0) {
      out.append("[^" + t->positive + ClassItems(t->added) + "]");
      continue;
    }
    const size_t close = pattern.find('}', i);
    if ((e == 'p' || e == 'P') && i + 1 < pattern.size() && pattern[i + 1] == '{' &&
        close != std::string_view::npos) {
      std::string_view name = pattern.substr(i + 2, close - i - 2);
      const bool caret = !name.empty() && name[0] == '^';
      if (caret) name.remove_prefix(1);
      const std::string property_name(name);
      const bool bare_script = !name.empty() && name.find(':') == std::string_view::npos &&
                               CompilesAsPcre2(absl::StrCat("\\p{sc:", property_name, "}"));
      Ranges added = AddedRanges(name);
      const bool negated = (e == 'P') != caret;
      if (!added.empty() && (!negated || class_depth == 0)) {
        // The property as PCRE2 reads it (a property_name script name as Script), or none where PCRE2 does
        // not know it (a script newer than Unicode 14): then the added code points alone.
        std::string property;
        if (bare_script) {
          property = absl::StrCat("\\p{sc:", property_name, "}");
        } else if (CompilesAsPcre2(absl::StrCat("\\p{", property_name, "}"))) {
          property = absl::StrCat("\\p{", property_name, "}");
        }
        if (class_depth > 0) {
          out.append(property);
          in_class_added.insert(in_class_added.end(), added.begin(), added.end());
        } else {
          out.append(absl::StrCat(negated ? "[^" : "[", property, ClassItems(std::move(added)), "]"));
        }
        i = close;
        continue;
      }
      if (bare_script) {
        out.append(absl::StrCat("\\", std::string(1, e), "{", caret ? "^" : "", "sc:", property_name, "}"));
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
    // The translation with Unicode 15.0-16.0's ranges can run to kilobytes: shown only when short.
    constexpr size_t kShownTranslation = 400;
    const std::string as_pcre2 =
        translated == pattern ? ""
        : translated.size() <= kShownTranslation
            ? absl::StrCat(" (as PCRE2: '", translated, "')")
            : absl::StrCat(" (as PCRE2: ", translated.size(), " bytes)");
    return absl::InvalidArgumentError(absl::StrCat("cannot compile regex '", std::string(pattern), "'", as_pcre2,
                                                   ": ", Pcre2Message(error_code), " at offset ", error_offset));
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
