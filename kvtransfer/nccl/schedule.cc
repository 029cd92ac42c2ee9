#include "kvtransfer/nccl/schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

// FNV-1a, 64-bit: stable across builds and machines (std::hash is not).
void Mix(uint64_t& h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
}
void MixInt(uint64_t& h, int64_t v) { Mix(h, &v, sizeof(v)); }

}  // namespace

absl::StatusOr<TransferPlan> TransferPlan::Make(const PlanParams& params) {
  auto positive = [](const char* name, int64_t v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("nccl transfer plan: ", name, " is ", v, "; it must be positive"));
  };
  if (auto s = positive("num_layers", params.num_layers); !s.ok()) return s;
  if (auto s = positive("num_pages", params.num_pages); !s.ok()) return s;
  if (auto s = positive("layer_page_bytes", params.layer_page_bytes); !s.ok()) return s;
  if (auto s = positive("max_message_pages", params.max_message_pages); !s.ok()) return s;
  if (params.session_id.empty()) {
    return absl::InvalidArgumentError("nccl transfer plan: empty session id");
  }
  TransferPlan plan;
  plan.params_ = params;
  for (int l = 0; l < params.num_layers; ++l) {
    plan.layer_begin_.push_back(static_cast<int>(plan.steps_.size()));
    for (int p = 0; p < params.num_pages; p += params.max_message_pages) {
      TransferStep s;
      s.layer = l;
      s.first_page = p;
      s.num_pages = std::min(params.max_message_pages, params.num_pages - p);
      s.bytes = static_cast<int64_t>(s.num_pages) * params.layer_page_bytes;
      plan.total_bytes_ += s.bytes;
      plan.max_step_bytes_ = std::max(plan.max_step_bytes_, s.bytes);
      plan.steps_.push_back(s);
    }
  }
  plan.layer_begin_.push_back(static_cast<int>(plan.steps_.size()));
  uint64_t h = 0xcbf29ce484222325ULL;
  Mix(h, params.session_id.data(), params.session_id.size());
  MixInt(h, params.num_layers);
  MixInt(h, params.num_pages);
  MixInt(h, params.layer_page_bytes);
  MixInt(h, params.max_message_pages);
  plan.digest_ = h;
  return plan;
}

}  // namespace mlaserve::kvtransfer::nccl
