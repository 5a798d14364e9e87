// What the executor and `shardsim compare` rest on, checked without MPI:
// --scale, the timeline checks, memory peaks and breakdowns recomputed from
// timelines, the HDF5 round trip, the comparison and the plot.
// (The executor itself runs under mpirun: test_executor_mpi.cpp and
// cpu_execution_loop.sh.)
#include "calib/executor/measured_timeline.h"
#include "fixtures.h"
#include "sim/report/chrome_trace.h"
#include "sim/report/hdf5_timeline.h"
#include "sim/report/step_report.h"
#include "sim/report/timeline_comparison.h"
#include "sim/report/timeline_plot.h"
#include "sim/step/step_simulator.h"
#include "topology/base/json_input.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/job_scale.h"
#include "workloads/ir/collective_calls.h"
#include "workloads/ir/timeline.h"
#include "workloads/ir/timeline_check.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <hdf5.h>

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

workloads::Timeline simulate(const Program& program) {
  return sim::simulate(program, world().cluster(), world().router(), world().profile());
}

std::vector<int> all_ranks(const Program& program) {
  std::vector<int> ranks(static_cast<std::size_t>(program.ranks));
  for (int r = 0; r < program.ranks; ++r) ranks[static_cast<std::size_t>(r)] = r;
  return ranks;
}

std::string temporary_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("shardsim-test-execution-" + name)).string();
}

sim::TimelineFile write_and_read(const std::string& name, const Program& program, const workloads::Timeline& timeline) {
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
  SECTION("multi-head latent attention keeps its heads' widths, its heads and latents shrunk with hidden") {
    ModelSpec mla = load_model("deepseek-v3");  // 7168 wide, 128 heads, latents of rank 1536 and 512
    TrainingConfig training = load_training_config("seq4096-mbs1-4m-tokens");
    apply_job_scale(parse_job_scale("layers=4,hidden=1792"), 8, mla, training);
    REQUIRE(mla.heads == 32);  // 128 x 1792 / 7168
    REQUIRE(mla.kv_heads == 32);
    REQUIRE(mla.mla.q_lora_rank == 384);
    REQUIRE(mla.mla.kv_lora_rank == 128);
    REQUIRE(mla.mla.qk_nope_head_dim == 128);
    REQUIRE(mla.mla.qk_rope_head_dim == 64);
    REQUIRE(mla.mla.v_head_dim == 128);
    REQUIRE(mla.moe.expert_ffn_hidden == 512);  // 2048 x 4608 / 18432
  }
  SECTION("bad keys and values are refused with the option named") {
    for (const std::string bad : {"layers=0", "layers=two", "depth=2", "hidden", ""}) {
      INFO(bad);
      REQUIRE_THROWS_WITH(parse_job_scale(bad), Catch::Contains("--scale"));
    }
    // Past any real model: hidden=2147483647 once ran the step past the
    // simulated clock's range and out as an internal error.
    REQUIRE_THROWS_WITH(parse_job_scale("hidden=2147483647"),
                        "--scale: hidden=2147483647 is implausibly large (at most 2^20)");
    REQUIRE_THROWS_WITH(parse_job_scale("seq=16777217"), "--scale: seq=16777217 is implausibly large (at most 2^24)");
    REQUIRE_NOTHROW(parse_job_scale("hidden=1048576,vocab=16777216,seq=16777216"));
  }
}

TEST_CASE("a step too large to simulate is refused before any op is built, with the count", "[execution][bounds]") {
  // micro_batches=2147483647 once compiled until memory ran out.
  StepConfig config = scaled_config("zero3", 8, "layers=2,micro_batches=2147483647");
  config.training_file = "t.json";
  REQUIRE(micro_batches_per_step(config) == 2147483647);
  REQUIRE_THROWS_WITH(compile(config), Catch::StartsWith("t.json: global_batch: 2147483647 micro-batches a rank through 2 "
                                                         "layers is 8.59e+09 layer passes a step, above the 1e+06"));
  // At the bound it compiles: (2 + 2) x 250,000 layer passes.
  StepConfig at_bound = scaled_config("zero0", 1, "layers=2,hidden=64,ffn=172,vocab=512,seq=64,micro_batches=250000");
  REQUIRE_NOTHROW(check_step_work(at_bound));
  at_bound = scaled_config("zero0", 1, "layers=2,hidden=64,ffn=172,vocab=512,seq=64,micro_batches=250001");
  REQUIRE_THROWS_WITH(check_step_work(at_bound), Catch::Contains("above the 1e+06"));
}

