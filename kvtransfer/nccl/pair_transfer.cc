#include "kvtransfer/nccl/pair_transfer.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"

namespace mlaserve::kvtransfer::nccl {
namespace {

PlanHeader HeaderOf(const TransferPlan& plan) {
  PlanHeader h;
  h.digest = plan.digest();
  h.total_bytes = plan.total_bytes();
  h.num_steps = static_cast<int64_t>(plan.steps().size());
  return h;
}

// Gathers (or scatters) block `b` of a message whose layers are `layer_bytes` apart in the
// slot: in one call, or one call per layer.
absl::Status CopyBlock(PageIo* io, bool gather, const SlotBlock& b, int64_t layer_bytes,
                       CopyBatching batching) {
  if (batching == CopyBatching::kPerMessage) return gather ? io->Gather(b) : io->Scatter(b);
  for (int k = 0; k < b.num_layers; ++k) {
    SlotBlock layer = b;
    layer.first_layer = b.first_layer + k;
    layer.num_layers = 1;
    layer.offset = b.offset + k * layer_bytes;
    if (auto s = gather ? io->Gather(layer) : io->Scatter(layer); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

const char* CopyBatchingName(CopyBatching b) {
  return b == CopyBatching::kPerLayer ? "per-layer" : "per-message";
}

PlanSender::PlanSender(Communicator* comm, PageIo* io, const TransferPlan* plan,
                       std::vector<int32_t> pages, absl::Duration no_progress,
                       CopyBatching batching)
    : comm_(comm),
      io_(io),
      plan_(plan),
      pages_(std::move(pages)),
      no_progress_(no_progress),
      batching_(batching) {
  if (static_cast<int>(pages_.size()) != plan_->params().num_pages) {
    status_ = absl::InvalidArgumentError(absl::StrCat(
        "nccl send of session ", plan_->params().session_id, ": ", pages_.size(),
        " local pages for a plan of ", plan_->params().num_pages));
  } else if (static_cast<size_t>(plan_->max_step_bytes()) > io_->slot_bytes()) {
    status_ = absl::InvalidArgumentError(absl::StrCat(
        "nccl send of session ", plan_->params().session_id, ": messages of up to ",
        plan_->max_step_bytes(), " bytes do not fit staging slots of ", io_->slot_bytes()));
  }
}

absl::Status PlanSender::Fail(absl::Status s) {
  if (status_.ok()) status_ = std::move(s);
  comm_->Abort();
  return status_;
}

void PlanSender::Abort(const absl::Status& reason) { (void)Fail(reason); }

absl::Status PlanSender::Begin() {
  if (!status_.ok()) return status_;
  if (auto s = io_->SetPages(pages_); !s.ok()) return Fail(s);
  begun_ = true;
  return absl::OkStatus();
}

absl::Status PlanSender::SendLayer(int layer) {
  if (!status_.ok()) return status_;
  if (!begun_ || layer != next_layer_) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("nccl send of session ", plan_->params().session_id, ": layer ", layer,
                     " out of order (expected ", next_layer_, begun_ ? "" : ", before Begin",
                     ")")));
  }
  return SendLayers(layer + 1);
}

absl::Status PlanSender::SendLayers(int end) {
  if (!status_.ok()) return status_;
  const int layers = plan_->params().num_layers;
  if (!begun_ || end <= next_layer_ || end > layers) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "nccl send of session ", plan_->params().session_id, ": layers up to ", end,
        " cannot be sent (", begun_ ? "" : "before Begin; ", next_layer_, " of ", layers,
        " layers sent)")));
  }
  const int slots = io_->num_slots();
  const std::vector<TransferStep>& steps = plan_->steps();
  for (int k = plan_->first_step(next_layer_);
       k < static_cast<int>(steps.size()) && steps[k].layer < end; ++k) {
    const TransferStep& st = steps[k];
    const int slot = k % slots;
    // This message's share of the new layers: [first, stop).
    const int first = std::max(st.layer, next_layer_);
    const int stop = std::min(st.last_layer() + 1, end);
    if (first == st.layer) {  // the message's first layer: its slot is taken now
      // Host slots are plain memory: wait until the send that last used this slot completed.
      if (io_->host_synchronous() && k >= slots) {
        if (auto s = comm_->WaitAll(no_progress_); !s.ok()) return Fail(s);
      }
      if (k == 0) {
        const PlanHeader h = HeaderOf(*plan_);
        if (auto s = io_->StageHeader(slot, &h, sizeof(h)); !s.ok()) return Fail(s);
      }
    }
    const SlotBlock block{first, stop - first, st.first_page, st.num_pages, slot,
                          st.payload_offset + (first - st.layer) * st.layer_bytes()};
    if (auto s = CopyBlock(io_, /*gather=*/true, block, st.layer_bytes(), batching_); !s.ok()) {
      return Fail(s);
    }
    if (stop == st.last_layer() + 1) {
      if (auto s = comm_->Send(io_->slot(slot), st.message_bytes()); !s.ok()) return Fail(s);
      if (auto s = io_->AfterSend(slot); !s.ok()) return Fail(s);
      bytes_ += st.bytes;
    }
  }
  next_layer_ = end;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PlanSender::Finish() {
  if (!status_.ok()) return status_;
  if (next_layer_ != plan_->params().num_layers) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "nccl send of session ", plan_->params().session_id, ": finished after ", next_layer_,
        " of ", plan_->params().num_layers, " layers")));
  }
  if (auto s = comm_->WaitAll(no_progress_); !s.ok()) return Fail(s);
  if (auto s = io_->Drain(absl::Now() + no_progress_); !s.ok()) return Fail(s);
  return bytes_;
}

