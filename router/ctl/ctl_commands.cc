#include "router/ctl/ctl_commands.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mlaserve/v1/admin.grpc.pb.h"
#include "mlaserve/v1/api.grpc.pb.h"
#include "router/ctl/ctl_format.h"

namespace mlaserve::router::ctl {
namespace {

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

int Report(const std::string& server, const grpc::Status& status) {
  if (status.ok()) return kExitOk;
  const int code = ExitCodeFor(status);
  if (code == kExitUnavailable) {
    std::fprintf(stderr, "mlaservectl: server %s unavailable: %s\n", server.c_str(),
                 DescribeStatus(status).c_str());
  } else {
    std::fprintf(stderr, "mlaservectl: server error: %s\n", DescribeStatus(status).c_str());
  }
  return code;
}
int Report(const CtlContext& ctx, const grpc::Status& status) { return Report(ctx.server, status); }
int ReportAdmin(const CtlContext& ctx, const grpc::Status& status) {
  return Report(ctx.admin_server, status);
}

void Print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::optional<v1::WorkerRole> ParseRole(const std::string& role) {
  if (role == "prefill") return v1::WORKER_ROLE_PREFILL;
  if (role == "decode") return v1::WORKER_ROLE_DECODE;
  if (role.empty()) return v1::WORKER_ROLE_UNSPECIFIED;
  return std::nullopt;
}

template <typename Req, typename Resp, typename Method>
grpc::Status AdminCall(const CtlContext& ctx, Method method, const Req& req, Resp* resp) {
  auto stub = v1::Admin::NewStub(ctx.admin_channel);
  grpc::ClientContext context;
  SetDeadline(context, ctx.timeout);
  return ((*stub).*method)(&context, req, resp);
}

}  // namespace

int WorkersList(const CtlContext& ctx, const std::string& role) {
  std::optional<v1::WorkerRole> r = ParseRole(role);
  if (!r) {
    std::fprintf(stderr, "mlaservectl: --role must be prefill or decode, not '%s'\n", role.c_str());
    return kExitUsage;
  }
  v1::ListWorkersRequest req;
  req.set_role(*r);
  v1::ListWorkersResponse resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::ListWorkers, req, &resp);
  if (!s.ok()) return ReportAdmin(ctx, s);
  Print(ctx.json ? ToJson(resp) : WorkersTable(resp, absl::Now()));
  return kExitOk;
}

int WorkersGet(const CtlContext& ctx, const std::string& id) {
  v1::GetWorkerRequest req;
  req.set_id(id);
  v1::WorkerStatus resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::GetWorker, req, &resp);
  if (!s.ok()) return ReportAdmin(ctx, s);
  Print(ctx.json ? ToJson(resp) : WorkerDetail(resp, absl::Now()));
  return kExitOk;
}

int WorkersAdd(const CtlContext& ctx, const std::string& role, const std::string& address) {
  std::optional<v1::WorkerRole> r = ParseRole(role);
  if (!r || *r == v1::WORKER_ROLE_UNSPECIFIED) {
    std::fprintf(stderr, "mlaservectl: --role must be prefill or decode, not '%s'\n", role.c_str());
    return kExitUsage;
  }
  v1::AddWorkerRequest req;
  req.set_role(*r);
  req.set_address(address);
  v1::WorkerStatus resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::AddWorker, req, &resp);
  if (!s.ok()) return ReportAdmin(ctx, s);
  Print(ctx.json ? ToJson(resp) : absl::StrCat("added ", resp.id(), " (", RoleLabel(resp.role()),
                                               " at ", resp.address(), ")"));
  return kExitOk;
}

int WorkersRemove(const CtlContext& ctx, const std::string& id) {
  v1::RemoveWorkerRequest req;
  req.set_id(id);
  v1::RemoveWorkerResponse resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::RemoveWorker, req, &resp);
  if (!s.ok()) return ReportAdmin(ctx, s);
  Print(ctx.json ? ToJson(resp) : absl::StrCat("removed ", id));
  return kExitOk;
}

