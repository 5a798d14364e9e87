// What the executor and `shardsim compare` rest on, checked without MPI:
// --scale, the timeline checks, memory peaks and breakdowns recomputed from
// timelines, the HDF5 round trip, the comparison and the plot.
// (The executor itself runs under mpirun: test_executor_mpi.cpp and
// cpu_execution_loop.sh.)
#include "fixtures.h"
#include "sim/step/chrome_trace.h"
#include "sim/step/hdf5_timeline.h"
#include "sim/step/step_report.h"
#include "sim/step/step_simulator.h"
#include "sim/step/timeline_check.h"
#include "sim/step/timeline_comparison.h"
#include "sim/step/timeline_plot.h"
#include "topology/json_input.h"
#include "workloads/job_scale.h"
#include "workloads/step_compiler.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

StepConfig scaled_config(const std::string& plan, int ranks, const std::string& scale) {
  StepConfig config;
  config.model = load_model("llama-7b");
  config.training = load_training_config("seq4096-mbs1-4m-tokens");
  config.plan = load_plan(plan);
  config.data_parallel = ranks;
  config.gpus_per_node = 8;
  apply_job_scale(parse_job_scale(scale), ranks, config.model, config.training);
  return config;
}

const test::World& world() {
  static const test::World w("dgx-a100-8node");
  return w;
}

sim::StepTimeline simulate(const Program& program) {
  return sim::simulate_step(program, world().cluster(), world().router(), world().profile());
}

std::vector<int> all_ranks(const Program& program) {
  std::vector<int> ranks(static_cast<std::size_t>(program.ranks));
  for (int r = 0; r < program.ranks; ++r) ranks[static_cast<std::size_t>(r)] = r;
  return ranks;
}

std::string temporary_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("shardsim-test-execution-" + name)).string();
}

sim::TimelineFile write_and_read(const std::string& name, const Program& program, const sim::StepTimeline& timeline) {
  const std::string path = temporary_path(name);
  nlohmann::json summary = {{"profile", "a100"}, {"network", "flow"}};
  sim::write_hdf5_timeline(path, program, timeline, all_ranks(program), world().cluster(), summary);
  sim::TimelineFile file = sim::read_hdf5_timeline(path);
  std::filesystem::remove(path);
  return file;
}

}  // namespace

TEST_CASE("scaling a job shrinks the model and the batch and leaves the plan alone", "[execution][scale]") {
  const std::string scale = "layers=2,hidden=256,vocab=1024,seq=128,micro_batches=3";
  StepConfig config = scaled_config("zero3", 4, scale);
  const ModelSpec& m = config.model;
  REQUIRE(m.layers == 2);
  REQUIRE(m.hidden == 256);
  REQUIRE(m.head_dim == 128);  // kept: 2 heads of 128
  REQUIRE(m.heads == 2);
  REQUIRE(m.kv_heads == 2);
  REQUIRE(m.ffn_hidden == 688);  // 11008 x 256 / 4096
  // By hand: embedding and head 1024 x 256 each, a final norm of 256, and per
  // layer 4 x 256^2 attention + 3 x 256 x 688 SwiGLU + 2 norms of 256.
  REQUIRE(count_parameters(m).total() == 2 * 1024 * 256 + 256 + 2 * (4 * 256 * 256 + 3 * 256 * 688 + 2 * 256));
  REQUIRE(config.training.sequence_length == 128);
  REQUIRE(gradient_accumulation_steps(config.training, 4, "t") == 3);
  REQUIRE(config.plan.factors.parameters == load_plan("zero3").factors.parameters);

  SECTION("grouped-query attention keeps its ratio where the head count allows") {
    ModelSpec gqa = load_model("llama2-70b");  // 64 heads, 8 key/value heads
    TrainingConfig training = load_training_config("seq4096-mbs1-4m-tokens");
    apply_job_scale(parse_job_scale("hidden=2048"), 8, gqa, training);
    REQUIRE(gqa.heads == 16);
    REQUIRE(gqa.kv_heads == 2);
  }
  SECTION("a MoE model keeps its experts and routing, their widths shrunk with the MLP's") {
    ModelSpec moe = load_model("mixtral-8x7b");
    moe.moe.first_dense_layers = 3;
    TrainingConfig training = load_training_config("seq4096-mbs1-4m-tokens");
    apply_job_scale(parse_job_scale("layers=2,hidden=256"), 8, moe, training);
    REQUIRE(moe.moe.experts == 8);
    REQUIRE(moe.moe.experts_per_token == 2);
    REQUIRE(moe.moe.expert_ffn_hidden == 896);  // 14336 x 256 / 4096
    REQUIRE(moe.moe.first_dense_layers == 1);   // one dense layer, one MoE layer
    REQUIRE(moe.moe_layer(1));
  }
  SECTION("bad keys and values are refused with the option named") {
    for (const std::string bad : {"layers=0", "layers=two", "depth=2", "hidden", ""}) {
      INFO(bad);
      REQUIRE_THROWS_WITH(parse_job_scale(bad), Catch::Contains("--scale"));
    }
  }
}

