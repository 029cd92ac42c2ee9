// mlaservectl against a live cluster: outputs and the exit codes scripts rely on.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace mlaserve::testing {
namespace {

using ::testing::HasSubstr;

// out: stdout and stderr together.
CommandRun RunCtl(const std::string& args) {
  return RunCommand(absl::StrCat(CtlBinary(), " ", args, " 2>&1"));
}

TEST(MlaservectlTest, CommandsAndExitCodes) {
  const std::filesystem::path model = "tests/fixtures/models/deepseek_v2";
  if (!std::filesystem::exists(model / "model.safetensors")) GTEST_SKIP() << "no fixture model";
  ClusterOptions o;
  o.model_dir = model.string();
  o.admin_token = "ctl-test-admin-token-0123456789";
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string token_file = (*cluster)->dir() + "/admin-token";
  const std::string server =
      absl::StrCat("--insecure --server ", (*cluster)->router_address(), " --admin ",
                   (*cluster)->admin_address(), " --token-file ", token_file);

  // The Admin API refuses a caller without the token, and one with another token.
  const std::string no_token = absl::StrCat("--insecure --admin ", (*cluster)->admin_address());
  CommandRun refused = RunCtl(no_token + " workers list");
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("UNAUTHENTICATED"));
  const std::string wrong_file = (*cluster)->dir() + "/wrong-token";
  std::FILE* wf = std::fopen(wrong_file.c_str(), "w");
  std::fputs("not-the-admin-token-0123456789\n", wf);
  std::fclose(wf);
  CommandRun wrong = RunCtl(no_token + " --token-file " + wrong_file + " workers drain decode-1");
  EXPECT_EQ(wrong.exit_code, 2) << wrong.out;
  EXPECT_THAT(wrong.out, HasSubstr("UNAUTHENTICATED"));
  // Plaintext must be asked for.
  CommandRun no_transport = RunCtl(absl::StrCat("--admin ", (*cluster)->admin_address(), " workers list"));
  EXPECT_EQ(no_transport.exit_code, 1) << no_transport.out;
  EXPECT_THAT(no_transport.out, HasSubstr("--insecure"));

  CommandRun list = RunCtl(server + " workers list");
  EXPECT_EQ(list.exit_code, 0) << list.out;
  EXPECT_THAT(list.out, HasSubstr("prefill-1"));
  EXPECT_THAT(list.out, HasSubstr("decode-1"));
  EXPECT_THAT(list.out, HasSubstr("healthy"));

  CommandRun json = RunCtl(server + " -o json workers list --role decode");
  EXPECT_EQ(json.exit_code, 0) << json.out;
  EXPECT_THAT(json.out, HasSubstr("\"id\": \"decode-1\""));
  EXPECT_THAT(json.out, ::testing::Not(HasSubstr("prefill-1")));
  // Global flags after the subcommand, as kubectl users type them.
  CommandRun json_after = RunCtl(server + " workers list -o json");
  EXPECT_EQ(json_after.exit_code, 0) << json_after.out;
  EXPECT_THAT(json_after.out, HasSubstr("\"id\": \"prefill-1\""));
  CommandRun health_json = RunCtl(server + " health -o json --service mlaserve.v1.Generation");
  EXPECT_EQ(health_json.exit_code, 0) << health_json.out;
  EXPECT_THAT(health_json.out,
              HasSubstr(R"({"service":"mlaserve.v1.Generation","status":"SERVING"})"));
  EXPECT_EQ(RunCtl(server + " health --of-admin").exit_code, 0);

  EXPECT_EQ(RunCtl(server + " health").exit_code, 0);
  CommandRun ready = RunCtl(server + " health --service mlaserve.v1.Generation");
  EXPECT_EQ(ready.exit_code, 0) << ready.out;
  EXPECT_THAT(ready.out, HasSubstr("SERVING"));
  EXPECT_EQ(RunCtl(server + " loads").exit_code, 0);
  CommandRun profiles = RunCtl(server + " profiles show decode-1");
  EXPECT_EQ(profiles.exit_code, 0) << profiles.out;
  EXPECT_THAT(profiles.out, HasSubstr("decode-1"));
  CommandRun info = RunCtl(server + " info");
  EXPECT_EQ(info.exit_code, 0) << info.out;
  EXPECT_THAT(info.out, HasSubstr("deepseek_v2"));

