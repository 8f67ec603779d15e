// gradsync-model-bench — times the predict grid through the library: ResNet-50 on
// roce-100g, 8 ranks per node, --nodes 1..1000 x --bucket-mb 1..100 (10^5 configurations).
// Prints configurations, seconds and configurations per second. Not a test: a figure.
#include <cstdio>

#include "core/timer.hpp"
#include "netmodel/grid.hpp"

using namespace gradsync::netmodel;

int main() {
  PredictConfig base;
  base.model = "resnet50";
  base.fabric = "roce-100g";
  base.ranks_per_node = 8;
  std::vector<Axis> axes(2);
  axes[0].name = "nodes";
  axes[0].numbers = parse_number_list("1..1000", "--nodes");
  axes[1].name = "bucket-mb";
  axes[1].numbers = parse_number_list("1..100", "--bucket-mb");
  Predictor p;
  gradsync::Stopwatch sw;
  const GridTable g = run_grid(base, axes, p);
  const double s = sw.elapsed_s();
  std::printf("gradsync-model-bench: %zu configurations in %.3f s (%.0f configurations/s)\n", g.rows, s, g.rows / s);
  return 0;
}