absl::StatusOr<int64_t> ReceivePlan(Communicator* comm, PageIo* io, const TransferPlan& plan,
                                    const std::vector<int32_t>& pages,
                                    absl::Duration no_progress, CopyBatching batching) {
  const std::string& id = plan.params().session_id;
  auto fail = [comm](absl::Status s) {
    comm->Abort();
    return s;
  };
  if (static_cast<int>(pages.size()) != plan.params().num_pages) {
    return absl::InvalidArgumentError(absl::StrCat("nccl receive of session ", id, ": ",
                                                   pages.size(), " local pages for a plan of ",
                                                   plan.params().num_pages));
  }
  if (static_cast<size_t>(plan.max_step_bytes()) > io->slot_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl receive of session ", id, ": messages of up to ", plan.max_step_bytes(),
        " bytes do not fit staging slots of ", io->slot_bytes()));
  }
  if (auto s = io->SetPages(pages); !s.ok()) return fail(s);
  // Every receive is posted without waiting for the first one: the header (at the start of the
  // first message) is checked once all arrived. The plan digests were already compared through
  // the control plane, so a mismatch here means the pair's message streams diverged; the pages
  // written meanwhile belong to this session and are freed with it.
  const int slots = io->num_slots();
  int64_t bytes = 0;
  for (size_t k = 0; k < plan.steps().size(); ++k) {
    const TransferStep& st = plan.steps()[k];
    const int slot = static_cast<int>(k % slots);
    if (auto s = io->BeforeRecv(slot); !s.ok()) return fail(s);
    if (auto s = comm->Recv(io->slot(slot), st.message_bytes()); !s.ok()) return fail(s);
    // Host slots: the bytes are there only once the receive completed.
    if (io->host_synchronous()) {
      if (auto s = comm->WaitAll(no_progress); !s.ok()) return fail(s);
    }
    if (k == 0) {
      if (auto s = io->KeepHeader(slot, sizeof(PlanHeader)); !s.ok()) return fail(s);
    }
    // Every layer of the message arrived together: one block.
    const SlotBlock block{st.layer, st.num_layers, st.first_page, st.num_pages, slot,
                          st.payload_offset};
    if (auto s = CopyBlock(io, /*gather=*/false, block, st.layer_bytes(), batching); !s.ok()) {
      return fail(s);
    }
    bytes += st.bytes;
  }
  if (auto s = comm->WaitAll(no_progress); !s.ok()) return fail(s);
  PlanHeader got;
  if (auto s = io->TakenHeader(&got, sizeof(got)); !s.ok()) return fail(s);
  const PlanHeader want = HeaderOf(plan);
  if (got.magic != want.magic || got.digest != want.digest ||
      got.total_bytes != want.total_bytes || got.num_steps != want.num_steps) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "nccl receive of session ", id, ": the sender's plan (digest ", absl::Hex(got.digest),
        ", ", got.num_steps, " steps, ", got.total_bytes, " bytes) differs from ours (digest ",
        absl::Hex(want.digest), ", ", want.num_steps, " steps, ", want.total_bytes, " bytes)")));
  }
  if (auto s = io->Drain(absl::Now() + no_progress); !s.ok()) return fail(s);
  return bytes;
}

PairLink::PairLink(int rank, CommunicatorFactory factory, CommIdFactory id_factory)
    : rank_(rank), factory_(std::move(factory)), id_factory_(std::move(id_factory)) {}

PairLink::~PairLink() { Invalidate(); }

absl::StatusOr<CommId> PairLink::CurrentId() {
  absl::MutexLock l(&mu_);
  if (id_factory_ == nullptr) {
    return absl::FailedPreconditionError("PairLink: only the receiving side mints ids");
  }
  if (!id_valid_) {
    absl::StatusOr<CommId> id = id_factory_();
    if (!id.ok()) return id.status();
    id_ = *id;
    id_valid_ = true;
  }
  return id_;
}

absl::StatusOr<Communicator*> PairLink::Get(const CommId& id, absl::Time deadline) {
  absl::MutexLock l(&mu_);
  if (comm_ != nullptr && comm_id_ == id && comm_->usable()) return comm_.get();
  if (comm_ != nullptr) comm_->Abort();
  comm_.reset();
  absl::StatusOr<std::unique_ptr<Communicator>> c = factory_(id, rank_, deadline);
  if (!c.ok()) {
    id_valid_ = false;  // a half-joined id is never reused
    return c.status();
  }
  comm_ = std::move(*c);
  comm_id_ = id;
  ++built_;
  return comm_.get();
}

void PairLink::Invalidate() {
  absl::MutexLock l(&mu_);
  if (comm_ != nullptr) comm_->Abort();
  comm_.reset();
  id_valid_ = false;
}

bool PairLink::holds_usable() const {
  absl::MutexLock l(&mu_);
  return comm_ != nullptr && comm_->usable();
}

bool PairLink::holds() const {
  absl::MutexLock l(&mu_);
  return comm_ != nullptr;
}

int PairLink::communicators_built() const {
  absl::MutexLock l(&mu_);
  return built_;
}

}  // namespace mlaserve::kvtransfer::nccl