TEST_CASE("the timeline check passes a simulated step and names each kind of violation", "[execution][check]") {
  const Program program = compile_step(scaled_config("zero3", 8, "layers=2,hidden=512,seq=256,vocab=1000,micro_batches=2"));
  const sim::StepTimeline timeline = simulate(program);
  REQUIRE(sim::timeline_violations(program, timeline).empty());

  const auto& ops = program.program_of(1).ops;
  std::size_t with_dep = 0;
  while (ops[with_dep].deps.empty()) ++with_dep;
  std::size_t collective = 0;
  while (ops[collective].kind != OpKind::collective) ++collective;

  SECTION("an op that starts before its dependency ends") {
    sim::StepTimeline broken = timeline;
    const auto dep = ops[with_dep].deps.front();
    broken.ops[1][with_dep].start = timeline.ops[1][dep].end - 1;
    const auto found = sim::timeline_violations(program, broken);
    REQUIRE_FALSE(found.empty());
    REQUIRE_THAT(found.front(), Catch::Contains("rank 1") && Catch::Contains("before its dependency"));
  }
  SECTION("an op that never ran") {
    sim::StepTimeline broken = timeline;
    broken.ops[1][with_dep] = {-1, -1};
    REQUIRE_THAT(sim::timeline_violations(program, broken).front(), Catch::Contains("did not run"));
  }
  SECTION("a collective member that completes before another issues the call") {
    sim::StepTimeline broken = timeline;
    // Rank 2 issues this call only after rank 0 finished it (and everything
    // after it on rank 2 moves too, so the stream order still holds).
    const TimePs shift = timeline.ops[0][collective].end - timeline.ops[2][collective].start + 1;
    for (auto& t : broken.ops[2]) {
      t.start += shift;
      t.end += shift;
    }
    bool named = false;
    for (const auto& v : sim::timeline_violations(program, broken, 0, 1000)) {
      named |= v.find("completed it before a member it needs data from issued it") != std::string::npos;
    }
    REQUIRE(named);
  }
}

