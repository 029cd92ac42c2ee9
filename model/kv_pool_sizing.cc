#include "model/kv_pool_sizing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "parallel/rank_rendezvous.h"

namespace mlaserve::model {
namespace {

std::string GiB(double bytes) { return absl::StrFormat("%.2f GiB", bytes / (1024.0 * 1024 * 1024)); }

}  // namespace

absl::StatusOr<int> KvPagesForMemory(const DeviceMemoryInfo& memory, double fraction,
                                     size_t page_bytes, int min_pages, int64_t max_pages) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mem-fraction-static is ", fraction, "; it must be in (0, 1]"));
  }
  if (page_bytes == 0) return absl::InvalidArgumentError("KV page size is 0 bytes");
  const double total = static_cast<double>(memory.total_bytes);
  const double used = static_cast<double>(memory.total_bytes - std::min(memory.free_bytes, memory.total_bytes));
  const double left = fraction * total - used;
  const double fit = std::floor(std::max(left, 0.0) / static_cast<double>(page_bytes));
  const double cap = static_cast<double>(
      std::min<int64_t>(std::max<int64_t>(max_pages, min_pages), std::numeric_limits<int32_t>::max() - 1));
  const int pages = static_cast<int>(std::min(fit, cap));
  if (pages < min_pages) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "--mem-fraction-static ", fraction, " of the device's ", GiB(total), " leaves ",
        GiB(left), " for the KV pool with ", GiB(used),
        " in use (this process's weights and whatever else runs on the device): ", pages,
        " pages of ", page_bytes, " bytes, fewer than the ", min_pages,
        " needed; raise --mem-fraction-static, free device memory or set --num-kv-pages"));
  }
  return pages;
}

absl::StatusOr<int> AgreeOnFewestPages(parallel::RankRendezvous& ranks, int rank, int pages) {
  int32_t offered = pages, agreed = 0;
  parallel::CollectiveCall call;
  call.op = parallel::CollectiveOp::kAllReduce;
  call.count = 1;
  call.dtype = kernels::DType::kI32;
  call.send = &offered;
  call.recv = &agreed;
  RETURN_IF_ERROR(ranks.Meet(rank, call, [](std::span<const parallel::CollectiveCall> calls) {
    int32_t fewest = std::numeric_limits<int32_t>::max();
    for (const parallel::CollectiveCall& c : calls) fewest = std::min(fewest, *static_cast<const int32_t*>(c.send));
    for (const parallel::CollectiveCall& c : calls) *static_cast<int32_t*>(c.recv) = fewest;
  }));
  return agreed;
}

}  // namespace mlaserve::model
