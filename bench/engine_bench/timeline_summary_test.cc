#include "bench/engine_bench/timeline_summary.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Far from 0, as CUPTI's clock is: every result must be relative to the window.
constexpr int64_t kBase = 1'700'000'000'000'000'000;
constexpr double kTol = 1e-9;

int64_t At(double ms) { return kBase + static_cast<int64_t>(ms * 1e6 + 0.5); }

ActivityRecord Kernel(const std::string& name, double begin_ms, double end_ms) {
  return {ActivityKind::kKernel, name, At(begin_ms), At(end_ms)};
}
ActivityRecord Host(ActivityKind kind, const std::string& name, double begin_ms, double end_ms) {
  return {kind, name, At(begin_ms), At(end_ms)};
}
ActivityRecord Copy(const std::string& name, double begin_ms, double end_ms, uint64_t bytes,
                    CopyDirection direction, bool pageable) {
  return {ActivityKind::kMemcpy, name, At(begin_ms), At(end_ms), bytes, direction, pageable};
}

// A 10 ms window; device work in ms:
//   gemm 1.0-3.0, attn 2.0-4.0 (overlapping: busy 1.0-4.0 once)      gap 4.0-4.5
//   pageable HtoD copy 4.5-5.0                                         gap 5.0-7.0
//   gemm 7.0-8.0 with a memset 7.5-7.6 inside it                       gap 8.0-8.2
//   DtoH copy 8.2-8.5
// Host: launches before the first device work, a cudaMemcpy over the first two gaps, a stream
// sync and a launch in the long gap, a call after the window.
TimelineTrace HandMadeTrace() {
  TimelineTrace t;
  t.window_begin_ns = At(0);
  t.window_end_ns = At(10);
  t.records = {
      Host(ActivityKind::kRuntimeApi, "cudaLaunchKernel", 0.5, 0.6),
      Kernel("attn", 2.0, 4.0),  // out of start order on purpose
      Kernel("gemm", 1.0, 3.0),
      Host(ActivityKind::kRuntimeApi, "cudaLaunchKernel", 0.7, 0.8),
      Copy("memcpy HtoD (pageable)", 4.5, 5.0, 1 << 20, CopyDirection::kHostToDevice, true),
      Host(ActivityKind::kRuntimeApi, "cudaMemcpy", 4.2, 5.1),
      Host(ActivityKind::kSync, "stream synchronize", 5.5, 6.9),
      Host(ActivityKind::kRuntimeApi, "cudaLaunchKernel", 6.95, 6.97),
      Kernel("gemm", 7.0, 8.0),
      {ActivityKind::kMemset, "memset", At(7.5), At(7.6), 256},
      Copy("memcpy DtoH", 8.2, 8.5, 4096, CopyDirection::kDeviceToHost, false),
      Host(ActivityKind::kRuntimeApi, "cudaDeviceSynchronize", 10.5, 10.6),
  };
  return t;
}

TEST(TimelineSummaryTest, BusyIdleAndHostTimeAroundTheDeviceWork) {
  const TimelineSummary s = Summarize(HandMadeTrace());
  EXPECT_NEAR(s.wall_ms, 10.0, kTol);
  EXPECT_NEAR(s.gpu_span_ms, 7.5, kTol);
  EXPECT_NEAR(s.busy_ms, 3.0 + 0.5 + 1.0 + 0.3, kTol);  // the overlap of gemm and attn once
  EXPECT_NEAR(s.idle_ms, 0.5 + 2.0 + 0.2, kTol);
  EXPECT_EQ(s.idle_gaps, 3);
  EXPECT_NEAR(s.before_first_ms, 1.0, kTol);
  EXPECT_NEAR(s.after_last_ms, 1.5, kTol);
  EXPECT_EQ(s.kernels, 3);
  EXPECT_EQ(s.memsets, 1);
  EXPECT_EQ(s.runtime_calls, 4);  // cudaDeviceSynchronize after the window is not counted
  EXPECT_EQ(s.syncs, 1);
}

