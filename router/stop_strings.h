// StopStringMatcher: finds stop strings in streamed text without ever emitting text that a
// later chunk could turn into (part of) a stop string.
//
// Text arrives in pieces (one detokenized step at a time). A stop string can straddle pieces,
// so the matcher holds back the longest tail of the text seen so far that is a proper prefix
// of some stop string; the held text is emitted as soon as it can no longer start a match, or
// by Flush() at the end of generation. Input must be whole UTF-8 characters (what the
// incremental detokenizer produces); held tails then start on a character boundary too.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve::router {

class StopStringMatcher {
 public:
  StopStringMatcher(std::vector<std::string> stops, bool include_stop_in_output);

  struct Result {
    std::string emit;                   // text that is safe to send now
    std::optional<std::string> matched;  // set once a stop string matched: generation ends
  };

  // Appends newly decoded text. After a match, further calls return nothing.
  Result Append(std::string_view text);

  // End of generation without a match: returns the held text.
  std::string Flush();

  bool empty() const { return stops_.empty(); }
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  bool include_stop_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace mlaserve::router
