// Running the whole bench in a test: RunBenchmark with its table and messages captured, and
// per-test temporary file names.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

#include "bench/serving/bench_app.h"
#include "gtest/gtest.h"

namespace mlaserve::bench::testing {

// A short random-dataset run against `server`: 6 prompts of 16 tokens, 5 out, 2 at a time,
// 2 warmup requests, no progress line.
inline BenchOptions SmallRun(const std::string& server) {
  BenchOptions o;
  o.server = server;
  o.num_prompts = 6;
  o.random_input_len = 16;
  o.random_output_len = 5;
  o.max_concurrency = 2;
  o.warmup_requests = 2;
  o.connect_timeout_s = 5;
  o.request_timeout_s = 30;
  o.progress = ProgressMode::kOff;
  return o;
}

// The whole content of `f`, from its start.
inline std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

struct Captured {
  int exit_code = 0;
  std::string out;  // the table (stdout)
  std::string err;  // messages (stderr)
};

inline Captured RunCaptured(const BenchOptions& o) {
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  Captured c;
  c.exit_code = RunBenchmark(o, out, err);
  c.out = ReadAll(out);
  c.err = ReadAll(err);
  std::fclose(out);
  std::fclose(err);
  return c;
}

// Unique to this test and process: another run of the same test (a second build directory's
// ctest on this machine) must not write the same file.
inline std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
         std::to_string(::getpid()) + "_" + name;
}

}  // namespace mlaserve::bench::testing