TEST(TimelineSummaryTest, LargestGapsNameTheirNeighboursAndOverlappingHostCalls) {
  const TimelineSummary s = Summarize(HandMadeTrace());
  ASSERT_EQ(s.largest_gaps.size(), 3u);
  const IdleGap& longest = s.largest_gaps[0];
  EXPECT_NEAR(longest.begin_ms, 5.0, kTol);
  EXPECT_NEAR(longest.duration_ms, 2.0, kTol);
  EXPECT_EQ(longest.previous, "memcpy HtoD (pageable)");
  EXPECT_EQ(longest.next, "gemm");
  ASSERT_EQ(longest.host_calls.size(), 3u);
  EXPECT_EQ(longest.host_calls[0].name, "stream synchronize");
  EXPECT_NEAR(longest.host_calls[0].overlap_us, 1400, 1e-6);
  EXPECT_EQ(longest.host_calls[1].name, "cudaMemcpy");  // 5.0-5.1 of its 4.2-5.1
  EXPECT_NEAR(longest.host_calls[1].overlap_us, 100, 1e-6);
  EXPECT_EQ(longest.host_calls[2].name, "cudaLaunchKernel");
  EXPECT_EQ(longest.host_calls[2].calls, 1);  // the launches before the first kernel are not in it
  EXPECT_NEAR(longest.host_calls[2].overlap_us, 20, 1e-6);
  EXPECT_NEAR(longest.outside_calls_us, 2000 - 100 - 1400 - 20, 1e-6);

  const IdleGap& second = s.largest_gaps[1];
  EXPECT_NEAR(second.begin_ms, 4.0, kTol);
  EXPECT_NEAR(second.duration_ms, 0.5, kTol);
  EXPECT_EQ(second.previous, "attn");  // ends last in the gemm/attn run, though gemm starts first
  EXPECT_EQ(second.next, "memcpy HtoD (pageable)");
  ASSERT_EQ(second.host_calls.size(), 1u);
  EXPECT_EQ(second.host_calls[0].name, "cudaMemcpy");
  EXPECT_NEAR(second.host_calls[0].overlap_us, 300, 1e-6);
  EXPECT_NEAR(second.outside_calls_us, 200, 1e-6);

  const IdleGap& third = s.largest_gaps[2];
  EXPECT_NEAR(third.duration_ms, 0.2, kTol);
  EXPECT_EQ(third.previous, "gemm");  // not the memset nested inside it
  EXPECT_EQ(third.next, "memcpy DtoH");
  EXPECT_TRUE(third.host_calls.empty());
  EXPECT_NEAR(third.outside_calls_us, 200, 1e-6);
}

TEST(TimelineSummaryTest, NestedHostCallsCoverAGapOnce) {
  TimelineTrace t;
  t.window_begin_ns = At(0);
  t.window_end_ns = At(3);
  t.records = {
      Kernel("a", 0, 1),
      Host(ActivityKind::kRuntimeApi, "cudaStreamSynchronize", 1.2, 1.8),
      Host(ActivityKind::kSync, "sync: stream synchronize", 1.3, 1.7),  // inside the call
      Host(ActivityKind::kRuntimeApi, "cudaLaunchKernel", 0.9, 1.1),    // reaches into the gap
      Kernel("b", 2, 3),
  };
  const TimelineSummary s = Summarize(t);
  ASSERT_EQ(s.largest_gaps.size(), 1u);
  EXPECT_EQ(s.largest_gaps[0].host_calls.size(), 3u);
  EXPECT_NEAR(s.largest_gaps[0].outside_calls_us, 1000 - 100 - 600, 1e-6);
}

