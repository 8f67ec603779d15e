// gradsync/netmodel/trace.hpp — predicted vs measured steps as Chrome trace-event JSON.
//
// Purpose: `gradsync-model compare --trace FILE` writes one file that Perfetto and
// chrome://tracing open like a PyTorch profiler trace, so a measured step and the model's
// step can be looked at side by side.
// Approach: the JSON object form of the Trace Event Format, {"traceEvents": [...],
// "displayTimeUnit": "ms"}: complete events ("ph": "X", "ts"/"dur" in microseconds, "pid",
// "tid", "name", "cat", "args") and metadata events ("ph": "M", process_name/thread_name).
// Per compared run k: process 2k "measured: FILE" and process 2k+1 "predicted: FILE",
// each with thread 0 "rank 0 compute" (data wait, forward, backward, optimizer) and thread 1
// "rank 0 comm" (per bucket: the codec's encode+decode time, drawn before the collective,
// then the all-reduce). The measured step is the file's medians after warm-up (data,
// forward, backward, optimizer; rank 0's per-bucket start/end medians: train_file.hpp), laid
// out from the step start; the predicted step is simulate_step's timeline. Runs are placed
// one after another on the time axis (a gap of 10% of the longest step), so a grid reads
// left to right. The files hold rank 0's bucket timeline only, so there is one rank per run
// (the recorder's own --trace has every rank: scripts/gradsync_torch/trace.py).
// Cost: O(runs x buckets) events.
#pragma once

#include <string>
#include <vector>

#include "core/json.hpp"
#include "netmodel/compare.hpp"

namespace gradsync::netmodel {

Json compare_trace(const CompareReport& r);

// Writes compare_trace(r) to `path` atomically (temp file + rename).
void write_compare_trace(const CompareReport& r, const std::string& path);

}  // namespace gradsync::netmodel
