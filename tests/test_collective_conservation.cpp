// Bytes are conserved: what the flow network measured on the links, not
// what the plans claim. Everything that leaves a GPU arrives at a GPU; every
// switch and NIC passes on exactly what it receives; and where the closed
// form is clean, each GPU sends and receives exactly what the algorithm says,
// whatever protocol carries it (a slower protocol takes longer, it moves no
// more data).
#include "fixtures.h"

#include <catch2/catch.hpp>

#include <map>

using namespace shardsim;
using namespace shardsim::workloads;
using test::World;

namespace {

struct Tally {
  std::vector<double> gpu_out, gpu_in;
  std::map<int, double> vertex_in, vertex_out;  // switches and NICs; -1 is the spine tier of the bundles
};

Tally tally(const World& world, const std::vector<double>& link_bytes) {
  const auto& cluster = world.cluster();
  Tally t;
  t.gpu_out.assign(static_cast<std::size_t>(cluster.gpu_count()), 0.0);
  t.gpu_in = t.gpu_out;
  for (std::size_t l = 0; l < cluster.links().size(); ++l) {
    const auto& link = cluster.links()[l];
    const double bytes = link_bytes[l];
    if (link.from >= 0 && link.from < cluster.gpu_count()) {
      t.gpu_out[static_cast<std::size_t>(link.from)] += bytes;
    } else {
      t.vertex_out[link.from] += bytes;
    }
    if (link.to >= 0 && link.to < cluster.gpu_count()) {
      t.gpu_in[static_cast<std::size_t>(link.to)] += bytes;
    } else {
      t.vertex_in[link.to] += bytes;
    }
  }
  return t;
}

// The protocols the profile prices `algorithm` with for `op` (hierarchical
// runs on the ring's).
std::vector<Protocol> protocols(const World& world, CollectiveOp op, Algorithm algorithm) {
  std::vector<Protocol> found;
  for (Protocol p : {Protocol::ll, Protocol::ll128, Protocol::simple}) {
    if (world.profile().find(op, algorithm == Algorithm::hierarchical ? Algorithm::ring : algorithm, p)) found.push_back(p);
  }
  return found;
}

double sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

void require_conserved(const Tally& t) {
  REQUIRE(sum(t.gpu_out) > 0);
  REQUIRE(sum(t.gpu_out) == Approx(sum(t.gpu_in)).epsilon(1e-9));
  for (const auto& [vertex, in] : t.vertex_in) {
    INFO("vertex " << vertex);
    REQUIRE(in == Approx(t.vertex_out.at(vertex)).epsilon(1e-9).margin(1e-3));
  }
}

}  // namespace

TEST_CASE("bytes sent equal bytes received for every collective", "[collectives][conservation]") {
  for (const std::string preset : {"dgx-a100-8node", "h100-8node", "a800-1024"}) {
    const World world(preset);
    // Two nodes' worth of a regular group, and an irregular one.
    std::vector<topology::GpuId> regular;
    for (int g = 0; g < 16; ++g) regular.push_back(g);
    const std::vector<sim::GroupLayout> groups = {world.group(regular),
                                                  world.group({0, 3, 9, 10, 17, 40, 41, 42, 63})};
    for (const auto& group : groups) {
      for (const auto& [op, algorithm] : test::implemented_collectives()) {
        if (!world.runs(group, op, algorithm)) continue;
        for (Protocol protocol : protocols(world, op, algorithm)) {
          INFO(preset << " " << to_string(op) << " " << to_string(algorithm) << " " << to_string(protocol) << " on "
                      << group.size() << " ranks");
          const auto run = world.run(group, op, algorithm, protocol, 48.0 * (1 << 20));
          require_conserved(tally(world, run.link_bytes));
        }
      }
    }
  }
}

TEST_CASE("inside a node every GPU moves what the algorithm says, in every protocol", "[collectives][conservation]") {
  const World world("dgx-a100-2node");
  const auto node = world.group({0, 1, 2, 3, 4, 5, 6, 7});
  const double s = 64.0 * (1 << 20), n = 8;
  auto require_each = [](const std::vector<double>& values, double expected) {
    for (int g = 0; g < 8; ++g) REQUIRE(values[static_cast<std::size_t>(g)] == Approx(expected).epsilon(1e-9));
  };
  for (Protocol protocol : {Protocol::ll, Protocol::ll128, Protocol::simple}) {
    INFO(to_string(protocol));
    auto per_gpu = [&](CollectiveOp op, Algorithm algorithm, int root = 0) {
      return tally(world, world.run(node, op, algorithm, protocol, s, root).link_bytes);
    };
    const auto all_reduce = per_gpu(CollectiveOp::all_reduce, Algorithm::ring);
    require_each(all_reduce.gpu_out, 2 * (n - 1) / n * s);
    require_each(all_reduce.gpu_in, 2 * (n - 1) / n * s);
    const auto all_gather = per_gpu(CollectiveOp::all_gather, Algorithm::ring);
    require_each(all_gather.gpu_out, (n - 1) / n * s);
    // Broadcast from rank 3: it sends S and receives nothing; every other GPU
    // receives S, and all but the end of the chain pass it on.
    const auto broadcast = per_gpu(CollectiveOp::broadcast, Algorithm::ring, 3);
    REQUIRE(broadcast.gpu_in[3] == 0);
    REQUIRE(broadcast.gpu_out[3] == Approx(s));
    REQUIRE(sum(broadcast.gpu_out) == Approx(7 * s));
    REQUIRE(sum(broadcast.gpu_in) == Approx(7 * s));
  }
  const auto all_to_all = tally(world, world.run(node, CollectiveOp::all_to_all, Algorithm::direct, Protocol::simple, s).link_bytes);
  require_each(all_to_all.gpu_out, (n - 1) / n * s);
  require_each(all_to_all.gpu_in, (n - 1) / n * s);
}

