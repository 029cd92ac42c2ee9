// Random requests against a real cluster (router + prefill + decode processes on loopback):
// valid and invalid sampling parameters drawn at and around every documented bound, prompts at
// the context limit, invalid token ids and UTF-8, stop strings and stop tokens, client
// cancellations at random points, all concurrently. Each request's outcome is predicted from
// the API contract (proto/mlaserve/v1/api.proto), independently of router/validation.cc:
//   - invalid: INVALID_ARGUMENT whose message names the offending field;
//   - valid: OK with a final message whose token count respects max_new_tokens (or CANCELLED
//     when the test cancelled it before the end);
// and afterwards the servers still answer and every KV page is free. The seed is printed;
// MLASERVE_RANDOM_SEED=<n> replays a run.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace mlaserve::testing {
namespace {

constexpr absl::Duration kRequestTimeout = absl::Seconds(60);

struct Limits {
  int vocab = 0;
  int context = 0;
};

// One drawn request and what the contract says must happen to it.
struct Case {
  v1::GenerateRequest request;
  // What makes it invalid (empty: valid); several faults may be drawn at once, and the
  // contract does not say which one the error names, only that it names one.
  std::vector<std::string> invalid_fields;
  int max_new_tokens = 0;     // the effective limit, for valid requests
  int cancel_after_chunks = -1;
};

class Drawer {
 public:
  Drawer(uint64_t seed, Limits limits) : rng_(seed), limits_(limits) {}

  Case Draw(int index) {
    Case c;
    v1::GenerateRequest& r = c.request;
    r.set_request_id(absl::StrCat("rand-", index));
    auto invalid = [&c](const std::string& field) { c.invalid_fields.push_back(field); };
    // Prompt: token ids (mostly) or text.
    int prompt_tokens = 0;
    const int kind = Uniform(0, 9);
    if (kind == 0) {
      invalid("prompt is empty");
      r.mutable_token_ids();
    } else if (kind == 1) {
      r.set_text(Chance(0.5) ? "count from 17: 17 18 19" : std::string("bad \xff\xfe utf-8"));
      if (r.text().find('\xff') != std::string::npos) invalid("not valid UTF-8");
      prompt_tokens = -1;  // the router's tokenizer decides; only the bad-UTF-8 case is judged
    } else {
      const bool at_limit = Chance(0.15);
      const int n = at_limit ? limits_.context - 1 : Uniform(1, 300);
      prompt_tokens = n;
      for (int i = 0; i < n; ++i) r.mutable_token_ids()->add_ids(Uniform(0, limits_.vocab - 1));
      if (Chance(0.1)) {
        const int bad = Chance(0.5) ? -1 - Uniform(0, 5) : limits_.vocab + Uniform(0, 5);
        r.mutable_token_ids()->set_ids(Uniform(0, n - 1), bad);
        invalid("prompt token id");
      }
    }
    v1::SamplingParams& s = *r.mutable_sampling();
    if (Chance(0.6)) {
      const float t = Pick<float>({0.0f, 0.0f, 0.7f, 1.0f, 2.5f, -0.1f,
                                   std::numeric_limits<float>::quiet_NaN(),
                                   std::numeric_limits<float>::infinity()});
      s.set_temperature(t);
      if (!(t >= 0.0f) || std::isinf(t)) invalid("temperature");
    }
    if (Chance(0.3)) {
      const float p = Pick<float>({1.0f, 0.9f, 0.01f, 0.0f, 1.5f, -0.5f});
      s.set_top_p(p);
      if (!(p > 0.0f && p <= 1.0f)) invalid("top_p");
    }
    if (Chance(0.3)) {
      const int k = Pick<int>({0, 1, 5, limits_.vocab, limits_.vocab * 4, -1});
      s.set_top_k(k);
      if (k < 0) invalid("top_k");
    }
    if (Chance(0.2)) {
      const float m = Pick<float>({0.0f, 0.05f, 1.0f, -0.01f, 1.01f});
      s.set_min_p(m);
      if (!(m >= 0.0f && m <= 1.0f)) invalid("min_p");
    }
    if (Chance(0.2)) {
      const float rp = Pick<float>({1.0f, 1.3f, 1e-6f, 1e6f, 0.0f, -1.0f});
      s.set_repetition_penalty(rp);
      if (!(rp > 0.0f)) invalid("repetition_penalty");
    }
    if (Chance(0.5)) s.set_seed(rng_());
    if (Chance(0.3)) s.set_ignore_eos(true);
    if (Chance(0.2)) {
      const int id = Chance(0.8) ? Uniform(0, limits_.vocab - 1) : limits_.vocab;
      s.add_stop_token_ids(id);
      if (id >= limits_.vocab) invalid("stop_token_ids");
    }
    if (Chance(0.2)) {
      const std::string stop = Pick<std::string>({"1", " 2", "\n", "", "\xc3"});
      s.add_stop(stop);
      if (stop.empty()) invalid("stop string");
      if (stop == "\xc3") invalid("not valid UTF-8");
    }
    // max_new_tokens: unset (the default fits the context), small, at the room, over it.
    const int room = prompt_tokens >= 0 ? limits_.context - prompt_tokens : -1;
    const int choice = Uniform(0, 5);
    if (choice == 0) {
      c.max_new_tokens = room > 0 ? std::min(128, room) : 128;
    } else if (choice <= 2) {
      s.set_max_new_tokens(Uniform(1, 24));
    } else if (choice == 3 && room > 0) {
      s.set_max_new_tokens(room);
    } else if (choice == 4) {
      s.set_max_new_tokens(Pick<int>({0, -3}));
      invalid("max_new_tokens");
    } else {
      s.set_max_new_tokens(limits_.context + 1);
      invalid("max_new_tokens");
    }
    if (s.has_max_new_tokens()) c.max_new_tokens = s.max_new_tokens();
    if (room > 0 && s.has_max_new_tokens() && s.max_new_tokens() > room &&
        s.max_new_tokens() >= 1 && s.max_new_tokens() <= limits_.context) {
      invalid("max_new_tokens");
    }
    if (Chance(0.5)) r.mutable_output()->set_include_text(false);
    if (Chance(0.15)) c.cancel_after_chunks = Uniform(0, 3);
    return c;
  }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  T Pick(std::initializer_list<T> options) {
    auto it = options.begin();
    std::advance(it, Uniform(0, static_cast<int>(options.size()) - 1));
    return *it;
  }

