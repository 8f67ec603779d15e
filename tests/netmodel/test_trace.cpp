// Tests of compare --trace (netmodel/trace.cpp): the Chrome trace-event JSON of a compared run.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "netmodel/trace.hpp"

namespace gradsync::netmodel {
namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
  return n;
}

CompareReport one_run() {
  CompareReport r;
  r.fabric = "test-fabric";
  CompareRow row;
  row.run.path = "run.h5";
  row.run.step_time_s = 0.100;
  row.run.data_s = 0.001;
  row.run.forward_s = 0.030;
  row.run.backward_s = 0.040;
  row.run.optimizer_s = std::nan("");  // absent column: drawn with zero length, never NaN in JSON
  row.run.bucket_bytes = {4096, 8192};
  row.run.bucket_ready_s = {0.05, 0.07};
  row.run.bucket_start_s = {0.05, 0.072};
  row.run.bucket_end_s = {0.06, 0.090};
  row.predicted.data_s = 0.001;
  row.predicted.forward_s = 0.030;
  row.predicted.backward_s = 0.040;
  row.predicted.optimizer_s = 0.002;
  row.predicted.step_time_s = 0.095;
  BucketTiming b;
  b.grad_bytes = 4096;
  b.start_s = 0.05;
  b.end_s = 0.06;
  b.codec_s = 0.002;
  b.comm_s = 0.008;
  row.predicted.buckets = {b};
  r.rows.push_back(row);
  return r;
}

TEST(Trace, MeasuredAndPredictedProcessesWithPhasesAndBuckets) {
  const std::string s = compare_trace(one_run()).dump();
  EXPECT_EQ(s.find("NaN"), std::string::npos);
  EXPECT_EQ(s.find("nan"), std::string::npos);
  EXPECT_EQ(count(s, "\"process_name\""), 2);
  EXPECT_NE(s.find("measured: run.h5"), std::string::npos);
  EXPECT_NE(s.find("predicted: run.h5 (fabric test-fabric)"), std::string::npos);
  for (const char* phase : {"\"data wait\"", "\"forward\"", "\"backward\"", "\"optimizer\""})
    EXPECT_EQ(count(s, phase), 2) << phase;  // once measured, once predicted
  // Measured: two buckets; predicted: one bucket with its codec drawn before the collective.
  EXPECT_EQ(count(s, "\"all-reduce bucket 0\""), 2);
  EXPECT_EQ(count(s, "\"all-reduce bucket 1\""), 1);
  EXPECT_EQ(count(s, "\"codec bucket 0\""), 1);
  // Measured bucket 1: 72 ms .. 90 ms -> ts 72000 us, dur 18000 us.
  EXPECT_NE(s.find("\"ts\":72000,\"dur\":18000"), std::string::npos) << s;
  // Predicted bucket 0: codec 50..52 ms, all-reduce 52..60 ms.
  EXPECT_NE(s.find("\"ts\":50000,\"dur\":2000"), std::string::npos);
  EXPECT_NE(s.find("\"ts\":52000,\"dur\":8000"), std::string::npos);
  EXPECT_NE(s.find("\"displayTimeUnit\":\"ms\""), std::string::npos);
}

TEST(Trace, MeasuredCodecIsDrawnBeforeTheCollective) {
  CompareReport r = one_run();
  // /buckets/codec_s read: bucket 0 spent 3 ms in its codec; bucket 1's was not measured.
  r.rows[0].run.bucket_codec_s = {0.003, std::nan("")};
  const std::string s = compare_trace(r).dump();
  EXPECT_EQ(s.find("NaN"), std::string::npos);
  EXPECT_EQ(count(s, "\"codec bucket 0\""), 2);  // measured and predicted
  EXPECT_EQ(count(s, "\"codec bucket 1\""), 0);
  // Measured bucket 0: 50 .. 60 ms -> codec 50..53 ms, all-reduce 53..60 ms; bucket 1 whole.
  EXPECT_NE(s.find("\"ts\":50000,\"dur\":3000"), std::string::npos) << s;
  EXPECT_NE(s.find("\"ts\":53000,\"dur\":7000"), std::string::npos) << s;
  EXPECT_NE(s.find("\"ts\":72000,\"dur\":18000"), std::string::npos) << s;
  EXPECT_NE(s.find("\"codec_ms\":3"), std::string::npos) << s;
}

