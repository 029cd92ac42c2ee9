// mlaservectl commands. Each returns the process exit code (ctl_format.h) and prints results
// to stdout, errors to stderr.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "common/request_limits.h"

namespace mlaserve::router::ctl {

struct CtlContext {
  std::string server;        // the router's public API (generate, info, health)
  std::string admin_server;  // the router's Admin API (workers, loads, profiles)
  std::shared_ptr<grpc::Channel> channel;
  std::shared_ptr<grpc::Channel> admin_channel;
  bool json = false;
  absl::Duration timeout = absl::Seconds(10);
};

int WorkersList(const CtlContext& ctx, const std::string& role);
int WorkersGet(const CtlContext& ctx, const std::string& id);
int WorkersAdd(const CtlContext& ctx, const std::string& role, const std::string& address);
int WorkersRemove(const CtlContext& ctx, const std::string& id);
int WorkersDrain(const CtlContext& ctx, const std::string& id);
int WorkersUndrain(const CtlContext& ctx, const std::string& id);
int Loads(const CtlContext& ctx);
int ProfilesShow(const CtlContext& ctx, const std::string& worker_id);
// grpc.health.v1 Check of `service` ("" = the whole server) on the public address, or the
// admin address when `admin`. Exit 0 only when SERVING.
int Health(const CtlContext& ctx, const std::string& service, bool admin);
int Info(const CtlContext& ctx);

struct GenerateArgs {
  std::string prompt;
  std::vector<int32_t> prompt_ids;  // sent as token_ids instead of text when not empty
  std::optional<int> max_new_tokens;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool json_object = false;     // --response-format json_object (JSON mode, docs/api.md)
  std::string json_schema;      // --response-format json_schema --response-schema FILE|JSON
  bool json_schema_strict = false;  // --response-schema-strict
  std::string json_after;       // --response-format-after: where JSON mode starts
  // --response-choice PREFIX SCHEMA (repeatable), in place of --response-schema: the answer is
  // one prefix, then a value of its schema (api.proto response_format_choices).
  std::vector<common::SchemaChoice> json_choices;
  std::string request_id;
  std::string cache_salt;  // --cache-salt: the prefix-cache partition (api.proto cache_salt)
};
// Streams the answer's text to stdout as it arrives (-o json: one JSON response per line),
// then a one-line summary on stderr.
int Generate(const CtlContext& ctx, const GenerateArgs& args);

}  // namespace mlaserve::router::ctl
