// mlaservectl: the admin CLI of an mlaserve router. See docs/serving.md for examples and
// docs/security.md for the credentials. Global flags may come before or after the command
// (`mlaservectl workers list -o json`, as kubectl users type it).
// Exit codes: 0 ok, 1 usage, 2 server error (the gRPC code is printed), 3 unavailable.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "common/call_auth.h"
#include "common/transport_security.h"
#include "model/constraint/json_schema.h"
#include "router/ctl/ctl_commands.h"
#include "router/ctl/ctl_format.h"

namespace mlaserve::router::ctl {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{"mlaservectl: manage and query an mlaserve router"};
  app.require_subcommand(1);
  // Options of the app are also accepted after a subcommand.
  app.fallthrough();
  std::string server = "localhost:8000";
  std::string admin_server = "localhost:8001";
  std::string output = "table";
  std::string token_file, api_key_file;
  common::TlsOptions tls;
  double timeout_s = 0;
  app.add_option("--server", server, "the router's public API HOST:PORT (generate, info, health)")
      ->capture_default_str();
  app.add_option("--admin", admin_server,
                 "the router's Admin API HOST:PORT (workers, loads, profiles)")
      ->capture_default_str();
  app.add_option("--token-file", token_file,
                 "file whose first token is sent to the Admin API (the router's "
                 "--admin-token-file)");
  app.add_option("--api-key-file", api_key_file,
                 "file whose first key is sent to the public API (the router's --api-key-file)");
  common::AddTlsFlags(app, &tls);
  app.add_option("-o,--output", output, "output format")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json"}));
  app.add_option("--timeout", timeout_s,
                 "seconds before giving up (default: 10, and 600 for generate)")
      ->check(CLI::NonNegativeNumber);

  std::function<int(const CtlContext&)> run;

  CLI::App* workers = app.add_subcommand("workers", "list and manage workers");
  workers->require_subcommand(1);
  workers->fallthrough();
  std::string role, id, address;
  CLI::App* list = workers->add_subcommand("list", "list workers");
  list->add_option("--role", role, "prefill or decode (default: all)");
  list->callback([&] { run = [&](const CtlContext& c) { return WorkersList(c, role); }; });
  CLI::App* get = workers->add_subcommand("get", "show one worker");
  get->add_option("ID", id, "worker id (from workers list)")->required();
  get->callback([&] { run = [&](const CtlContext& c) { return WorkersGet(c, id); }; });
  CLI::App* add = workers->add_subcommand("add", "add a worker by address (the router polls it)");
  add->add_option("--role", role, "prefill or decode")->required();
  add->add_option("ADDR", address, "worker HOST:PORT or [IPV6]:PORT")->required();
  add->callback([&] { run = [&](const CtlContext& c) { return WorkersAdd(c, role, address); }; });
  CLI::App* remove = workers->add_subcommand("remove", "forget a worker");
  remove->add_option("ID", id, "worker id")->required();
  remove->callback([&] { run = [&](const CtlContext& c) { return WorkersRemove(c, id); }; });
  CLI::App* drain = workers->add_subcommand("drain", "stop routing new requests to a worker");
  drain->add_option("ID", id, "worker id")->required();
  drain->callback([&] { run = [&](const CtlContext& c) { return WorkersDrain(c, id); }; });
  CLI::App* undrain = workers->add_subcommand("undrain", "route new requests to a worker again");
  undrain->add_option("ID", id, "worker id")->required();
  undrain->callback([&] { run = [&](const CtlContext& c) { return WorkersUndrain(c, id); }; });

  std::string service;
  CLI::App* health = app.add_subcommand("health", "grpc.health.v1 check (exit 0 when SERVING)");
  health->add_option("--service", service,
                     "service name; \"\" = the server, mlaserve.v1.Generation = ready to route");
  bool health_admin = false;
  health->add_flag("--of-admin", health_admin, "check the Admin API's listener instead");
  health->callback(
      [&] { run = [&](const CtlContext& c) { return Health(c, service, health_admin); }; });

  app.add_subcommand("loads", "worker loads")->callback([&] { run = Loads; });
  app.add_subcommand("info", "server and model information")->callback([&] { run = Info; });

  CLI::App* profiles = app.add_subcommand("profiles", "GPU profiles of the workers");
  profiles->require_subcommand(1);
  profiles->fallthrough();
  std::string worker;
  CLI::App* show = profiles->add_subcommand("show", "show profiles (one worker: the whole document)");
  show->add_option("WORKER", worker, "worker id (default: all)");
  show->callback([&] { run = [&](const CtlContext& c) { return ProfilesShow(c, worker); }; });