TEST(TimelineSummaryTest, CopiesByDirectionAndKernelsByTime) {
  const TimelineSummary s = Summarize(HandMadeTrace());
  const CopyTotals& htod = s.copies[static_cast<int>(CopyDirection::kHostToDevice)];
  EXPECT_EQ(htod.count, 1);
  EXPECT_EQ(htod.pageable, 1);
  EXPECT_EQ(htod.bytes, 1u << 20);
  EXPECT_NEAR(htod.ms, 0.5, kTol);
  const CopyTotals& dtoh = s.copies[static_cast<int>(CopyDirection::kDeviceToHost)];
  EXPECT_EQ(dtoh.count, 1);
  EXPECT_EQ(dtoh.pageable, 0);
  EXPECT_EQ(dtoh.bytes, 4096u);
  EXPECT_EQ(s.copies[static_cast<int>(CopyDirection::kDeviceToDevice)].count, 0);

  ASSERT_EQ(s.top_kernels.size(), 2u);
  EXPECT_EQ(s.top_kernels[0].name, "gemm");
  EXPECT_EQ(s.top_kernels[0].launches, 2);
  EXPECT_NEAR(s.top_kernels[0].ms, 3.0, kTol);
  EXPECT_EQ(s.top_kernels[1].name, "attn");
  EXPECT_NEAR(s.top_kernels[1].ms, 2.0, kTol);
  // Exclusive: gemm 1.0-3.0 and 7.0-8.0 less the memset nested in it; attn only past gemm's end.
  EXPECT_NEAR(s.top_kernels[0].exclusive_ms, 2.0 + 0.9, kTol);
  EXPECT_NEAR(s.top_kernels[1].exclusive_ms, 1.0, kTol);
  EXPECT_NEAR(s.exclusive_other_ms, 0.5 + 0.1 + 0.3, kTol);
  EXPECT_NEAR(s.top_kernels[0].exclusive_ms + s.top_kernels[1].exclusive_ms + s.exclusive_other_ms,
              s.busy_ms, kTol);
  // The path: gemm 1.0-3.0 and 7.0-8.0 whole (the memset inside it ends before it: nothing),
  // attn only past gemm's end, the copies whole.
  EXPECT_NEAR(s.top_kernels[0].path_ms, 2.0 + 1.0, kTol);
  EXPECT_NEAR(s.top_kernels[1].path_ms, 1.0, kTol);
  EXPECT_NEAR(s.path_other_ms, 0.5 + 0.3, kTol);
  EXPECT_NEAR(s.top_kernels[0].path_ms + s.top_kernels[1].path_ms + s.path_other_ms, s.busy_ms, kTol);
}

// A short launch inside a longer one (the decode step's L2 prefetch, launched after the rope
// launch and ending before it, while the attention already waits): exclusive time charges it the
// time it overlapped and the rope launch only the rest; the path charges the rope launch its
// whole reach and the prefetch nothing.
TEST(TimelineSummaryTest, PathChargesANestedLaunchNothing) {
  TimelineTrace t;
  t.window_begin_ns = At(0);
  t.window_end_ns = At(5);
  t.records = {
      Kernel("rope", 1.0, 2.0),
      Kernel("prefetch", 1.3, 1.8),
      Kernel("attention", 1.5, 3.0),
      Kernel("combine", 3.5, 4.0),  // after an idle gap: the gap is not on the path
  };
  const TimelineSummary s = Summarize(t, {.sequence_first = 0, .sequence_count = 4});
  EXPECT_NEAR(s.busy_ms, 2.5, kTol);
  std::map<std::string, KernelTime> by_name;
  for (const KernelTime& k : s.top_kernels) by_name[k.name] = k;
  EXPECT_NEAR(by_name["prefetch"].exclusive_ms, 0.5, kTol);
  EXPECT_NEAR(by_name["rope"].exclusive_ms, 0.5, kTol);
  EXPECT_NEAR(by_name["prefetch"].path_ms, 0.0, kTol);
  EXPECT_NEAR(by_name["rope"].path_ms, 1.0, kTol);
  EXPECT_NEAR(by_name["attention"].path_ms, 1.0, kTol);
  EXPECT_NEAR(by_name["combine"].path_ms, 0.5, kTol);
  ASSERT_EQ(s.sequence.size(), 4u);
  EXPECT_EQ(s.sequence[1].name, "prefetch");
  EXPECT_NEAR(s.sequence[1].path_us, 0.0, 1e-3);
  EXPECT_NEAR(s.sequence[2].path_us, 1000.0, 1e-3);
  EXPECT_THAT(FormatSummary("nested", s), HasSubstr("| 1 | prefetch | 300.0 | 500.00 | 500.00 | 0.00 |\n"));
}

