// JsonSchema (json_schema.h): compiling through json_schema_compiler.h, the process's cache of
// compiled schemas, and reading a schema argument off the command line.
#include "model/constraint/json_schema.h"

#include <atomic>
#include <fstream>
#include <iterator>
#include <list>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "model/constraint/json_schema_compiler.h"
#include "model/constraint/schema_recognizer.h"

namespace mlaserve::model {
namespace {

std::atomic<uint64_t> next_serial{1};

class SchemaCache {
 public:
  absl::StatusOr<std::shared_ptr<const JsonSchema>> Get(std::string_view text, bool strict) {
    std::string key(strict ? "1" : "0");
    key.append(text.data(), text.size());
    {
      absl::MutexLock lock(&mu_);
      if (auto it = by_key_.find(key); it != by_key_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        return it->second->second;
      }
    }
    auto compiled = JsonSchema::Compile(text, strict);
    if (!compiled.ok()) return compiled.status();
    absl::MutexLock lock(&mu_);
    if (auto it = by_key_.find(key); it != by_key_.end()) return it->second->second;
    lru_.emplace_front(key, *compiled);
    by_key_.emplace(std::move(key), lru_.begin());
    if (lru_.size() > kSchemaCacheEntries) {
      by_key_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return *compiled;
  }

 private:
  using Lru = std::list<std::pair<std::string, std::shared_ptr<const JsonSchema>>>;
  absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Lru::iterator> by_key_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

JsonSchema::JsonSchema(std::unique_ptr<schema_internal::CompiledSchema> compiled, uint64_t serial)
    : compiled_(std::move(compiled)), serial_(serial) {}
JsonSchema::~JsonSchema() = default;
size_t JsonSchema::node_count() const { return compiled_->nodes.size(); }

absl::StatusOr<std::shared_ptr<const JsonSchema>> JsonSchema::Compile(std::string_view text,
                                                                      bool strict) {
  if (text.size() > kMaxSchemaBytes) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: the schema has ", text.size(),
                                                   " bytes; at most ", kMaxSchemaBytes,
                                                   " are allowed"));
  }
  auto compiled = schema_internal::CompileSchemaText(text, strict);
  if (!compiled.ok()) return compiled.status();
  return std::shared_ptr<const JsonSchema>(new JsonSchema(
      std::make_unique<schema_internal::CompiledSchema>(std::move(*compiled)),
      next_serial.fetch_add(1)));
}

absl::StatusOr<std::shared_ptr<const JsonSchema>> JsonSchema::Get(std::string_view text,
                                                                  bool strict) {
  static SchemaCache* cache = new SchemaCache();
  return cache->Get(text, strict);
}

absl::StatusOr<std::string> SchemaFromFlag(const std::string& value) {
  const size_t first = value.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && value[first] == '{') return value;
  std::ifstream in(value, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--response-schema \"", value, "\" is neither JSON (starting with '{') nor a readable file"));
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > kMaxSchemaBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--response-schema ", value, " has ",
                                                   text.size(), " bytes; at most ",
                                                   kMaxSchemaBytes, " are allowed"));
  }
  return text;
}

}  // namespace mlaserve::model