TEST_CASE("a link carries the same bytes per buffer byte at every size, size corrections or not",
          "[collectives][conservation]") {
  // NCCL's tree correction slows a tree at medium sizes (size_correction.h):
  // the a100 profile's tree Simple reaches 0.7 of its bandwidth at 4 MiB and
  // all of it at 1 GiB. The time per byte changes with size, the bytes per
  // byte on every link do not.
  const World world("dgx-a100-2node");
  const auto group = world.all();
  const double medium = 4.0 * (1 << 20), large = 1.0 * (1 << 30);
  const auto at = [&](double s) {
    return world.run(group, CollectiveOp::all_reduce, Algorithm::tree, Protocol::simple, s).link_bytes;
  };
  const auto seconds_per_byte = [&](double s) {
    return world.flow_seconds(group, CollectiveOp::all_reduce, Algorithm::tree, Protocol::simple, s) / s;
  };
  REQUIRE(seconds_per_byte(medium) > 1.05 * seconds_per_byte(large));
  const auto small_run = at(medium), large_run = at(large);
  double total = 0;
  for (std::size_t l = 0; l < small_run.size(); ++l) {
    INFO("link " << l);
    REQUIRE(small_run[l] / medium == Approx(large_run[l] / large).epsilon(1e-9).margin(1e-12));
    total += small_run[l];
  }
  REQUIRE(total > 0);
}

TEST_CASE("a rail-aligned ring never touches the spine", "[collectives][conservation]") {
  const World world("dgx-a100-2node");
  const auto run = world.run(world.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, 1e9);
  for (std::size_t l = 0; l < world.cluster().links().size(); ++l) {
    const auto& link = world.cluster().links()[l];
    const bool spine = link.bundle || (link.from >= 0 && world.cluster().is_fabric_switch(link.from) &&
                                       link.to >= 0 && world.cluster().is_fabric_switch(link.to));
    if (spine) REQUIRE(run.link_bytes[l] == 0);
  }
}

TEST_CASE("a broadcast leaves its root and a reduce ends at it, whichever rank is root", "[collectives][conservation]") {
  // Two nodes, so that some roots sit where the ring leaves a node and the
  // hop a chain leaves out crosses the network. Every channel's entry and
  // exit GPU is attached to the channel's NIC, so no GPU relays for another
  // (PXN) and a GPU's bytes are its own.
  const World world("dgx-a100-2node");
  const auto group = world.all();
  const double s = 64.0 * (1 << 20), n = group.size();
  for (int root = 0; root < group.size(); ++root) {
    INFO("root " << root);
    const auto broadcast = tally(world, world.run(group, CollectiveOp::broadcast, Algorithm::ring, Protocol::simple, s, root).link_bytes);
    const auto reduce = tally(world, world.run(group, CollectiveOp::reduce, Algorithm::ring, Protocol::simple, s, root).link_bytes);
    for (int g = 0; g < group.size(); ++g) {
      const auto i = static_cast<std::size_t>(g);
      if (g == root) {
        REQUIRE(broadcast.gpu_in[i] == 0);
        REQUIRE(broadcast.gpu_out[i] == Approx(s).epsilon(1e-9));
        REQUIRE(reduce.gpu_out[i] == 0);
        REQUIRE(reduce.gpu_in[i] == Approx(s).epsilon(1e-9));
      } else {
        REQUIRE(broadcast.gpu_in[i] == Approx(s).epsilon(1e-9));  // each receives the buffer once
        REQUIRE(reduce.gpu_out[i] == Approx(s).epsilon(1e-9));    // each sends its partial sum once
      }
    }
    REQUIRE(sum(broadcast.gpu_out) == Approx((n - 1) * s).epsilon(1e-9));
    REQUIRE(sum(reduce.gpu_in) == Approx((n - 1) * s).epsilon(1e-9));
  }
}