TEST_CASE("the timeline check passes a simulated step and names each kind of violation", "[execution][check]") {
  const Program program = compile(scaled_config("zero3", 8, "layers=2,hidden=512,seq=256,vocab=1000,micro_batches=2"));
  const workloads::Timeline timeline = simulate(program);
  REQUIRE(workloads::timeline_violations(program, timeline).empty());

  const auto& ops = program.program_of(1).ops;
  std::size_t with_dep = 0;
  while (ops[with_dep].deps.empty()) ++with_dep;
  std::size_t collective = 0;
  while (ops[collective].kind != OpKind::collective) ++collective;

  SECTION("an op that starts before its dependency ends") {
    workloads::Timeline broken = timeline;
    const auto dep = ops[with_dep].deps.front();
    broken.ops[1][with_dep].start = timeline.ops[1][dep].end - 1;
    const auto found = workloads::timeline_violations(program, broken);
    REQUIRE_FALSE(found.empty());
    REQUIRE_THAT(found.front(), Catch::Contains("rank 1") && Catch::Contains("before its dependency"));
  }
  SECTION("an op that never ran") {
    workloads::Timeline broken = timeline;
    broken.ops[1][with_dep] = {-1, -1};
    REQUIRE_THAT(workloads::timeline_violations(program, broken).front(), Catch::Contains("did not run"));
  }
  SECTION("a collective member that completes before another issues the call") {
    workloads::Timeline broken = timeline;
    // Rank 2 issues this call only after rank 0 finished it (and everything
    // after it on rank 2 moves too, so the stream order still holds).
    const TimePs shift = timeline.ops[0][collective].end - timeline.ops[2][collective].start + 1;
    for (auto& t : broken.ops[2]) {
      t.start += shift;
      t.end += shift;
    }
    bool named = false;
    for (const auto& v : workloads::timeline_violations(program, broken, 0, 1000)) {
      named |= v.find("completed it before a member it needs data from issued it") != std::string::npos;
    }
    REQUIRE(named);
  }
}

