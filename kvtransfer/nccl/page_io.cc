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

absl::Status HostPageIo::CheckRange(int first, int n, int i, int64_t offset) const {
  if (first < 0 || n < 0 || first + n > static_cast<int>(pages_.size())) {
    return absl::OutOfRangeError(absl::StrCat("HostPageIo: pages [", first, ", ", first + n,
                                              ") outside the session's ", pages_.size()));
  }
  if (offset < 0 || offset + static_cast<int64_t>(n * page_bytes_) >
                        static_cast<int64_t>(slots_[i].size())) {
    return absl::InvalidArgumentError(absl::StrCat("HostPageIo: ", n, " pages at offset ", offset,
                                                   " do not fit a slot of ", slots_[i].size(),
                                                   " bytes"));
  }
  return absl::OkStatus();
}

absl::Status HostPageIo::Gather(int layer, int first, int n, int i, int64_t offset) {
  if (auto s = CheckRange(first, n, i, offset); !s.ok()) return s;
  uint8_t* dst = slots_[i].data() + offset;
  for (int p = 0; p < n; ++p) {
    if (auto s = pool_->ReadPage(layer, pages_[first + p], dst + p * page_bytes_); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status HostPageIo::Scatter(int layer, int first, int n, int i, int64_t offset) {
  if (auto s = CheckRange(first, n, i, offset); !s.ok()) return s;
  const uint8_t* src = slots_[i].data() + offset;
  for (int p = 0; p < n; ++p) {
    if (auto s = pool_->WritePage(layer, pages_[first + p], src + p * page_bytes_); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status HostPageIo::StageHeader(int i, const void* host, size_t bytes) {
  if (bytes > sizeof(header_) || bytes > slots_[i].size()) {
    return absl::InvalidArgumentError(absl::StrCat("HostPageIo: header of ", bytes, " bytes"));
  }
  std::memcpy(slots_[i].data(), host, bytes);
  return absl::OkStatus();
}

absl::Status HostPageIo::KeepHeader(int i, size_t bytes) {
  if (bytes > sizeof(header_) || bytes > slots_[i].size()) {
    return absl::InvalidArgumentError(absl::StrCat("HostPageIo: header of ", bytes, " bytes"));
  }
  std::memcpy(header_, slots_[i].data(), bytes);
  return absl::OkStatus();
}

absl::Status HostPageIo::TakenHeader(void* host, size_t bytes) {
  if (bytes > sizeof(header_)) return absl::InvalidArgumentError("HostPageIo: header too big");
  std::memcpy(host, header_, bytes);
  return absl::OkStatus();
}

}  // namespace mlaserve::kvtransfer::nccl