TEST_CASE("a broadcast's root may finish early, its receivers may not", "[execution][check]") {
  StepConfig config = scaled_config("amsp-llama13b", 8, "layers=2,hidden=512,seq=256,vocab=1000,micro_batches=2");
  config.plan.factors = {1, 1, 8};  // the updated parameters travel by broadcast
  const Program program = compile_step(config);
  const sim::StepTimeline timeline = simulate(program);
  REQUIRE(sim::timeline_violations(program, timeline).empty());
  const auto& ops = program.program_of(0).ops;
  std::size_t bcast = 0;
  while (ops[bcast].kind != OpKind::collective || ops[bcast].collective != CollectiveOp::broadcast) ++bcast;
  const auto& group = program.communicators[static_cast<std::size_t>(ops[bcast].communicator)].groups.front();
  const auto root = static_cast<std::size_t>(group[static_cast<std::size_t>(ops[bcast].root)]);
  const std::size_t receiver = group[static_cast<std::size_t>(ops[bcast].root) == 0 ? 1 : 0];
  // The same call's op on the root and on a receiver (rank programs may differ).
  const auto ids = sim::collective_call_ids(program);
  const auto op_of_call = [&](std::size_t rank) {
    const auto& mine = ids[rank];
    return static_cast<std::size_t>(std::find(mine.begin(), mine.end(), ids[0][bcast]) - mine.begin());
  };
  const std::size_t at_root = op_of_call(root), at_receiver = op_of_call(receiver);
  const auto call_message = [&](const sim::StepTimeline& t) {
    for (const auto& v : sim::timeline_violations(program, t, 0, 1000)) {
      if (v.find("'" + ops[bcast].name + "': a member completed") != std::string::npos) return true;
    }
    return false;
  };
  SECTION("the root done before a receiver issued: allowed (buffered)") {
    sim::StepTimeline t = timeline;
    t.ops[root][at_root].end = t.ops[root][at_root].start;
    t.ops[receiver][at_receiver].start = t.ops[root][at_root].end + 1;
    REQUIRE_FALSE(call_message(t));
  }
  SECTION("a receiver done before the root issued: impossible") {
    sim::StepTimeline t = timeline;
    auto& at = t.ops[root][at_root];
    const TimePs length = at.end - at.start;
    at.start = t.ops[receiver][at_receiver].end + 1;
    at.end = at.start + length;
    REQUIRE(call_message(t));
  }
}

TEST_CASE("memory peaks recomputed from a timeline equal the simulator's", "[execution][memory]") {
  for (const std::string plan : {"zero1", "zero3", "mics-8"}) {
    INFO(plan);
    const Program program = compile_step(scaled_config(plan, 16, "layers=2,hidden=512,seq=256,vocab=1000,micro_batches=2"));
    const sim::StepTimeline timeline = simulate(program);
    const auto peaks = sim::memory_peaks(program, timeline);
    REQUIRE(peaks.size() == timeline.peak_memory.size());
    for (std::size_t r = 0; r < peaks.size(); ++r) {
      REQUIRE(peaks[r].total_bytes == Approx(timeline.peak_memory[r].total_bytes).epsilon(1e-12));
      for (std::size_t c = 0; c < peaks[r].by_category.size(); ++c) {
        REQUIRE(peaks[r].by_category[c] == Approx(timeline.peak_memory[r].by_category[c]).epsilon(1e-12).margin(1e-3));
      }
    }
  }
}

TEST_CASE("the breakdown of bare intervals, worked by hand", "[execution][breakdown]") {
  // compute [0, 4] s, all-gather [2, 6] s, reduce-scatter [5, 8] s, step ends at 10 s.
  const auto s = picoseconds_from_seconds;
  const auto ag = static_cast<int>(CollectiveOp::all_gather), rs = static_cast<int>(CollectiveOp::reduce_scatter);
  const sim::TimeBreakdown b =
      sim::breakdown_of_intervals({{s(0), s(4), -1}, {s(2), s(6), ag}, {s(5), s(8), rs}}, s(10), 0);
  REQUIRE(b.compute_seconds == Approx(4));
  REQUIRE(b.exposed_seconds[static_cast<std::size_t>(ag)] == Approx(1 + 0.5));  // [4, 5] alone, [5, 6] shared
  REQUIRE(b.exposed_seconds[static_cast<std::size_t>(rs)] == Approx(0.5 + 2));  // [5, 6] shared, [6, 8] alone
  REQUIRE(b.idle_seconds == Approx(2));
  REQUIRE(b.communication_seconds == Approx(6));
}