TEST_CASE("a broadcast's root may finish early, its receivers may not", "[execution][check]") {
  StepConfig config = scaled_config("amsp-llama13b", 8, "layers=2,hidden=512,seq=256,vocab=1000,micro_batches=2");
  config.plan.factors = {1, 1, 8};  // the updated parameters travel by broadcast
  const Program program = compile(config);
  const workloads::Timeline timeline = simulate(program);
  REQUIRE(workloads::timeline_violations(program, timeline).empty());
  const auto& ops = program.program_of(0).ops;
  std::size_t bcast = 0;
  while (ops[bcast].kind != OpKind::collective || ops[bcast].collective != CollectiveOp::broadcast) ++bcast;
  const auto& group = program.communicators[static_cast<std::size_t>(ops[bcast].communicator)].groups.front();
  const auto root = static_cast<std::size_t>(group[static_cast<std::size_t>(ops[bcast].root)]);
  const std::size_t receiver = group[static_cast<std::size_t>(ops[bcast].root) == 0 ? 1 : 0];
  // The same call's op on the root and on a receiver (rank programs may differ).
  const auto ids = workloads::collective_call_ids(program);
  const auto op_of_call = [&](std::size_t rank) {
    const auto& mine = ids[rank];
    return static_cast<std::size_t>(std::find(mine.begin(), mine.end(), ids[0][bcast]) - mine.begin());
  };
  const std::size_t at_root = op_of_call(root), at_receiver = op_of_call(receiver);
  const std::string complaint = std::string(1, '\'').append(ops[bcast].name).append("': a member completed");
  const auto call_message = [&](const workloads::Timeline& t) {
    for (const auto& v : workloads::timeline_violations(program, t, 0, 1000)) {
      if (v.find(complaint) != std::string::npos) return true;
    }
    return false;
  };
  SECTION("the root done before a receiver issued: allowed (buffered)") {
    workloads::Timeline t = timeline;
    t.ops[root][at_root].end = t.ops[root][at_root].start;
    t.ops[receiver][at_receiver].start = t.ops[root][at_root].end + 1;
    REQUIRE_FALSE(call_message(t));
  }
  SECTION("a receiver done before the root issued: impossible") {
    workloads::Timeline t = timeline;
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
    const Program program = compile(scaled_config(plan, 16, "layers=2,hidden=512,seq=256,vocab=1000,micro_batches=2"));
    const workloads::Timeline timeline = simulate(program);
    const auto peaks = workloads::memory_peaks(program, timeline);
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
  REQUIRE(b.hidden_fraction() == Approx(1 - 4.0 / 6));  // of 6 s in flight, [2, 4] beside compute

  // The all-gather issued at 2 s but moving from 5 s: [4, 5] is waiting for
  // the other ranks, not exposed communication; [5, 6] is still shared.
  const sim::TimeBreakdown w =
      sim::breakdown_of_intervals({{s(0), s(4), -1}, {s(2), s(6), ag, s(5)}, {s(5), s(8), rs}}, s(10), 0);
  REQUIRE(w.compute_seconds == Approx(4));
  REQUIRE(w.waiting_seconds == Approx(1));
  REQUIRE(w.exposed_seconds[static_cast<std::size_t>(ag)] == Approx(0.5));
  REQUIRE(w.exposed_seconds[static_cast<std::size_t>(rs)] == Approx(0.5 + 2));
  REQUIRE(w.idle_seconds == Approx(2));
  REQUIRE(w.communication_seconds == Approx(3));  // moving data: [5, 8]
  REQUIRE(w.hidden_fraction() == 0);

  // Exposed parts summed kind by kind can come out a rounding step above the
  // time in flight; the share hidden is then none, not a negative one.
  sim::TimeBreakdown rounded;
  rounded.communication_seconds = 0.1 + 0.2;
  rounded.exposed_seconds[static_cast<std::size_t>(ag)] = 0.1;
  rounded.exposed_seconds[static_cast<std::size_t>(rs)] = 0.2 + 1e-15;
  REQUIRE(rounded.exposed_total() > rounded.communication_seconds);
  REQUIRE(rounded.hidden_fraction() == 0);
}

TEST_CASE("compare: a timeline against itself and against one twice as slow", "[execution][compare]") {
  const Program program = compile(scaled_config("zero3", 8, "layers=2,hidden=512,seq=256,vocab=1000,micro_batches=2"));
  const workloads::Timeline timeline = simulate(program);
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
    workloads::Timeline slow = timeline;
    for (auto& rank : slow.ops) {
      for (auto& t : rank) {
        t.start *= 2;
        t.end *= 2;
        if (t.moving >= 0) t.moving *= 2;
      }
    }
    slow.step_time *= 2;
    const auto c = sim::compare_timelines(predicted, write_and_read("slow.h5", program, slow));
    REQUIRE(c.step.relative_error() == Approx(-0.5));
    // Both files know when each call's data began to move.
    const auto row = [&](const std::string& name) {
      return std::count_if(c.op_classes.begin(), c.op_classes.end(), [&](const auto& q) { return q.name == name; });
    };
    REQUIRE(row("all_gather in flight") == 1);
    REQUIRE(row("all_gather moving data") == 1);
    REQUIRE(row("reduce_scatter moving data") == 1);
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
    const Program other = compile(scaled_config("zero1", 8, "layers=2,hidden=512,seq=256,vocab=1000,micro_batches=2"));
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

// The executor measures when each rank issued and ended an op, not when a
// call's data began to move: measured_timeline() derives it from the call's
// members. The simulator sets it from its own events, so on a simulated step
// (start and end only, as an executor would report them) the two must agree.
TEST_CASE("a measured call moves once its last member has issued it, as the simulator has it", "[execution][moving]") {
  // Pipeline stages wait for one another's sends: calls with real waiting.
  StepConfig config = scaled_config("zero-pipeline-pp4", 8, "layers=8,hidden=512,seq=256,vocab=1000,micro_batches=4");
  const Program program = compile(config);
  const workloads::Timeline simulated = simulate(program);
  std::vector<std::vector<calib::MeasuredOp>> run;
  for (const auto& rank : simulated.ops) {
    auto& ops = run.emplace_back();
    for (const workloads::OpTiming& t : rank) ops.push_back({seconds_from_picoseconds(t.start), seconds_from_picoseconds(t.end)});
  }
  const workloads::Timeline measured = calib::measured_timeline(program, run);
  std::size_t calls = 0, waited = 0;
  for (int r = 0; r < program.ranks; ++r) {
    const auto& ops = program.program_of(r).ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const workloads::OpTiming& s = simulated.ops[static_cast<std::size_t>(r)][i];
      const workloads::OpTiming& m = measured.ops[static_cast<std::size_t>(r)][i];
      if (ops[i].kind != OpKind::collective) {
        REQUIRE(m.moving == -1);
        continue;
      }
      ++calls;
      if (s.moving > s.start) ++waited;
      INFO(ops[i].name << " on rank " << r);
      REQUIRE(std::abs(m.moving - s.moving) <= 1);  // picoseconds, from the round trip through seconds
    }
  }
  REQUIRE(calls > 0);
  REQUIRE(waited > 0);

  SECTION("a member whose call ended before the last issue (an eager send) did not wait") {
    // Rank 0's first call ends before its last member issues it.
    const auto& ops = program.program_of(0).ops;
    std::size_t first = 0;
    while (ops[first].kind != OpKind::collective) ++first;
    const auto ids = workloads::collective_call_ids(program);
    std::vector<std::vector<calib::MeasuredOp>> late = run;
    double last_issue = 0;
    for (int r = 1; r < program.ranks; ++r) {
      const auto& rank_ids = ids[static_cast<std::size_t>(r)];
      const auto it = std::find(rank_ids.begin(), rank_ids.end(), ids[0][first]);
      if (it == rank_ids.end()) continue;
      auto& op = late[static_cast<std::size_t>(r)][static_cast<std::size_t>(it - rank_ids.begin())];
      op.start_seconds = late[0][first].end_seconds + 1e-3;
      op.end_seconds = op.start_seconds + 1e-3;
      last_issue = op.start_seconds;
    }
    REQUIRE(last_issue > 0);
    const workloads::Timeline m = calib::measured_timeline(program, late);
    REQUIRE(m.ops[0][first].moving == m.ops[0][first].start);
  }
}

TEST_CASE("compare splits a call's time in flight into waiting for peers and moving data", "[execution][compare]") {
  StepConfig config = scaled_config("zero-pipeline-pp4", 8, "layers=8,hidden=512,seq=256,vocab=1000,micro_batches=4");
  const Program program = compile(config);
  const workloads::Timeline timeline = simulate(program);
  const sim::TimelineFile file = write_and_read("pipeline.h5", program, timeline);
  // The column holds the simulator's moving times.
  std::size_t row = 0;
  for (int r = 0; r < program.ranks; ++r) {
    for (const workloads::OpTiming& t : timeline.ops[static_cast<std::size_t>(r)]) {
      const sim::TimelineOpRow& read = file.ops[row++];
      REQUIRE(read.moving_seconds == (t.moving < 0 ? -1.0 : seconds_from_picoseconds(t.moving)));
    }
  }
  // Every rank's waiting, as the step report has it, from the file.
  const auto c = sim::compare_timelines(file, file, 0);
  const sim::TimeBreakdown expected = sim::time_breakdown(program, timeline, 0);
  const auto waiting = std::find_if(c.breakdown.begin(), c.breakdown.end(),
                                    [](const auto& q) { return q.name == "waiting for other ranks"; });
  REQUIRE(waiting != c.breakdown.end());
  REQUIRE(expected.waiting_seconds > 0);
  REQUIRE(waiting->predicted_seconds == Approx(expected.waiting_seconds).epsilon(1e-9));
  REQUIRE(c.breakdown[1].predicted_seconds == Approx(expected.exposed_total()).epsilon(1e-9));
  // In flight = waiting + moving, call by call, so for the class sums too.
  for (std::size_t i = 0; i + 1 < c.op_classes.size(); ++i) {
    const std::string& name = c.op_classes[i].name;
    if (name.find(" in flight") == std::string::npos) continue;
    const std::string kind = name.substr(0, name.find(' '));
    REQUIRE(c.op_classes[i + 1].name == kind + " moving data");
    REQUIRE(c.op_classes[i + 1].predicted_seconds <= c.op_classes[i].predicted_seconds);
  }
  double in_flight = 0, moving = 0;
  std::size_t waited = 0;
  for (const sim::TimelineOpRow& op : file.ops) {
    if (op.kind != "collective") continue;
    waited += op.moving_seconds > op.start_seconds;
    if (op.rank != 0) continue;
    in_flight += op.end_seconds - op.start_seconds;
    moving += op.end_seconds - op.moving_seconds;
  }
  REQUIRE(in_flight > moving);

  // The trace nests each wait in its call's slice, at the call's start.
  std::ostringstream trace;
  sim::write_chrome_trace(trace, program, timeline, all_ranks(program));
  const auto events = nlohmann::json::parse(trace.str())["traceEvents"];
  std::size_t waits = 0;
  for (std::size_t e = 0; e < events.size(); ++e) {
    if (events[e]["name"] != "waiting for other ranks") continue;
    ++waits;
    REQUIRE(e > 0);
    const auto& call = events[e - 1];
    REQUIRE(call["ph"] == "X");
    REQUIRE(call["pid"] == events[e]["pid"]);
    REQUIRE(call["tid"] == events[e]["tid"]);
    REQUIRE(call["ts"] == events[e]["ts"]);
    REQUIRE(events[e]["dur"].get<double>() <= call["dur"].get<double>());
  }
  REQUIRE(waits == waited);
}

TEST_CASE("a timeline written before moving_seconds existed still reads, the column unknown", "[execution][compare]") {
  // The /ops columns of those files, written here by hand.
  struct OldRow {
    std::int32_t rank;
    std::uint32_t op;
    char name[96], kind[24], op_class[24], stream[24];
    double start_seconds, end_seconds, flops, bytes;
    std::int32_t group_size;
    std::int64_t call;
  };
  const std::string path = temporary_path("old-schema.h5");
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t name_type = H5Tcopy(H5T_C_S1), label_type = H5Tcopy(H5T_C_S1);
  H5Tset_size(name_type, 96);
  H5Tset_size(label_type, 24);
  const hid_t row_type = H5Tcreate(H5T_COMPOUND, sizeof(OldRow));
  H5Tinsert(row_type, "rank", HOFFSET(OldRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(row_type, "op", HOFFSET(OldRow, op), H5T_NATIVE_UINT32);
  H5Tinsert(row_type, "name", HOFFSET(OldRow, name), name_type);
  H5Tinsert(row_type, "kind", HOFFSET(OldRow, kind), label_type);
  H5Tinsert(row_type, "class", HOFFSET(OldRow, op_class), label_type);
  H5Tinsert(row_type, "stream", HOFFSET(OldRow, stream), label_type);
  H5Tinsert(row_type, "start_seconds", HOFFSET(OldRow, start_seconds), H5T_NATIVE_DOUBLE);
  H5Tinsert(row_type, "end_seconds", HOFFSET(OldRow, end_seconds), H5T_NATIVE_DOUBLE);
  H5Tinsert(row_type, "flops", HOFFSET(OldRow, flops), H5T_NATIVE_DOUBLE);
  H5Tinsert(row_type, "bytes", HOFFSET(OldRow, bytes), H5T_NATIVE_DOUBLE);
  H5Tinsert(row_type, "group_size", HOFFSET(OldRow, group_size), H5T_NATIVE_INT32);
  H5Tinsert(row_type, "call", HOFFSET(OldRow, call), H5T_NATIVE_INT64);
  const OldRow rows[2] = {{0, 0, "ag", "collective", "all_gather", "comm", 1.0, 3.0, 0, 64, 2, 0},
                          {1, 0, "ag", "collective", "all_gather", "comm", 2.0, 3.0, 0, 64, 2, 0}};
  const hsize_t count = 2;
  const hid_t space = H5Screate_simple(1, &count, nullptr);
  const hid_t ops = H5Dcreate2(file, "ops", row_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ops, row_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows);
  const auto attribute = [&](const char* name, const std::string& text) {
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, text.size() + 1);
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(file, name, type, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, text.c_str());
    H5Aclose(a);
    H5Sclose(scalar);
    H5Tclose(type);
  };
  attribute("schema", "shardsim-timeline-1");
  attribute("summary_json", "{}");
  const double step = 3.0;
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(file, "step_seconds", H5T_NATIVE_DOUBLE, scalar, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_DOUBLE, &step);
  for (hid_t id : {a}) H5Aclose(id);
  for (hid_t id : {scalar, space}) H5Sclose(id);
  H5Dclose(ops);
  for (hid_t id : {row_type, name_type, label_type}) H5Tclose(id);
  H5Fclose(file);

  const sim::TimelineFile read = sim::read_hdf5_timeline(path);
  std::filesystem::remove(path);
  REQUIRE(read.ops.size() == 2);
  REQUIRE(read.ops[1].start_seconds == 2.0);
  REQUIRE(read.ops[1].call == 0);
  for (const auto& op : read.ops) REQUIRE(op.moving_seconds == -1);
  const auto c = sim::compare_timelines(read, read);
  REQUIRE(c.op_classes.size() == 1);  // in flight only: when data moved is not known
  REQUIRE(c.op_classes[0].name == "all_gather in flight");
  REQUIRE(c.op_classes[0].predicted_seconds == Approx((2.0 + 1.0) / 2));
}

TEST_CASE("reading a file that is not a timeline names the file", "[execution][errors]") {
  const std::string path = temporary_path("not-hdf5.h5");
  std::ofstream(path) << "plain text\n";
  REQUIRE_THROWS_AS(sim::read_hdf5_timeline(path), InputError);
  REQUIRE_THROWS_WITH(sim::read_hdf5_timeline(path), path + ": cannot open as an HDF5 file (not HDF5, or cut short)");
  std::filesystem::remove(path);
  REQUIRE_THROWS_WITH(sim::read_hdf5_timeline(path), Catch::Contains("no such file"));
}
