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
  if (params.source_rank < 0 || params.dest_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("nccl transfer plan: source rank ",
                                                   params.source_rank, ", dest rank ",
                                                   params.dest_rank, "; ranks are >= 0"));
  }
  if (params.coalesce_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("nccl transfer plan: coalesce_bytes is ",
                                                   params.coalesce_bytes,
                                                   "; it must be 0 (off) or positive"));
  }
  TransferPlan plan;
  plan.params_ = params;
  const int64_t layer_bytes = int64_t{params.num_pages} * params.layer_page_bytes;
  // Whole layers per message: as many as fit in coalesce_bytes and max_message_pages, >= 1.
  int per_message = 1;
  if (params.num_pages <= params.max_message_pages && params.coalesce_bytes > layer_bytes) {
    per_message = static_cast<int>(std::min<int64_t>(
        {params.coalesce_bytes / layer_bytes, params.max_message_pages / params.num_pages,
         params.num_layers}));
  }
  auto add = [&plan](TransferStep s) {
    if (plan.steps_.empty()) s.payload_offset = sizeof(PlanHeader);
    plan.total_bytes_ += s.bytes;
    plan.max_step_bytes_ = std::max(plan.max_step_bytes_, s.message_bytes());
    plan.steps_.push_back(s);
  };
  for (int l = 0; l < params.num_layers;) {
    if (per_message > 1) {
      TransferStep s;
      s.layer = l;
      s.num_layers = std::min(per_message, params.num_layers - l);
      s.num_pages = params.num_pages;
      s.bytes = s.num_layers * layer_bytes;
      for (int k = 0; k < s.num_layers; ++k) {
        plan.first_step_.push_back(static_cast<int>(plan.steps_.size()));
        plan.end_step_.push_back(static_cast<int>(plan.steps_.size()) + 1);
      }
      l += s.num_layers;
      add(s);
      continue;
    }
    plan.first_step_.push_back(static_cast<int>(plan.steps_.size()));
    for (int p = 0; p < params.num_pages; p += params.max_message_pages) {
      TransferStep s;
      s.layer = l;
      s.first_page = p;
      s.num_pages = std::min(params.max_message_pages, params.num_pages - p);
      s.bytes = static_cast<int64_t>(s.num_pages) * params.layer_page_bytes;
      add(s);
    }
    plan.end_step_.push_back(static_cast<int>(plan.steps_.size()));
    ++l;
  }
  uint64_t h = 0xcbf29ce484222325ULL;
  Mix(h, params.session_id.data(), params.session_id.size());
  MixInt(h, params.num_layers);
  MixInt(h, params.num_pages);
  MixInt(h, params.layer_page_bytes);
  MixInt(h, params.max_message_pages);
  MixInt(h, params.coalesce_bytes);
  MixInt(h, params.source_rank);
  MixInt(h, params.dest_rank);
  plan.digest_ = h;
  return plan;
}

std::string TransferPlan::Describe() const {
  return absl::StrCat("session ", params_.session_id, ": prefill rank ", params_.source_rank,
                      " -> decode rank ", params_.dest_rank, ", ", params_.num_layers,
                      " layers x ", params_.num_pages, " pages of ", params_.layer_page_bytes,
                      " B in ", steps_.size(), " message(s), ", total_bytes_, " B, digest ",
                      absl::Hex(digest_, absl::kZeroPad16));
}

}  // namespace mlaserve::kvtransfer::nccl
