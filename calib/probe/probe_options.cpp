#include "calib/probe/probe_options.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

namespace shardsim::calib {

std::vector<GemmShape3> probe_gemm_shapes(long long max_square, long long hidden, long long max_tokens) {
  std::vector<GemmShape3> shapes;
  for (long long s = 64; s <= max_square; s *= 2) shapes.push_back({s, s, s});
  // LLaMA-style layer, SwiGLU with intermediate 8/3 h rounded to 256, tokens x out x in.
  const long long intermediate = (8 * hidden / 3 + 255) / 256 * 256;
  for (long long tokens = 256; tokens <= max_tokens; tokens *= 4) {
    shapes.push_back({tokens, 3 * hidden, hidden});         // QKV
    shapes.push_back({tokens, hidden, hidden});             // attention output
    shapes.push_back({tokens, 2 * intermediate, hidden});   // MLP gate + up
    shapes.push_back({tokens, hidden, intermediate});       // MLP down
  }
  return shapes;
}

std::vector<GemmShape3> layer_gemm_shapes(long long hidden, long long max_tokens,
                                          const std::vector<int>& tensor_parallel_degrees) {
  const long long intermediate = (8 * hidden / 3 + 255) / 256 * 256;
  std::vector<GemmShape3> shapes;
  std::set<std::tuple<long long, long long, long long>> seen;
  const auto add = [&](long long m, long long n, long long k) {
    if (seen.insert({m, n, k}).second) shapes.push_back({m, n, k});
  };
  for (long long tokens = 256; tokens <= max_tokens; tokens *= 4) {
    for (const int tp : tensor_parallel_degrees) {
      // out, in of each GEMM on one GPU
      const std::pair<long long, long long> layer[] = {{3 * hidden / tp, hidden},
                                                       {hidden, hidden / tp},
                                                       {2 * intermediate / tp, hidden},
                                                       {hidden, intermediate / tp}};
      for (const auto& [out, in] : layer) {
        add(tokens, out, in);
        add(tokens, in, out);
        add(in, out, tokens);
      }
    }
  }
  return shapes;
}

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t h = values.size() / 2;
  return values.size() % 2 ? values[h] : 0.5 * (values[h - 1] + values[h]);
}

}  // namespace shardsim::calib
