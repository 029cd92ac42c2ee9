#include "tests/integration/cluster.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <sys/wait.h>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/transport_security.h"

namespace mlaserve::testing {

std::string RouterBinary() { return MLASERVE_ROUTER_BIN; }
std::string PrefillBinary() { return MLASERVE_PREFILL_BIN; }
std::string DecodeBinary() { return MLASERVE_DECODE_BIN; }
std::string RunBinary() { return MLASERVE_RUN_BIN; }
std::string CtlBinary() { return MLASERVE_CTL_BIN; }

CommandRun RunCommand(const std::string& cmd) {
  CommandRun r;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.out.append(buf, n);
  const int status = pclose(f);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

namespace {
constexpr absl::Duration kStartTimeout = absl::Seconds(60);
}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> Cluster::StartDecode(const std::string& model_dir,
                                                                    const std::string& name,
                                                                    bool register_with_router) {
  std::vector<std::string> argv = {DecodeBinary(), "--listen", "127.0.0.1:0",
                                   "--model", model_dir, "--backend", "cpu", "--num-kv-pages",
                                   absl::StrCat(options_.num_kv_pages), "--local-prefill-threshold",
                                   absl::StrCat(options_.local_prefill_threshold),
                                   "--metrics-port", options_.worker_metrics ? "0" : "-1"};
  argv.insert(argv.end(), options_.security_flags.begin(), options_.security_flags.end());
  for (const auto& f : options_.extra_decode_flags) argv.push_back(f);
  if (register_with_router) {
    argv.push_back("--router");
    argv.push_back(admin_address_);
  }
  return ServerProcess::Start(argv, absl::StrCat(dir_, "/", name, ".log"), kStartTimeout);
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(const ClusterOptions& o) {
  std::unique_ptr<Cluster> c(new Cluster);
  c->options_ = o;
  c->dir_ = MakeTempDir("mlaserve-cluster-");
  std::vector<std::string> router_argv = {RouterBinary(), "--listen", "127.0.0.1:0",
                                          "--admin-listen", "127.0.0.1:0", "--model",
                                          o.model_dir, "--metrics-port", "-1",
                                          "--poll-interval-ms", "100",
                                          "--heartbeat-timeout-ms", "2000"};
  router_argv.insert(router_argv.end(), o.security_flags.begin(), o.security_flags.end());
  // Extra flags replace defaults of the same name (the router refuses a repeated flag). A
  // "--flag=value" item stands alone: CLI11 switches (--decode-affinity) take a value only so.
  const std::vector<std::string>& extra = o.extra_router_flags;
  for (size_t i = 0; i < extra.size(); ++i) {
    if (extra[i].find('=') != std::string::npos) {
      router_argv.push_back(extra[i]);
      continue;
    }
    if (i + 1 == extra.size()) break;
    auto it = std::find(router_argv.begin(), router_argv.end(), extra[i]);
    if (it != router_argv.end()) {
      *(it + 1) = extra[i + 1];
    } else {
      router_argv.insert(router_argv.end(), {extra[i], extra[i + 1]});
    }
    ++i;  // the value
  }
  if (!o.admin_token.empty()) {
    const std::string path = c->dir_ + "/admin-token";
    std::ofstream(path) << o.admin_token << "\n";
    router_argv.insert(router_argv.end(), {"--admin-token-file", path});
  }
  auto start_router = [&]() -> absl::Status {
    auto r = ServerProcess::Start(router_argv, c->dir_ + "/router.log", kStartTimeout);
    if (!r.ok()) return r.status();
    c->router_ = *std::move(r);
    absl::StatusOr<std::string> admin = c->router_->WaitForLine("admin listening on ", kStartTimeout);
    if (!admin.ok()) return admin.status();
    c->admin_address_ = *admin;
    return absl::OkStatus();
  };
  auto start_worker = [&](const std::string& bin, const std::string& name,
                          bool decode) -> absl::StatusOr<std::unique_ptr<ServerProcess>> {
    std::vector<std::string> argv = {bin, "--listen", "127.0.0.1:0", "--model", o.model_dir,
                                     "--backend", "cpu", "--num-kv-pages",
                                     absl::StrCat(o.num_kv_pages), "--metrics-port",
                                     o.worker_metrics ? "0" : "-1"};
    argv.insert(argv.end(), o.security_flags.begin(), o.security_flags.end());
    if (decode) {
      argv.push_back("--local-prefill-threshold");
      argv.push_back(absl::StrCat(o.local_prefill_threshold));
      for (const auto& f : o.extra_decode_flags) argv.push_back(f);
    } else {
      for (const auto& f : o.extra_prefill_flags) argv.push_back(f);
    }
    if (o.self_register) {
      argv.push_back("--router");
      argv.push_back(c->admin_address_);
    }
    return ServerProcess::Start(argv, absl::StrCat(c->dir_, "/", name, ".log"), kStartTimeout);
  };
  if (o.self_register) {
    if (absl::Status st = start_router(); !st.ok()) return st;
  }
  for (int i = 0; i < o.prefill_workers; ++i) {
    auto p = start_worker(PrefillBinary(), absl::StrCat("prefill", i), false);
    if (!p.ok()) return p.status();
    c->prefill_.push_back(*std::move(p));
  }
  for (int i = 0; i < o.decode_workers; ++i) {
    auto d = start_worker(DecodeBinary(), absl::StrCat("decode", i), true);
    if (!d.ok()) return d.status();
    c->decode_.push_back(*std::move(d));
  }
  if (!o.self_register) {
    for (auto& p : c->prefill_) router_argv.insert(router_argv.end(), {"--prefill", p->address()});
    for (auto& d : c->decode_) router_argv.insert(router_argv.end(), {"--decode", d->address()});
    if (absl::Status st = start_router(); !st.ok()) return st;
  }
  auto public_dialer = common::ClusterDialer::Create(o.client_tls, "");
  if (!public_dialer.ok()) return public_dialer.status();
  auto channel = (*public_dialer)->Dial(c->router_->address(), {});
  if (absl::Status st = WaitForServing(c->router_->address(), "mlaserve.v1.Generation",
                                       absl::Seconds(30), channel);
      !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(st.message(), "\nrouter log:\n",
                                                c->router_->LogTail()));
  }
  c->generation_ = v1::Generation::NewStub(channel);
  auto dialer = common::ClusterDialer::Create(o.client_tls, o.admin_token);
  if (!dialer.ok()) return dialer.status();
  c->admin_ = v1::Admin::NewStub((*dialer)->Dial(c->admin_address_, {}));
  return c;
}

absl::Status Cluster::WaitAllPagesFree(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  // A worker's load is the one the router last heard, which may predate the caller's last
  // request (a snapshot from before the request's pages were taken shows them all free). So
  // only a report from a later poll round than the first one that ended after this call
  // began counts: rounds are sequential, so that report was asked for after the call began.
  const int64_t start_ms = absl::ToUnixMillis(absl::Now());
  absl::flat_hash_map<std::string, int64_t> first_round_ms;  // per worker id
  std::string last;
  while (absl::Now() < deadline) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    v1::ListWorkersRequest request;
    request.set_role(v1::WORKER_ROLE_DECODE);
    v1::ListWorkersResponse workers;
    grpc::Status s = admin_->ListWorkers(&context, request, &workers);
    bool all_free = s.ok();
    last.clear();
    for (const v1::WorkerStatus& w : workers.workers()) {
      const v1::WorkerLoad& load = w.info().load();
      absl::StrAppend(&last, w.id(), " ", load.kv_pages_free(), "/", load.kv_pages_total(),
                      " free, ", w.router_inflight(), " in flight; ");
      bool fresh = false;
      if (w.last_seen_unix_ms() > start_ms) {
        auto [it, first] = first_round_ms.try_emplace(w.id(), w.last_seen_unix_ms());
        fresh = !first && w.last_seen_unix_ms() > it->second;
      }
      all_free = all_free && fresh && load.kv_pages_total() > 0 &&
                 load.kv_pages_free() == load.kv_pages_total() && w.router_inflight() == 0;
    }
    if (all_free) return absl::OkStatus();
    // Loads refresh on the router's poll period (100 ms here).
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("KV pages not all free: ", last));
}

GenerateResult RunGenerate(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
                           absl::Duration timeout, grpc::ClientContext* context) {
  grpc::ClientContext local;
  if (context == nullptr) context = &local;
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  GenerateResult r;
  const absl::Time start = absl::Now();
  auto reader = stub.Generate(context, request);
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
    if (m.has_chunk()) {
      r.ids.insert(r.ids.end(), m.chunk().token_ids().begin(), m.chunk().token_ids().end());
      r.text += m.chunk().text();
    } else if (m.has_complete()) {
      r.complete = m.complete();
    }
  }
  r.status = reader->Finish();
  r.elapsed = absl::Now() - start;
  return r;
}

absl::StatusOr<std::vector<int32_t>> ReferenceTokens(const std::string& model_dir,
                                                     const std::vector<int32_t>& prompt,
                                                     int max_new_tokens, float temperature,
                                                     std::optional<uint64_t> seed) {
  std::string cmd = absl::StrCat(RunBinary(), " --model ", model_dir, " --backend cpu --prompt-ids ",
                                 absl::StrJoin(prompt, ","), " --max-new-tokens ", max_new_tokens,
                                 " --temperature ", temperature, " --print-ids");
  if (seed) absl::StrAppend(&cmd, " --seed ", *seed);
  absl::StrAppend(&cmd, " 2>/dev/null");
  const CommandRun run = RunCommand(cmd);
  if (run.exit_code != 0) return absl::InternalError(absl::StrCat(cmd, " exited with ", run.exit_code));
  const std::string& out = run.out;
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(out, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) return absl::InternalError(absl::StrCat("bad output: ", out));
    ids.push_back(id);
  }
  return ids;
}

}  // namespace mlaserve::testing
