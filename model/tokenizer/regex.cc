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
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                                   pattern.size(), PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE,
                                   &error_code, &error_offset, cc);
  pcre2_compile_context_free(cc);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot compile regex '", std::string(pattern), "': ",
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