  std::mt19937_64 rng_;
  Limits limits_;
};

uint64_t Seed() {
  if (const char* env = std::getenv("MLASERVE_RANDOM_SEED")) return std::strtoull(env, nullptr, 10);
  return std::random_device{}();
}

TEST(RandomRequestsTest, EveryOutcomeFollowsTheContractAndEveryPageComesBack) {
  ClusterOptions o;
  o.model_dir = "models/demo";  // has a tokenizer: text prompts are served too
  auto cluster = Cluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Limits limits;
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::GetModelInfoResponse info;
    ASSERT_TRUE((*cluster)->generation().GetModelInfo(&context, {}, &info).ok());
    limits = {info.vocab_size(), info.max_context_length()};
  }
  const uint64_t seed = Seed();
  std::printf("MLASERVE_RANDOM_SEED=%llu\n", static_cast<unsigned long long>(seed));
  Drawer drawer(seed, limits);
  constexpr int kRequests = 96;
  constexpr int kClients = 8;
  std::vector<Case> cases;
  for (int i = 0; i < kRequests; ++i) cases.push_back(drawer.Draw(i));

  absl::Mutex mu;
  std::vector<std::string> failures;
  auto fail = [&](const Case& c, const std::string& what) {
    absl::MutexLock l(&mu);
    failures.push_back(absl::StrCat(c.request.request_id(), ": ", what, "\n  request: ",
                                    c.request.ShortDebugString()));
  };
  auto run = [&](const Case& c) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kRequestTimeout));
    auto reader = (*cluster)->generation().Generate(&context, c.request);
    v1::GenerateResponse m;
    int chunks = 0;
    int tokens = 0;
    bool complete = false;
    bool cancelled = false;
    while (reader->Read(&m)) {
      if (m.has_chunk()) {
        ++chunks;
        tokens = m.chunk().completion_tokens();
        if (chunks - 1 == c.cancel_after_chunks) {
          context.TryCancel();
          cancelled = true;
        }
      } else if (m.has_complete()) {
        complete = true;
        tokens = m.complete().completion_tokens();
      }
    }
    const grpc::Status s = reader->Finish();
    if (!c.invalid_fields.empty()) {
      bool named = false;
      for (const std::string& f : c.invalid_fields) {
        named = named || s.error_message().find(f) != std::string::npos;
      }
      if (s.error_code() != grpc::StatusCode::INVALID_ARGUMENT || !named) {
        fail(c, absl::StrCat("want INVALID_ARGUMENT naming one of \"",
                             absl::StrJoin(c.invalid_fields, "\", \""), "\", got ",
                             s.error_code(), " \"", s.error_message(), "\""));
      }
      return;
    }
    if (s.error_code() == grpc::StatusCode::CANCELLED && cancelled) return;
    if (!s.ok()) {
      fail(c, absl::StrCat("want OK, got ", s.error_code(), " \"", s.error_message(), "\""));
      return;
    }
    if (!complete) fail(c, "OK without a final GenerateComplete");
    if (c.max_new_tokens > 0 && tokens > c.max_new_tokens) {
      fail(c, absl::StrCat(tokens, " tokens for max_new_tokens ", c.max_new_tokens));
    }
  };
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      for (int i = t; i < kRequests; i += kClients) run(cases[i]);
    });
  }
  for (auto& t : clients) t.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << kRequests
                                << " requests broke the contract (seed " << seed << ")";
  // The servers still serve, and nothing kept a page.
  v1::GenerateRequest ok;
  for (int i = 0; i < 5; ++i) ok.mutable_token_ids()->add_ids(3 + i);
  ok.mutable_sampling()->set_max_new_tokens(4);
  GenerateResult after = RunGenerate((*cluster)->generation(), ok, kRequestTimeout);
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
  absl::Status free = (*cluster)->WaitAllPagesFree(absl::Seconds(15));
  EXPECT_TRUE(free.ok()) << free << "\nrouter log:\n" << (*cluster)->router().LogTail();
}

}  // namespace
}  // namespace mlaserve::testing