  GenerateArgs gen;
  CLI::App* generate = app.add_subcommand("generate", "stream a completion for a prompt");
  CLI::Option* prompt_text = generate->add_option("--prompt", gen.prompt, "prompt text");
  CLI::Option* prompt_ids =
      generate->add_option("--prompt-ids", gen.prompt_ids,
                           "prompt token ids, comma separated (models without a tokenizer)")
          ->delimiter(',');
  prompt_text->excludes(prompt_ids);
  generate->add_option("--max-new-tokens", gen.max_new_tokens, "at most this many new tokens");
  generate->add_option("--temperature", gen.temperature, "0 = greedy (default 1)");
  generate->add_option("--top-p", gen.top_p, "nucleus sampling mass in (0, 1]");
  generate->add_option("--top-k", gen.top_k, "keep the k most likely tokens (0 = off)");
  generate->add_option("--min-p", gen.min_p, "min-p filter in [0, 1]");
  generate->add_option("--repetition-penalty", gen.repetition_penalty, "> 0 (1 = off)");
  generate->add_option("--seed", gen.seed, "sampling seed");
  generate->add_option("--stop", gen.stop, "stop string (repeatable)");
  generate->add_flag("--ignore-eos", gen.ignore_eos, "keep generating past EOS");
  std::string response_format = "text";
  std::string response_schema;
  generate->add_option("--response-format", response_format,
                       "text; json_object: the answer is one JSON object, then EOS; json_schema: "
                       "one JSON value --response-schema admits, then EOS")
      ->check(CLI::IsMember({"text", "json_object", "json_schema"}));
  generate->add_option("--response-schema", response_schema,
                       "with json_schema: the JSON Schema, as JSON text or a file's path");
  generate->add_flag("--response-schema-strict", gen.json_schema_strict,
                     "with json_schema: OpenAI's strict (no properties / items the schema does "
                     "not list)");
  std::vector<std::pair<std::string, std::string>> response_choices;
  generate->add_option("--response-choice", response_choices,
                       "with json_schema, in place of --response-schema (repeatable): PREFIX "
                       "SCHEMA, the answer being one PREFIX then a value of its SCHEMA (JSON text "
                       "or a file's path)");
  generate->add_option("--response-format-after", gen.json_after,
                       "with json_object / json_schema: JSON starts after this text in the output "
                       "(e.g. </think>)");
  generate->add_option("--request-id", gen.request_id, "request id (for Abort)");
  generate->add_option("--cache-salt", gen.cache_salt,
                       "share prefix-cache pages only with requests of this salt (a secret)");
  bool is_generate = false;
  generate->callback([&] {
    if (prompt_text->count() == 0 && prompt_ids->count() == 0) {
      throw CLI::RequiredError("--prompt or --prompt-ids");
    }
    is_generate = true;
    gen.json_object = response_format == "json_object";
    if ((response_format == "json_schema") != (!response_schema.empty() || !response_choices.empty())) {
      throw CLI::ValidationError("--response-schema",
                                 "(or --response-choice) is needed with --response-format "
                                 "json_schema, and only there");
    }
    for (const auto& [prefix, flag] : response_choices) {
      absl::StatusOr<std::string> schema = model::SchemaFromFlag(flag);
      if (!schema.ok()) {
        throw CLI::ValidationError("--response-choice", std::string(schema.status().message()));
      }
      gen.json_choices.push_back({prefix, *schema, false});
    }
    if (!response_schema.empty()) {
      absl::StatusOr<std::string> schema = model::SchemaFromFlag(response_schema);
      if (!schema.ok()) throw CLI::ValidationError("--response-schema", std::string(schema.status().message()));
      gen.json_schema = *schema;
    }
    run = [&](const CtlContext& c) { return Generate(c, gen); };
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (absl::Status s = common::ValidateTlsOptions(tls, common::TlsPeer::kClient); !s.ok()) {
    std::fprintf(stderr, "mlaservectl: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  }
  auto first_token = [](const std::string& path,
                        const std::string& flag) -> absl::StatusOr<std::string> {
    if (path.empty()) return std::string();
    absl::StatusOr<common::TokenSet> tokens = common::TokenSet::FromFile(path, flag);
    if (!tokens.ok()) return tokens.status();
    return tokens->first();
  };
  absl::StatusOr<std::string> admin_token = first_token(token_file, "--token-file");
  absl::StatusOr<std::string> api_key = first_token(api_key_file, "--api-key-file");
  for (const absl::StatusOr<std::string>* t : {&admin_token, &api_key}) {
    if (!t->ok()) {
      std::fprintf(stderr, "mlaservectl: %s\n", std::string(t->status().message()).c_str());
      return kExitUsage;
    }
  }
  absl::StatusOr<std::shared_ptr<const common::ClusterDialer>> admin_dialer =
      common::ClusterDialer::Create(tls, *admin_token);
  absl::StatusOr<std::shared_ptr<const common::ClusterDialer>> public_dialer =
      common::ClusterDialer::Create(tls, *api_key);
  if (!admin_dialer.ok() || !public_dialer.ok()) {
    const absl::Status& s = !admin_dialer.ok() ? admin_dialer.status() : public_dialer.status();
    std::fprintf(stderr, "mlaservectl: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  }
  CtlContext ctx;
  ctx.server = server;
  ctx.admin_server = admin_server;
  ctx.json = output == "json";
  ctx.timeout = timeout_s > 0 ? absl::Seconds(timeout_s) : absl::Seconds(is_generate ? 600 : 10);
  ctx.channel = (*public_dialer)->Dial(server, {});
  ctx.admin_channel = (*admin_dialer)->Dial(admin_server, {});
  return run(ctx);
}

}  // namespace
}  // namespace mlaserve::router::ctl

int main(int argc, char** argv) { return mlaserve::router::ctl::Main(argc, argv); }