// A PDL chain: each kernel starts while the one before runs (and waits for it), so durations
// overlap; the exclusive time is what each adds from the previous one's end to its own.
TEST(TimelineSummaryTest, ExclusiveTimeSplitsAnEarlyLaunchedChain) {
  TimelineTrace t;
  t.window_begin_ns = At(0);
  t.window_end_ns = At(10);
  t.records = {
      Kernel("route", 1.0, 1.2),
      Kernel("gate_up", 1.1, 3.0),  // launched early, waits for route
      Kernel("down", 2.5, 4.0),     // launched early, prefetches, waits for gate_up
      Kernel("combine", 3.9, 4.1),
      Kernel("route", 4.05, 4.3),  // next layer
  };
  const TimelineSummary s = Summarize(t);
  EXPECT_NEAR(s.busy_ms, 3.3, kTol);
  ASSERT_EQ(s.top_kernels.size(), 4u);
  EXPECT_EQ(s.top_kernels[0].name, "gate_up");
  EXPECT_NEAR(s.top_kernels[0].ms, 1.9, kTol);
  EXPECT_NEAR(s.top_kernels[0].exclusive_ms, 1.8, kTol);
  EXPECT_EQ(s.top_kernels[1].name, "down");
  EXPECT_NEAR(s.top_kernels[1].exclusive_ms, 1.0, kTol);
  EXPECT_EQ(s.top_kernels[2].name, "route");
  EXPECT_EQ(s.top_kernels[2].launches, 2);
  EXPECT_NEAR(s.top_kernels[2].exclusive_ms, 0.2 + 0.2, kTol);
  EXPECT_EQ(s.top_kernels[3].name, "combine");
  EXPECT_NEAR(s.top_kernels[3].exclusive_ms, 0.1, kTol);
  EXPECT_NEAR(s.exclusive_other_ms, 0.0, kTol);
  const std::string text = FormatSummary("chain", s);
  EXPECT_NE(text.find("| gate_up | 1 | 1.900 | 1.800 | 1800.00 | 54.5 |"), std::string::npos) << text;
  EXPECT_TRUE(s.sequence.empty());  // not asked for

  // The launches one by one, from the second on.
  const TimelineSummary seq = Summarize(t, {.sequence_first = 1, .sequence_count = 3});
  ASSERT_EQ(seq.sequence.size(), 3u);
  EXPECT_EQ(seq.sequence[0].index, 1);
  EXPECT_EQ(seq.sequence[0].name, "gate_up");
  EXPECT_NEAR(seq.sequence[0].start_us, 100.0, 1e-3);
  EXPECT_NEAR(seq.sequence[0].duration_us, 1900.0, 1e-3);
  EXPECT_NEAR(seq.sequence[0].exclusive_us, 1800.0, 1e-3);
  EXPECT_EQ(seq.sequence[1].name, "down");
  EXPECT_NEAR(seq.sequence[1].exclusive_us, 1000.0, 1e-3);
  EXPECT_EQ(seq.sequence[2].name, "combine");
  EXPECT_NEAR(seq.sequence[2].exclusive_us, 100.0, 1e-3);
  EXPECT_THAT(FormatSummary("chain", seq),
              HasSubstr("| 2 | down | 1500.0 | 1500.00 | 1000.00 | 1000.00 |\n"));
  // In a chain whose launches end in start order the path is the exclusive time.
  for (const SequenceEntry& e : seq.sequence) EXPECT_NEAR(e.path_us, e.exclusive_us, 1e-3) << e.name;
  // Past the end: as many as there are.
  EXPECT_EQ(Summarize(t, {.sequence_first = 3, .sequence_count = 10}).sequence.size(), 2u);
}

TEST(TimelineSummaryTest, TopListsAreCut) {
  const TimelineSummary s = Summarize(HandMadeTrace(), {.top_gaps = 1, .top_kernels = 1});
  EXPECT_EQ(s.idle_gaps, 3);  // counts every gap, lists one
  ASSERT_EQ(s.largest_gaps.size(), 1u);
  EXPECT_NEAR(s.largest_gaps[0].duration_ms, 2.0, kTol);
  ASSERT_EQ(s.top_kernels.size(), 1u);
  EXPECT_EQ(s.top_kernels[0].name, "gemm");
}

TEST(TimelineSummaryTest, WorkReachingPastTheWindowGivesNegativeHostTime) {
  TimelineTrace t;
  t.window_begin_ns = At(1);
  t.window_end_ns = At(2);
  t.records = {Kernel("early", 0.5, 1.5), Kernel("late", 1.5, 2.5)};
  const TimelineSummary s = Summarize(t);
  EXPECT_NEAR(s.before_first_ms, -0.5, kTol);
  EXPECT_NEAR(s.after_last_ms, -0.5, kTol);
  EXPECT_NEAR(s.busy_ms, 2.0, kTol);
  EXPECT_EQ(s.idle_gaps, 0);  // back to back is not a gap
}

