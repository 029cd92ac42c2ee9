#include "router/ctl/ctl_commands.h"

#include <cstdio>

#include <grpcpp/generic/generic_stub.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "mlaserve/v1/admin.grpc.pb.h"
#include "mlaserve/v1/api.grpc.pb.h"
#include "router/ctl/ctl_format.h"

namespace mlaserve::router::ctl {
namespace {

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

int Report(const CtlContext& ctx, const grpc::Status& status) {
  if (status.ok()) return kExitOk;
  const int code = ExitCodeFor(status);
  if (code == kExitUnavailable) {
    std::fprintf(stderr, "mlaservectl: server %s unavailable: %s\n", ctx.server.c_str(),
                 DescribeStatus(status).c_str());
  } else {
    std::fprintf(stderr, "mlaservectl: server error: %s\n", DescribeStatus(status).c_str());
  }
  return code;
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
  auto stub = v1::Admin::NewStub(ctx.channel);
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
  if (!s.ok()) return Report(ctx, s);
  Print(ctx.json ? ToJson(resp) : WorkersTable(resp, absl::Now()));
  return kExitOk;
}

int WorkersGet(const CtlContext& ctx, const std::string& id) {
  v1::GetWorkerRequest req;
  req.set_id(id);
  v1::WorkerStatus resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::GetWorker, req, &resp);
  if (!s.ok()) return Report(ctx, s);
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
  if (!s.ok()) return Report(ctx, s);
  Print(ctx.json ? ToJson(resp) : absl::StrCat("added ", resp.id(), " (", RoleLabel(resp.role()),
                                               " at ", resp.address(), ")"));
  return kExitOk;
}

int WorkersRemove(const CtlContext& ctx, const std::string& id) {
  v1::RemoveWorkerRequest req;
  req.set_id(id);
  v1::RemoveWorkerResponse resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::RemoveWorker, req, &resp);
  if (!s.ok()) return Report(ctx, s);
  Print(ctx.json ? ToJson(resp) : absl::StrCat("removed ", id));
  return kExitOk;
}

int WorkersDrain(const CtlContext& ctx, const std::string& id) {
  v1::DrainWorkerRequest req;
  req.set_id(id);
  v1::WorkerStatus resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::DrainWorker, req, &resp);
  if (!s.ok()) return Report(ctx, s);
  Print(ctx.json ? ToJson(resp) : absl::StrCat(id, " is ", StateLabel(resp.state())));
  return kExitOk;
}

int Loads(const CtlContext& ctx) {
  v1::GetLoadsResponse resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::GetLoads, v1::GetLoadsRequest(), &resp);
  if (!s.ok()) return Report(ctx, s);
  Print(ctx.json ? ToJson(resp) : LoadsTable(resp));
  return kExitOk;
}

int ProfilesShow(const CtlContext& ctx, const std::string& worker_id) {
  v1::GetProfilesRequest req;
  req.set_worker_id(worker_id);
  v1::GetProfilesResponse resp;
  grpc::Status s = AdminCall(ctx, &v1::Admin::Stub::GetProfiles, req, &resp);
  if (!s.ok()) return Report(ctx, s);
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

int Health(const CtlContext& ctx, const std::string& service) {
  // grpc.health.v1.HealthCheckRequest { string service = 1; } and
  // HealthCheckResponse { ServingStatus status = 1; } (UNKNOWN 0, SERVING 1, NOT_SERVING 2,
  // SERVICE_UNKNOWN 3), encoded by hand: two one-field messages need no generated code.
  std::string wire;
  if (!service.empty()) {
    wire.push_back(0x0A);
    wire.push_back(static_cast<char>(service.size()));  // names are < 128 bytes
    wire += service;
  }
  grpc::Slice slice(wire);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::GenericStub stub(ctx.channel);
  grpc::ClientContext context;
  SetDeadline(context, ctx.timeout);
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                 &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return Report(ctx, status);
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  int value = 0;  // absent field = UNKNOWN
  if (bytes.size() >= 2 && bytes[0] == 0x08) value = static_cast<unsigned char>(bytes[1]);
  static const char* kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  const char* name = value >= 0 && value < 4 ? kNames[value] : "UNKNOWN";
  if (ctx.json) {
    Print(absl::StrCat("{\"service\": \"", service, "\", \"status\": \"", name, "\"}"));
  } else {
    Print(service.empty() ? name : absl::StrCat(service, ": ", name));
  }
  return value == 1 ? kExitOk : kExitUnavailable;
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
