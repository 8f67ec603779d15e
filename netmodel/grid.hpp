// gradsync/netmodel/grid.hpp — parameter grids for `gradsync-model predict`.
//
// Any numeric option takes one value, a comma list ("1,2,4") or an integer range "A..B"
// (step 1) / "A..B:S" (step S); string options that never contain commas (fabric, algo,
// precision, model, compute profile, optimizer) take comma lists. The cross product is
// evaluated (the last axis varies fastest) and written as one HDF5 table: group /grid
// with one 1-D dataset per axis and per result column, all of the same length.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/provenance.hpp"
#include "netmodel/predict.hpp"

namespace gradsync::netmodel {

// "8" -> {8}; "1,2,4" -> {1,2,4}; "1..5" -> {1..5}; "0..100:25" -> {0,25,50,75,100}.
// UsageError naming `option` on malformed input, empty or descending ranges, steps <= 0,
// or more than 10^7 values.
std::vector<double> parse_number_list(const std::string& text, const std::string& option);
// Items separated by `sep` (',' by default; compressor specs contain commas: --compress
// lists take ';').
std::vector<std::string> parse_string_list(const std::string& text, const std::string& option, char sep = ',');
// --chunk-bytes: as parse_number_list, and "auto" (the runtime's own chunk) as kAutoChunk.
std::vector<double> parse_chunk_list(const std::string& text, const std::string& option);

struct Axis {
  std::string name;                 // option name without dashes, e.g. "nodes"
  std::vector<double> numbers;      // numeric axis
  std::vector<std::string> strings; // string axis (when numbers is empty)
  std::size_t size() const { return numbers.empty() ? strings.size() : numbers.size(); }
};

// Applies value i of the axis to the config (by option name).
void apply_axis(const Axis& axis, std::size_t i, PredictConfig& c);

struct GridTable {
  std::vector<Axis> axes;                        // only the ones with > 1 value
  std::size_t rows = 0;
  std::vector<std::vector<double>> axis_numbers; // per numeric axis: value per row
  std::vector<std::vector<std::string>> axis_strings;
  std::vector<double> step_time_s, epoch_time_s, comm_exposed_s, comm_total_s, data_s, compute_s, optimizer_s,
      bytes_sent;
  std::vector<std::int64_t> steps_per_epoch;
};

// Evaluates the cross product of `axes` over `base`.
GridTable run_grid(const PredictConfig& base, const std::vector<Axis>& axes, Predictor& predictor);

// Provenance of gradsync-model output files (program, argv, this host).
Provenance model_provenance(const std::vector<std::string>& argv);

void write_grid(const GridTable& g, const std::string& path, const std::vector<std::string>& argv);

}  // namespace gradsync::netmodel
