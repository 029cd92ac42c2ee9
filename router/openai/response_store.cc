#include "router/openai/response_store.h"

#include <algorithm>
#include <random>
#include <vector>

namespace mlaserve::router::openai {

using Json = nlohmann::ordered_json;

namespace {

// `j` as compact JSON text, its buffer no larger than the text (strings grow by doubling).
std::string Text(const Json& j) {
  std::string text = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  text.shrink_to_fit();
  return text;
}

// Text that Text() wrote: it parses.
Json Parsed(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? Json() : j;
}

}  // namespace

ResponseStore::Entry::~Entry() {
  std::shared_ptr<const Entry> next = std::move(previous);
  // Holding the last reference to `next`, nobody else can reach it: its own previous is taken
  // before it goes, so its destructor has nothing to release. (Entries are made non-const, so
  // taking it is defined.) A chain that someone else also holds is left to them.
  while (next != nullptr && next.use_count() == 1) {
    std::shared_ptr<const Entry> after = std::move(const_cast<Entry&>(*next).previous);
    next = std::move(after);
  }
}

bool ResponseStore::Put(const Json& response, const Json& input, std::shared_ptr<const Entry> previous) {
  if (options_.max_responses == 0 || !response.contains("id") || !response["id"].is_string()) return false;
  const std::string id = response["id"].get<std::string>();
  auto entry = std::make_shared<Entry>();
  entry->response = Text(response);
  entry->input = Text(input);
  entry->conversation_bytes = sizeof(Entry) + entry->response.capacity() + entry->input.capacity() +
                              (previous != nullptr ? previous->conversation_bytes : 0);
  if (entry->conversation_bytes > options_.max_bytes) return false;
  entry->previous = std::move(previous);
  absl::MutexLock lock(&mu_);
  EraseLocked(id);
  while (!order_.empty() &&
         (slots_.size() + 1 > options_.max_responses || bytes_ + entry->conversation_bytes > options_.max_bytes)) {
    EraseLocked(order_.back());
  }
  bytes_ += entry->conversation_bytes;
  order_.push_front(id);
  slots_[id] = Slot{std::move(entry), order_.begin()};
  return true;
}

std::shared_ptr<const ResponseStore::Entry> ResponseStore::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = slots_.find(id);
  if (it == slots_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second.in_order);
  return it->second.entry;
}

bool ResponseStore::Erase(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (!slots_.contains(id)) return false;
  EraseLocked(id);
  return true;
}

void ResponseStore::EraseLocked(const std::string& id) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return;
  bytes_ -= it->second.entry->conversation_bytes;
  order_.erase(it->second.in_order);
  slots_.erase(it);
}

Json ResponseStore::Conversation(const Entry& entry) {
  std::vector<const Entry*> turns;
  for (const Entry* e = &entry; e != nullptr; e = e->previous.get()) turns.push_back(e);
  Json items = Json::array();
  for (auto turn = turns.rbegin(); turn != turns.rend(); ++turn) {
    for (Json& item : Parsed((*turn)->input)) items.push_back(std::move(item));
    Json response = Parsed((*turn)->response);
    if (!response.is_object() || !response.contains("output")) continue;
    for (Json& item : response["output"]) items.push_back(std::move(item));
  }
  return items;
}

size_t ResponseStore::size() const {
  absl::MutexLock lock(&mu_);
  return slots_.size();
}

size_t ResponseStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

std::string NewResponseId() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device random;  // the system's source (getrandom on Linux)
  std::string id = "resp_";
  for (int word = 0; word < 4; ++word) {
    uint32_t bits = random();
    for (int i = 0; i < 8; ++i, bits >>= 4) id += kHex[bits & 0xf];
  }
  return id;
}

}  // namespace mlaserve::router::openai