int WorkersDrain(const CtlContext& ctx, const std::string& id) {
  v1::DrainWorkerRequest req;
  req.set_id(id);
  v1::WorkerStatus resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::DrainWorker, req, &resp);
  if (!s.ok()) return ReportAdmin(ctx, s);
  Print(ctx.json ? ToJson(resp) : absl::StrCat(id, " is ", StateLabel(resp.state())));
  return kExitOk;
}

int WorkersUndrain(const CtlContext& ctx, const std::string& id) {
  v1::UndrainWorkerRequest req;
  req.set_id(id);
  v1::WorkerStatus resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::UndrainWorker, req, &resp);
  if (!s.ok()) return ReportAdmin(ctx, s);
  Print(ctx.json ? ToJson(resp) : absl::StrCat(id, " is ", StateLabel(resp.state())));
  return kExitOk;
}

int Loads(const CtlContext& ctx) {
  v1::GetLoadsResponse resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::GetLoads, v1::GetLoadsRequest(), &resp);
  if (!s.ok()) return ReportAdmin(ctx, s);
  Print(ctx.json ? ToJson(resp) : LoadsTable(resp));
  return kExitOk;
}

int ProfilesShow(const CtlContext& ctx, const std::string& worker_id) {
  v1::GetProfilesRequest req;
  req.set_worker_id(worker_id);
  v1::GetProfilesResponse resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::GetProfiles, req, &resp);
  if (!s.ok()) return ReportAdmin(ctx, s);
  if (ctx.json) {
    Print(ToJson(resp));
  } else {
    std::string out = ProfilesTable(resp);
    // One worker asked for: its whole profile document too.
    if (!worker_id.empty() && resp.workers_size() == 1) {
      const std::string& doc = resp.workers(0).profile().profile_json();
      absl::StrAppend(&out, "\n", doc.empty() ? "(the worker reported no profile document)" : doc);
    }
    Print(out);
  }
  return kExitOk;
}

int Health(const CtlContext& ctx, const std::string& service, bool admin) {
  auto stub = grpc::health::v1::Health::NewStub(admin ? ctx.admin_channel : ctx.channel);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext context;
  SetDeadline(context, ctx.timeout);
  grpc::Status status = stub->Check(&context, req, &resp);
  if (!status.ok()) return Report(admin ? ctx.admin_server : ctx.server, status);
  const std::string name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
  if (ctx.json) {
    Print(nlohmann::json{{"service", service}, {"status", name}}.dump());
  } else {
    Print(service.empty() ? name : absl::StrCat(service, ": ", name));
  }
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk
                                                                          : kExitUnavailable;
}

int Info(const CtlContext& ctx) {
  auto stub = v1::Generation::NewStub(ctx.channel);
  v1::GetServerInfoResponse server;
  v1::GetModelInfoResponse model;
  {
    grpc::ClientContext context;
    SetDeadline(context, ctx.timeout);
    grpc::Status s = stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &server);
    if (!s.ok()) return Report(ctx, s);
  }
  {
    grpc::ClientContext context;
    SetDeadline(context, ctx.timeout);
    grpc::Status s = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &model);
    if (!s.ok()) return Report(ctx, s);
  }
  if (ctx.json) {
    Print(absl::StrCat("{\"server\": ", ToJson(server, false), ", \"model\": ", ToJson(model, false), "}"));
  } else {
    Print(RenderTable(
        {"FIELD", "VALUE"},
        {{"version", server.version()},
         {"model", absl::StrCat(model.model_name(), " (", model.model_type(), ")")},
         {"context", absl::StrCat(model.max_context_length(), " tokens")},
         {"vocab", absl::StrCat(model.vocab_size())},
         {"prefill workers", absl::StrCat(server.prefill_workers_healthy(), " healthy of ",
                                          server.prefill_workers_total())},
         {"decode workers", absl::StrCat(server.decode_workers_healthy(), " healthy of ",
                                         server.decode_workers_total())},
         {"active requests", absl::StrCat(server.active_requests())},
         {"total requests", absl::StrCat(server.total_requests())}}));
  }
  return kExitOk;
}

}  // namespace mlaserve::router::ctl
