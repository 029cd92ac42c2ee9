// ResponseStore: the Responses API's stored responses (`store`, the default), kept in the
// router's memory as vLLM keeps them, so that a later request can continue one with
// previous_response_id and GET / DELETE /v1/responses/{id} can read or drop one.
//
// Bounded, least recently used first out: at most Options::max_responses responses, and at most
// Options::max_bytes of their conversations (a response's own JSON and input items, plus those of
// the responses it continues, which it keeps alive: so the bound holds for what the store keeps
// in memory, shared turns counted once per response that reaches them). A response whose
// conversation alone is over max_bytes is not kept. Reading one (Get) makes it the most recent.
// Nothing survives a router restart, and every router replica has its own store.
//
// Entries hold their JSON as text, which is what the bound counts: a parsed JSON tree takes
// several times its text's size (7x for logprobs, whose values are small), so the bound would
// not be the memory held.
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace mlaserve::router::openai {

class ResponseStore {
 public:
  struct Options {
    size_t max_responses = 1024;   // 0: nothing is kept
    size_t max_bytes = 256u << 20;  // of the kept conversations (JSON text)
  };

  // One kept response, as JSON text: the response object (GET's answer, its `output` the output
  // items) and the input items it was asked with, after the response it continued.
  struct Entry {
    // Releases the chain of previous entries that only this one holds in a loop, not
    // recursively: recursion takes stack frames per turn, and a long chain of continuations (a
    // quarter million small turns fit in the byte bound) would overflow the stack.
    ~Entry();

    std::string response;
    std::string input;
    std::shared_ptr<const Entry> previous;
    size_t conversation_bytes = 0;  // this entry's memory and its previous entries'
  };

  explicit ResponseStore(Options options) : options_(options) {}

  // Keeps the response `response["id"]` (replacing one of that id), evicting the least recently
  // used ones past the bounds. False when it was not kept (max_responses 0, or its conversation
  // alone is over max_bytes).
  bool Put(const nlohmann::ordered_json& response, const nlohmann::ordered_json& input,
           std::shared_ptr<const Entry> previous);
  // The response of `id`, or null when it is not kept (never was, evicted, deleted).
  std::shared_ptr<const Entry> Get(const std::string& id);
  // Drops `id`; false when it was not kept.
  bool Erase(const std::string& id);

  // The conversation a request continuing `entry` starts from: every turn's input items then
  // its output items, oldest turn first.
  static nlohmann::ordered_json Conversation(const Entry& entry);

  size_t size() const;
  size_t bytes() const;

 private:
  struct Slot {
    std::shared_ptr<const Entry> entry;
    std::list<std::string>::iterator in_order;
  };
  void EraseLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::list<std::string> order_ ABSL_GUARDED_BY(mu_);  // most recently used first
  absl::flat_hash_map<std::string, Slot> slots_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // sum of the kept entries' conversation_bytes
};

// A response id: "resp_" and 32 hex digits of the system's random source. Whoever knows an id
// can read the response it names (with an API key, when the router has them), so ids are not
// guessable.
std::string NewResponseId();

}  // namespace mlaserve::router::openai
