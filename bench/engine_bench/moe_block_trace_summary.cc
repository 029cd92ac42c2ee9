#include "bench/engine_bench/moe_block_trace_summary.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mlaserve::bench {
namespace {

using kernels::moe_trace::BlockRecord;
using kernels::moe_trace::LaunchRecord;

uint64_t LastEnd(const LaunchRecord& l) {
  uint64_t t = 0;
  for (const BlockRecord& b : l.blocks) t = std::max(t, b.end_ns);
  return t;
}

uint64_t FirstStart(const LaunchRecord& l) {
  uint64_t t = UINT64_MAX;
  for (const BlockRecord& b : l.blocks) t = std::min(t, b.start_ns);
  return t;
}

// The SMs a launch's blocks ran on.
std::set<int> SmsOf(const LaunchRecord& l) {
  std::set<int> sms;
  for (const BlockRecord& b : l.blocks) sms.insert(b.sm);
  return sms;
}

// us from `origin`; "-" for none (0 or UINT64_MAX).
std::string Us(uint64_t t, uint64_t origin) {
  if (t == 0 || t == UINT64_MAX) return "-";
  return absl::StrFormat("%.1f", (static_cast<double>(t) - static_cast<double>(origin)) / 1000.0);
}

// The value at quantile q of v (sorted here), or 0 for none.
uint64_t Quantile(std::vector<uint64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

struct Layer {
  const LaunchRecord* router = nullptr;
  const LaunchRecord* gate_up = nullptr;
  const LaunchRecord* down = nullptr;
};

std::string LayerRow(int index, const Layer& layer) {
  const LaunchRecord& r = *layer.router;
  const uint64_t origin = FirstStart(r);
  const uint64_t router_end = LastEnd(r);
  const std::set<int> router_sms = SmsOf(r);
  std::string row = absl::StrCat("| ", index, " | ", r.blocks.size(), " / ", router_sms.size(), " | ",
                                 Us(router_end, origin), " | ");
  if (layer.gate_up == nullptr) return absl::StrCat(row, "- | - | - | - | - | - |");
  const LaunchRecord& g = *layer.gate_up;
  std::vector<int> per_sm;
  uint64_t shared_first = UINT64_MAX, shared_last = 0, routed_first = UINT64_MAX, routed_last = 0;
  std::vector<uint64_t> routed_waits;
  int late = 0, on_router_sms = 0;
  for (const BlockRecord& b : g.blocks) {
    if (b.sm >= static_cast<int>(per_sm.size())) per_sm.resize(b.sm + 1, 0);
    ++per_sm[b.sm];
    if (b.start_ns > router_end) ++late;
    if (router_sms.count(b.sm) != 0) ++on_router_sms;
    if (b.by < g.shared_slots) {
      shared_first = std::min(shared_first, b.start_ns);
      shared_last = std::max(shared_last, b.end_ns);
    } else {
      routed_first = std::min(routed_first, b.start_ns);
      routed_last = std::max(routed_last, b.end_ns);
      if (b.wait_ns != 0) routed_waits.push_back(b.wait_ns);
    }
  }
  const int sms_used = static_cast<int>(std::count_if(per_sm.begin(), per_sm.end(), [](int n) { return n > 0; }));
  const int most = per_sm.empty() ? 0 : *std::max_element(per_sm.begin(), per_sm.end());
  absl::StrAppend(&row, g.blocks.size(), " / ", sms_used, " / ", most, " | ", Us(shared_first, origin), " .. ",
                  Us(shared_last, origin), " | ", Us(routed_first, origin), "; ",
                  Us(Quantile(routed_waits, 0.0), origin), " / ", Us(Quantile(routed_waits, 0.5), origin), " / ",
                  Us(Quantile(routed_waits, 1.0), origin), "; ", Us(routed_last, origin), " | ", late, " | ",
                  on_router_sms, " | ");
  if (layer.down == nullptr) return absl::StrCat(row, "- |");
  const LaunchRecord& d = *layer.down;
  std::vector<uint64_t> waits;
  for (const BlockRecord& b : d.blocks) {
    if (b.wait_ns != 0) waits.push_back(b.wait_ns);
  }
  absl::StrAppend(&row, d.blocks.size(), ": ", Us(FirstStart(d), origin), "; ", Us(Quantile(waits, 0.0), origin),
                  " / ", Us(Quantile(waits, 0.5), origin), "; ", Us(LastEnd(d), origin), " |");
  return row;
}

std::string LatestBlocks(int index, const Layer& layer) {
  const LaunchRecord& r = *layer.router;
  const uint64_t origin = FirstStart(r);
  const std::set<int> router_sms = SmsOf(r);
  std::vector<const BlockRecord*> blocks;
  for (const BlockRecord& b : layer.gate_up->blocks) blocks.push_back(&b);
  std::sort(blocks.begin(), blocks.end(), [](const BlockRecord* a, const BlockRecord* b) {
    return a->end_ns != b->end_ns ? a->end_ns > b->end_ns : (a->by != b->by ? a->by < b->by : a->bx < b->bx);
  });
  std::string out = absl::StrCat("layer ", index, ": gate_up's latest-ending blocks (us from the router's first start)\n",
                                 "| SM | slot (shared below ", layer.gate_up->shared_slots,
                                 ") | block | start | wait | end | router CTA on the SM |\n|---:|---:|---:|---:|---:|---:|---|\n");
  for (size_t i = 0; i < std::min<size_t>(10, blocks.size()); ++i) {
    const BlockRecord& b = *blocks[i];
    absl::StrAppend(&out, "| ", b.sm, " | ", b.by, " | ", b.bx, " | ", Us(b.start_ns, origin), " | ",
                    Us(b.wait_ns, origin), " | ", Us(b.end_ns, origin), " | ",
                    router_sms.count(b.sm) != 0 ? "yes" : "no", " |\n");
  }
  return out;
}

}  // namespace

std::string SummarizeMoeBlockTrace(const std::vector<LaunchRecord>& launches, uint64_t window_ns) {
  uint64_t newest = 0;
  for (const LaunchRecord& l : launches) newest = std::max(newest, LastEnd(l));
  std::vector<Layer> layers;
  for (const LaunchRecord& l : launches) {
    if (l.blocks.empty() || LastEnd(l) + window_ns < newest) continue;  // an earlier step's
    if (l.kernel == "router") {
      layers.push_back({&l, nullptr, nullptr});
    } else if (!layers.empty() && l.kernel == "gate_up" && layers.back().gate_up == nullptr) {
      layers.back().gate_up = &l;
    } else if (!layers.empty() && l.kernel == "down" && layers.back().gate_up != nullptr &&
               layers.back().down == nullptr) {
      layers.back().down = &l;
    }
  }
  if (layers.empty()) return "moe block trace: no router launch in the last step's records\n";
  std::string out = absl::StrCat(
      "moe block trace: ", layers.size(), " layers of the last step (us from each layer's first router CTA start)\n",
      "| layer | router CTAs / SMs | router end | gate_up blocks / SMs / most on one SM | shared slices: first start .. last end "
      "| routed: first start; wait first / median / last; last end | gate_up blocks started after the router's end "
      "| gate_up blocks on router SMs | down blocks: first start; wait first / median; last end |\n",
      "|---:|---|---:|---|---|---|---:|---:|---|\n");
  for (size_t i = 0; i < layers.size(); ++i) absl::StrAppend(&out, LayerRow(static_cast<int>(i), layers[i]), "\n");
  const size_t mid = layers.size() / 2;
  if (layers[mid].gate_up != nullptr) absl::StrAppend(&out, "\n", LatestBlocks(static_cast<int>(mid), layers[mid]));
  return out;
}

}  // namespace mlaserve::bench