  CommandRun missing = RunCtl(server + " workers get decode-9");
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_THAT(missing.out, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(missing.out, HasSubstr("decode-9"));
  // The fixture has no tokenizer: text prompts are refused by a server error.
  CommandRun gen = RunCtl(server + " generate --prompt hello --max-new-tokens 4");
  EXPECT_EQ(gen.exit_code, 2) << gen.out;
  EXPECT_THAT(gen.out, HasSubstr("FAILED_PRECONDITION"));
  // JSON mode reaches the workers, which need a tokenizer for it.
  CommandRun json_mode =
      RunCtl(server + " generate --prompt-ids 1,2,3 --max-new-tokens 4 --response-format json_object");
  EXPECT_EQ(json_mode.exit_code, 2) << json_mode.out;
  EXPECT_THAT(json_mode.out, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(json_mode.out, HasSubstr("needs tokenizer.json"));
  // So do structured outputs, the schema given inline or as a file: the router compiles it
  // (a keyword it cannot enforce is refused there, naming it), the workers need a tokenizer.
  const std::string schema = R"({"type": "array", "items": {"type": "integer"}})";
  // Unique to this process: another run on this machine must not rewrite it under this one.
  const std::string schema_file =
      ::testing::TempDir() + "/ctl_test_schema_" + std::to_string(::getpid()) + ".json";
  {
    std::FILE* f = std::fopen(schema_file.c_str(), "w");
    ASSERT_NE(f, nullptr) << schema_file;
    std::fputs(schema.c_str(), f);
    std::fclose(f);
  }
  for (const std::string& given : {"'" + schema + "'", schema_file}) {
    CommandRun json_schema =
        RunCtl(server + " generate --prompt-ids 1,2,3 --max-new-tokens 4 --response-format "
               "json_schema --response-schema " + given);
    EXPECT_EQ(json_schema.exit_code, 2) << given << ": " << json_schema.out;
    EXPECT_THAT(json_schema.out, HasSubstr("FAILED_PRECONDITION")) << given;
    EXPECT_THAT(json_schema.out,
                HasSubstr("response_format json_object / json_schema needs tokenizer.json or "
                          "tiktoken.model in the model directory " + model.string()))
        << given;
  }
  CommandRun refused_schema =
      RunCtl(server + " generate --prompt-ids 1,2,3 --max-new-tokens 4 --response-format "
             "json_schema --response-schema '{\"not\": {}}'");
  EXPECT_EQ(refused_schema.exit_code, 2) << refused_schema.out;
  EXPECT_THAT(refused_schema.out, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(refused_schema.out, HasSubstr("keyword \"not\" is not supported (at #/not)"));
  // Schema choices likewise (--response-choice PREFIX SCHEMA, repeatable, each schema inline or
  // a file): compiled by the router (a refused one named by its index and prefix), then the
  // workers' tokenizer.
  CommandRun choices = RunCtl(server + " generate --prompt-ids 1,2,3 --max-new-tokens 4 --response-format "
                              "json_schema --response-choice a: '" + schema + "' --response-choice b: " +
                              schema_file);
  EXPECT_EQ(choices.exit_code, 2) << choices.out;
  EXPECT_THAT(choices.out, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(choices.out, HasSubstr("needs tokenizer.json"));
  std::remove(schema_file.c_str());
  CommandRun refused_choice = RunCtl(server + " generate --prompt-ids 1,2,3 --max-new-tokens 4 --response-format "
                                     "json_schema --response-choice a: '" + schema +
                                     "' --response-choice b: '{\"not\": {}}'");
  EXPECT_EQ(refused_choice.exit_code, 2) << refused_choice.out;
  EXPECT_THAT(refused_choice.out, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(refused_choice.out,
              HasSubstr("response_format_choices[1] (prefix \"b:\"): json_schema: keyword \"not\""));
  // A schema without json_schema (and json_schema without one) is a usage error, sent nowhere.
  EXPECT_EQ(RunCtl(server + " generate --prompt-ids 1,2,3 --response-format json_object "
                   "--response-schema '" + schema + "'").exit_code,
            1);
  EXPECT_EQ(RunCtl(server + " generate --prompt-ids 1,2,3 --response-format json_schema")
                .exit_code,
            1);
  // --cache-salt reaches the router: a salt over 256 bytes is refused there, naming its length.
  CommandRun salted = RunCtl(server + " generate --prompt-ids 1,2,3 --max-new-tokens 4 "
                             "--cache-salt tenant-a");
  EXPECT_EQ(salted.exit_code, 0) << salted.out;
  CommandRun long_salt = RunCtl(server + " generate --prompt-ids 1,2,3 --max-new-tokens 4 "
                                "--cache-salt " + std::string(257, 's'));
  EXPECT_EQ(long_salt.exit_code, 2) << long_salt.out;
  EXPECT_THAT(long_salt.out, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(long_salt.out, HasSubstr("cache_salt has 257 bytes; at most 256 are allowed"));
  EXPECT_EQ(RunCtl(server + " workers frobnicate").exit_code, 1);

  CommandRun drain = RunCtl(server + " workers drain prefill-1");
  EXPECT_EQ(drain.exit_code, 0) << drain.out;
  EXPECT_THAT(drain.out, HasSubstr("draining"));
  // Readiness needs a routable prefill worker: draining the only one makes it NOT_SERVING.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  CommandRun not_ready;
  do {
    not_ready = RunCtl(server + " health --service mlaserve.v1.Generation");
  } while (not_ready.exit_code == 0 && absl::Now() < deadline);
  EXPECT_EQ(not_ready.exit_code, 3) << not_ready.out;
  CommandRun undrain = RunCtl(server + " workers undrain prefill-1");
  EXPECT_EQ(undrain.exit_code, 0) << undrain.out;
  EXPECT_THAT(undrain.out, HasSubstr("prefill-1 is healthy"));
  CommandRun ready_again;
  const absl::Time ready_deadline = absl::Now() + absl::Seconds(5);
  do {
    ready_again = RunCtl(server + " health --service mlaserve.v1.Generation");
  } while (ready_again.exit_code != 0 && absl::Now() < ready_deadline);
  EXPECT_EQ(ready_again.exit_code, 0) << ready_again.out;
  EXPECT_EQ(RunCtl(server + " workers remove prefill-1").exit_code, 0);

  (*cluster)->router().Kill();
  CommandRun down = RunCtl(server + " --timeout 2 workers list");
  EXPECT_EQ(down.exit_code, 3) << down.out;
  EXPECT_THAT(down.out, HasSubstr("UNAVAILABLE"));
}

}  // namespace
}  // namespace mlaserve::testing
