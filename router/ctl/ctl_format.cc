#include "router/ctl/ctl_format.h"

#include <algorithm>

#include <google/protobuf/util/json_util.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mlaserve::router::ctl {

int ExitCodeFor(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::OK: return kExitOk;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED: return kExitUnavailable;
    default: return kExitServerError;
  }
}

std::string DescribeStatus(const grpc::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                      ": ", status.error_message());
}

std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size() && c < width.size(); ++c) {
      l += cells[c];
      if (c + 1 < cells.size()) l += std::string(width[c] - cells[c].size() + 2, ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
  return out;
}

std::string RoleLabel(v1::WorkerRole role) {
  switch (role) {
    case v1::WORKER_ROLE_PREFILL: return "prefill";
    case v1::WORKER_ROLE_DECODE: return "decode";
    default: return "?";
  }
}

std::string StateLabel(v1::WorkerState state) {
  switch (state) {
    case v1::WORKER_STATE_STARTING: return "starting";
    case v1::WORKER_STATE_HEALTHY: return "healthy";
    case v1::WORKER_STATE_UNHEALTHY: return "unhealthy";
    case v1::WORKER_STATE_DRAINING: return "draining";
    case v1::WORKER_STATE_INCOMPATIBLE: return "incompatible";
    default: return "?";
  }
}

std::string SourceLabel(v1::WorkerSource source) {
  switch (source) {
    case v1::WORKER_SOURCE_STATIC: return "static";
    case v1::WORKER_SOURCE_ADMIN: return "admin";
    case v1::WORKER_SOURCE_SELF_REGISTERED: return "registered";
    default: return "?";
  }
}

namespace {

std::string Ago(int64_t unix_ms, absl::Time now) {
  if (unix_ms == 0) return "never";
  const double s = absl::ToDoubleSeconds(now - absl::FromUnixMillis(unix_ms));
  return absl::StrFormat("%.1fs ago", std::max(0.0, s));
}

// "free/total", and each data-parallel rank's in brackets: "9/16 [3/8 6/8]".
std::string Pages(const v1::WorkerLoad& load) {
  std::string out = absl::StrCat(load.kv_pages_free(), "/", load.kv_pages_total());
  for (int r = 0; r < load.ranks_size(); ++r) {
    absl::StrAppend(&out, r == 0 ? " [" : " ", load.ranks(r).kv_pages_free(), "/",
                    load.ranks(r).kv_pages_total(), r + 1 == load.ranks_size() ? "]" : "");
  }
  return out;
}

// "2 / 1", and each data-parallel rank's: "2 / 1 [rank 0: 1 / 1, rank 1: 1 / 0]".
std::string RunningPending(const v1::WorkerLoad& load) {
  std::string out = absl::StrCat(load.running_requests(), " / ", load.pending_requests());
  for (int r = 0; r < load.ranks_size(); ++r) {
    absl::StrAppend(&out, r == 0 ? " [" : ", ", "rank ", r, ": ", load.ranks(r).running_requests(),
                    " / ", load.ranks(r).pending_requests(), r + 1 == load.ranks_size() ? "]" : "");
  }
  return out;
}

}  // namespace

std::string WorkersTable(const v1::ListWorkersResponse& response, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::WorkerStatus& w : response.workers()) {
    rows.push_back({w.id(), RoleLabel(w.role()), w.address(), StateLabel(w.state()),
                    SourceLabel(w.source()), Pages(w.info().load()),
                    absl::StrCat(w.info().load().running_requests()),
                    absl::StrCat(w.router_inflight()), Ago(w.last_seen_unix_ms(), now),
                    w.last_error()});
  }
  return RenderTable({"ID", "ROLE", "ADDRESS", "STATE", "SOURCE", "FREE/TOTAL PAGES", "RUNNING",
                      "INFLIGHT", "LAST SEEN", "ERROR"},
                     rows);
}

std::string WorkerDetail(const v1::WorkerStatus& w, absl::Time now) {
  const v1::WorkerDescriptor& d = w.info();
  std::vector<std::vector<std::string>> rows = {
      {"id", w.id()},
      {"role", RoleLabel(w.role())},
      {"address", w.address()},
      {"state", StateLabel(w.state())},
      {"source", SourceLabel(w.source())},
      {"last seen", Ago(w.last_seen_unix_ms(), now)},
      {"last error", w.last_error()},
      {"model", absl::StrCat(d.model().model_name(), " (", d.model().model_type(), ")")},
      {"kv compat hash", d.model().kv_compat_hash()},
      {"backend", absl::StrCat(d.backend(), " device ", d.device())},
      {"gpus", absl::StrCat(d.gpus(), d.parallel_layout().empty() ? "" : " (",
                            d.parallel_layout(), d.parallel_layout().empty() ? "" : ")")},
      {"version", d.version()},
      {"kv transport", d.kv_transport()},
      {"prefix cache", d.prefix_cache() ? "on" : "off"},
      {"gpu", d.profile().gpu_name()},
      {"profile", d.profile().source()},
      {"local prefill threshold", absl::StrCat(d.profile().local_prefill_threshold())},
      {"kv pages free/total", Pages(d.load())},
      {"running / pending", RunningPending(d.load())},
      {"pending prefill tokens", absl::StrCat(d.load().pending_prefill_tokens())},
      {"router inflight", absl::StrCat(w.router_inflight())},
  };
  if (w.role() == v1::WORKER_ROLE_DECODE) {
    // Whether a remotely prefilled prompt keeps the pages this worker caches: a decode worker
    // older than the field is shipped every page (seen during a rolling upgrade).
    const auto cache = std::find_if(rows.begin(), rows.end(),
                                    [](const auto& row) { return row[0] == "prefix cache"; });
    rows.insert(cache + 1, {"remote prefill reuse",
                            d.remote_prefill_reuse() ? "yes" : "no (older decode worker)"});
  }
  return RenderTable({"FIELD", "VALUE"}, rows);
}

std::string LoadsTable(const v1::GetLoadsResponse& response) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::WorkerLoadEntry& e : response.workers()) {
    rows.push_back({e.id(), RoleLabel(e.role()), StateLabel(e.state()), Pages(e.load()),
                    absl::StrCat(e.load().running_requests()),
                    absl::StrCat(e.load().pending_requests()),
                    absl::StrCat(e.load().pending_prefill_tokens()),
                    absl::StrCat(e.router_inflight())});
  }
  return RenderTable({"ID", "ROLE", "STATE", "FREE/TOTAL PAGES", "RUNNING", "PENDING",
                      "PENDING PREFILL TOKENS", "INFLIGHT"},
                     rows);
}

std::string ProfilesTable(const v1::GetProfilesResponse& response) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::WorkerProfileEntry& e : response.workers()) {
    rows.push_back({e.id(), RoleLabel(e.role()), e.profile().gpu_name(), e.profile().source(),
                    absl::StrCat(e.profile().local_prefill_threshold()),
                    absl::StrCat(e.profile().chunk_size())});
  }
  return RenderTable({"ID", "ROLE", "GPU", "PROFILE", "LOCAL PREFILL THRESHOLD", "CHUNK SIZE"},
                     rows);
}

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

}  // namespace mlaserve::router::ctl