TEST(TimelineSummaryTest, EmptyInput) {
  const TimelineSummary none = Summarize(TimelineTrace{});
  EXPECT_EQ(none.wall_ms, 0);
  EXPECT_EQ(none.gpu_span_ms, 0);
  EXPECT_EQ(none.busy_ms, 0);
  EXPECT_EQ(none.idle_gaps, 0);
  EXPECT_EQ(none.kernels, 0);
  EXPECT_TRUE(none.largest_gaps.empty());
  EXPECT_TRUE(none.top_kernels.empty());

  TimelineTrace host_only;
  host_only.window_begin_ns = At(0);
  host_only.window_end_ns = At(3);
  host_only.records = {Host(ActivityKind::kRuntimeApi, "cudaMemGetInfo", 1, 2)};
  const TimelineSummary s = Summarize(host_only);
  EXPECT_NEAR(s.wall_ms, 3.0, kTol);
  EXPECT_NEAR(s.before_first_ms, 3.0, kTol);  // no device work: all of it is host time
  EXPECT_EQ(s.after_last_ms, 0);
  EXPECT_EQ(s.runtime_calls, 1);
  EXPECT_EQ(FormatSummary("timeline x", s),
            "timeline x: wall 3.000 ms, no device work traced; 1 runtime calls, 0 syncs\n");
}

TEST(TimelineSummaryTest, FormatsHeadlineAndTables) {
  const std::string text = FormatSummary("timeline prefill 4096", Summarize(HandMadeTrace()));
  EXPECT_THAT(text, HasSubstr("timeline prefill 4096: wall 10.000 ms, GPU busy 4.800 ms (48.0% of "
                              "wall, 64.0% of the GPU span of 7.500 ms); idle in the span 2.700 ms "
                              "in 3 gaps; host before the first device work 1.000 ms, after the "
                              "last 1.500 ms\n"));
  EXPECT_THAT(text, HasSubstr("3 kernels, 2 copies, 1 memsets, 4 runtime calls, 1 syncs\n"));
  EXPECT_THAT(text, HasSubstr("| 1 | 5.000 | 2000.0 | memcpy HtoD (pageable) | gemm | stream "
                              "synchronize x1 1400.0 us; cudaMemcpy x1 100.0 us; cudaLaunchKernel "
                              "x1 20.0 us; outside CUDA calls 480.0 us |\n"));
  EXPECT_THAT(
      text, HasSubstr("| 3 | 8.000 | 200.0 | gemm | memcpy DtoH | outside CUDA calls 200.0 us |"));
  EXPECT_THAT(text, HasSubstr("| HtoD | 1 | 1 | 1.000 | 0.500 |\n"));
  EXPECT_THAT(text, HasSubstr("| gemm | 2 | 3.000 | 2.900 | 1450.00 | 60.4 | 3.000 |\n"));
  const size_t other = text.find("| (copies, memsets) | | | 0.900 | |");
  ASSERT_NE(other, std::string::npos) << text;
  EXPECT_THAT(text.substr(other, text.find('\n', other) - other), ::testing::EndsWith("| 0.800 |"));
}

TEST(TimelineSummaryTest, TableCellsEscapePipesAndCutLongNames) {
  TimelineTrace t;
  t.window_begin_ns = At(0);
  t.window_end_ns = At(1);
  const std::string long_name = "void ns::Kernel<" + std::string(200, 'x') + ">";
  t.records = {Kernel("a|b", 0, 0.1), Kernel(long_name, 0.2, 0.3)};
  const std::string text = FormatSummary("t", Summarize(t));
  EXPECT_THAT(text, HasSubstr("| a\\|b | 1 |"));
  EXPECT_THAT(text, HasSubstr("| " + long_name.substr(0, 90) + "... | 1 |"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr(long_name)));
}

TEST(TimelineSummaryTest, CopyDirectionNames) {
  std::vector<std::string> names;
  for (int d = 0; d < kNumCopyDirections; ++d) {
    names.emplace_back(CopyDirectionName(static_cast<CopyDirection>(d)));
  }
  EXPECT_THAT(names, ElementsAre("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other"));
}

}  // namespace
}  // namespace mlaserve::bench