TEST_CASE("compare: a timeline against itself and against one twice as slow", "[execution][compare]") {
  const Program program = compile_step(scaled_config("zero3", 8, "layers=2,hidden=512,seq=256,vocab=1000,micro_batches=2"));
  const sim::StepTimeline timeline = simulate(program);
  const sim::TimelineFile predicted = write_and_read("predicted.h5", program, timeline);
  REQUIRE(predicted.ops.size() == program.total_ops());
  REQUIRE(predicted.step_seconds == Approx(seconds_from_picoseconds(timeline.step_time)));
  REQUIRE(predicted.summary["profile"] == "a100");

  SECTION("against itself every error is zero") {
    const auto c = sim::compare_timelines(predicted, predicted);
    REQUIRE(c.ranks.size() == 8);
    REQUIRE(c.step.relative_error() == 0);
    for (const auto& q : c.op_classes) REQUIRE(q.relative_error() == 0);
    REQUIRE(c.predicted_hidden_fraction == c.measured_hidden_fraction);
  }
  SECTION("every time doubled: -50 % everywhere, the same overlap") {
    sim::StepTimeline slow = timeline;
    for (auto& rank : slow.ops) {
      for (auto& t : rank) {
        t.start *= 2;
        t.end *= 2;
      }
    }
    slow.step_time *= 2;
    const auto c = sim::compare_timelines(predicted, write_and_read("slow.h5", program, slow));
    REQUIRE(c.step.relative_error() == Approx(-0.5));
    REQUIRE_FALSE(c.op_classes.empty());
    for (const auto& q : c.op_classes) REQUIRE(q.relative_error() == Approx(-0.5));
    for (const auto& q : c.breakdown) {
      if (q.measured_seconds > 0) REQUIRE(q.relative_error() == Approx(-0.5));
    }
    REQUIRE(c.predicted_hidden_fraction == Approx(c.measured_hidden_fraction));
    // The largest difference is the longest op, at half its measured time.
    REQUIRE(c.largest_differences.front().predicted_seconds ==
            Approx(c.largest_differences.front().measured_seconds / 2));
  }
  SECTION("a different program is refused, naming the op that differs") {
    const Program other = compile_step(scaled_config("zero1", 8, "layers=2,hidden=512,seq=256,vocab=1000,micro_batches=2"));
    const sim::TimelineFile measured = write_and_read("other.h5", other, simulate(other));
    REQUIRE_THROWS_AS(sim::compare_timelines(predicted, measured), InputError);
    REQUIRE_THROWS_WITH(sim::compare_timelines(predicted, measured), Catch::Contains("not the same program"));
  }
  SECTION("the PNG of both timelines is a whole image, 1600 pixels wide") {
    // (Written whole or not at all by the CLI's AtomicOutputFile: cpu_execution_loop.sh.)
    const std::string png = sim::timeline_png({{"predicted", &predicted}, {"predicted again", &predicted}}, 3);
    REQUIRE(png.size() > 24);
    REQUIRE(png.substr(1, 3) == "PNG");
    const auto byte = [&](std::size_t i) { return static_cast<unsigned>(static_cast<unsigned char>(png[i])); };
    REQUIRE((byte(16) << 24 | byte(17) << 16 | byte(18) << 8 | byte(19)) == 1600u);  // IHDR width
  }
}

TEST_CASE("reading a file that is not a timeline names the file", "[execution][errors]") {
  const std::string path = temporary_path("not-hdf5.h5");
  std::ofstream(path) << "plain text\n";
  REQUIRE_THROWS_AS(sim::read_hdf5_timeline(path), InputError);
  REQUIRE_THROWS_WITH(sim::read_hdf5_timeline(path), Catch::Contains(path));
  std::filesystem::remove(path);
  REQUIRE_THROWS_WITH(sim::read_hdf5_timeline(path), Catch::Contains("no such file"));
}
