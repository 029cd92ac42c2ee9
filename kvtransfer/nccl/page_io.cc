#include "kvtransfer/nccl/page_io.h"

#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"

namespace mlaserve::kvtransfer::nccl {

absl::Status CheckSlotBlock(const SlotBlock& b, const model::KvPool& pool, size_t session_pages,
                            int num_slots, size_t slot_bytes, const char* who) {
  if (b.num_layers < 1 || b.num_pages < 1) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": a block of ", b.num_layers,
                                                   " layers x ", b.num_pages,
                                                   " pages; both must be positive"));
  }
  if (b.slot < 0 || b.slot >= num_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": slot ", b.slot, " outside [0, ", num_slots, ")"));
  }
  const int pool_layers = pool.options().num_layers;
  if (b.first_layer < 0 || b.first_layer > pool_layers - b.num_layers) {
    return absl::OutOfRangeError(absl::StrCat(who, ": layers [", b.first_layer, ", ",
                                              int64_t{b.first_layer} + b.num_layers,
                                              ") outside the pool's ", pool_layers));
  }
  if (b.first_page < 0 || static_cast<size_t>(b.first_page) + b.num_pages > session_pages) {
    return absl::OutOfRangeError(absl::StrCat(who, ": pages [", b.first_page, ", ",
                                              int64_t{b.first_page} + b.num_pages,
                                              ") outside the session's ", session_pages));
  }
  const int64_t bytes = int64_t{b.num_layers} * b.num_pages *
                        static_cast<int64_t>(pool.layer_page_bytes());
  if (b.offset < 0 || b.offset > static_cast<int64_t>(slot_bytes) - bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": ", b.num_layers, " layers x ", b.num_pages, " pages (", bytes,
        " bytes) at offset ", b.offset, " do not fit a slot of ", slot_bytes, " bytes"));
  }
  return absl::OkStatus();
}

HostPageIo::HostPageIo(model::KvPool* pool, int num_slots, size_t slot_bytes)
    : pool_(pool), page_bytes_(pool->layer_page_bytes()), slots_(num_slots) {
  for (auto& s : slots_) s.resize(slot_bytes);
}

absl::Status HostPageIo::SetPages(std::span<const int32_t> pages) {
  pages_.assign(pages.begin(), pages.end());
  return absl::OkStatus();
}

std::span<const int32_t> HostPageIo::BlockPages(const SlotBlock& b) const {
  return std::span<const int32_t>(pages_).subspan(b.first_page, b.num_pages);
}

uint8_t* HostPageIo::LayerStart(const SlotBlock& b, int k) {
  return slots_[b.slot].data() + b.offset + int64_t{k} * b.num_pages * page_bytes_;
}

absl::Status HostPageIo::Gather(const SlotBlock& b) {
  if (auto s = CheckSlotBlock(b, *pool_, pages_.size(), num_slots(), slot_bytes(), "HostPageIo");
      !s.ok()) {
    return s;
  }
  for (int k = 0; k < b.num_layers; ++k) {
    if (auto s = pool_->ReadPages(b.first_layer + k, BlockPages(b), LayerStart(b, k)); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status HostPageIo::Scatter(const SlotBlock& b) {
  if (auto s = CheckSlotBlock(b, *pool_, pages_.size(), num_slots(), slot_bytes(), "HostPageIo");
      !s.ok()) {
    return s;
  }
  for (int k = 0; k < b.num_layers; ++k) {
    if (auto s = pool_->WritePages(b.first_layer + k, BlockPages(b), LayerStart(b, k)); !s.ok()) {
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