TEST(Trace, ThePredictedWaitForTheSlowestRankPrecedesTheOptimizer) {
  CompareReport r = one_run();
  EXPECT_EQ(count(compare_trace(r).dump(), "\"wait for the slowest rank\""), 0);  // none fitted
  r.rows[0].predicted.straggler_s = 0.0015;
  const std::string s = compare_trace(r).dump();
  EXPECT_EQ(count(s, "\"wait for the slowest rank\""), 1);  // predicted only
  // Step 95 ms, optimizer 2 ms: the wait 91.5 .. 93 ms, the optimizer 93 .. 95 ms.
  EXPECT_NE(s.find("\"ts\":91500,\"dur\":1500"), std::string::npos) << s;
  EXPECT_NE(s.find("\"ts\":93000,\"dur\":2000"), std::string::npos) << s;
}

TEST(Trace, AnAccumulatedStepIsDrawnMicroStepByMicroStep) {
  // Three micro-steps: each a third of the data wait (3 ms) and forward (30 ms); backward 40
  // ms, of which the synchronized last one's 20 ms measured (25 ms predicted) and the two
  // earlier ones share the rest.
  CompareReport r = one_run();
  CompareRow& row = r.rows[0];
  row.run.config.accumulate = 3;
  row.run.data_s = row.predicted.data_s = 0.003;
  row.run.backward_sync_s = 0.020;
  row.predicted.backward_sync_s = 0.025;
  const std::string s = compare_trace(r).dump();
  for (const char* phase : {"\"data wait\"", "\"forward\"", "\"backward\""})
    EXPECT_EQ(count(s, phase), 6) << phase;
  // The two earlier micro-steps' three events each, measured and predicted.
  EXPECT_EQ(count(s, "\"micro_step\""), 12);
  // Measured: backwards 11..21, 32..42 and the synchronized one 53..73 ms.
  EXPECT_NE(s.find("\"ts\":11000,\"dur\":10000"), std::string::npos) << s;
  EXPECT_NE(s.find("\"ts\":32000,\"dur\":10000"), std::string::npos) << s;
  EXPECT_NE(s.find("\"ts\":53000,\"dur\":20000"), std::string::npos) << s;
  // Predicted: 7.5 ms each earlier (11..18.5, 29.5..37), the synchronized one 48..73 ms.
  EXPECT_NE(s.find("\"ts\":11000,\"dur\":7500"), std::string::npos) << s;
  EXPECT_NE(s.find("\"ts\":29500,\"dur\":7500"), std::string::npos) << s;
  EXPECT_NE(s.find("\"ts\":48000,\"dur\":25000"), std::string::npos) << s;
  // A file without backward_sync_s: equal thirds.
  row.run.backward_sync_s = std::nan("");
  const std::string eq = compare_trace(r).dump();
  EXPECT_EQ(eq.find("NaN"), std::string::npos);
  EXPECT_NE(eq.find("\"ts\":59666.667,\"dur\":13333.333"), std::string::npos) << eq;
}

TEST(Trace, RunsFollowOneAnotherOnTheTimeAxis) {
  CompareReport r = one_run();
  r.rows.push_back(r.rows[0]);
  r.rows[1].run.path = "second.h5";
  const std::string s = compare_trace(r).dump();
  EXPECT_EQ(count(s, "\"process_name\""), 4);
  // The second run starts after the longer of the first's steps (100 ms) plus a 10% gap.
  EXPECT_NE(s.find("\"ts\":110000,"), std::string::npos);
}

}  // namespace
}  // namespace gradsync::netmodel
