#include "kvtransfer/nccl/page_io.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace mlaserve::kvtransfer::nccl {

HostPageIo::HostPageIo(model::KvPool* pool, int num_slots, size_t slot_bytes)
    : pool_(pool), page_bytes_(pool->layer_page_bytes()), slots_(num_slots) {
  for (auto& s : slots_) s.resize(slot_bytes);
}

absl::Status HostPageIo::SetPages(std::span<const int32_t> pages) {
  pages_.assign(pages.begin(), pages.end());
  return absl::OkStatus();
}

absl::Status HostPageIo::CheckRange(int first, int n, int i) const {
  if (first < 0 || n < 0 || first + n > static_cast<int>(pages_.size())) {
    return absl::OutOfRangeError(absl::StrCat("HostPageIo: pages [", first, ", ", first + n,
                                              ") outside the session's ", pages_.size()));
  }
  if (static_cast<size_t>(n) * page_bytes_ > slots_[i].size()) {
    return absl::InvalidArgumentError(absl::StrCat("HostPageIo: ", n,
                                                   " pages do not fit a slot of ",
                                                   slots_[i].size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status HostPageIo::Gather(int layer, int first, int n, int i) {
  if (auto s = CheckRange(first, n, i); !s.ok()) return s;
  for (int p = 0; p < n; ++p) {
    if (auto s = pool_->ReadPage(layer, pages_[first + p], slots_[i].data() + p * page_bytes_);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status HostPageIo::Scatter(int layer, int first, int n, int i) {
  if (auto s = CheckRange(first, n, i); !s.ok()) return s;
  for (int p = 0; p < n; ++p) {
    if (auto s = pool_->WritePage(layer, pages_[first + p], slots_[i].data() + p * page_bytes_);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status HostPageIo::PutHeader(const void* host, size_t bytes) {
  if (bytes > sizeof(header_)) return absl::InvalidArgumentError("HostPageIo: header too big");
  std::memcpy(header_, host, bytes);
  return absl::OkStatus();
}

absl::Status HostPageIo::GetHeader(void* host, size_t bytes) {
  if (bytes > sizeof(header_)) return absl::InvalidArgumentError("HostPageIo: header too big");
  std::memcpy(host, header_, bytes);
  return absl::OkStatus();
}

}  // namespace mlaserve::kvtransfer::nccl
