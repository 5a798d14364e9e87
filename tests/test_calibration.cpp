// Calibration: the least-squares fit against lines it must recover, the
// nccl-tests importer against sample logs written in nccl-tests' format
// (tests/data/nccl_tests/make_samples.py states the lines behind them), and
// a fitted profile in the simulator: table mode replays the measurements,
// and a measured GEMM efficiency changes the step by what the numbers say.
#include "calib/line_fit.h"
#include "calib/measurements.h"
#include "calib/nccl_tests_log.h"
#include "calib/probe/probe_timing.h"
#include "calib/profile.h"
#include "calib/profile_fit.h"
#include "fixtures.h"
#include "sim/step/kernel_time.h"
#include "sim/step/step_simulator.h"
#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/model_file.h"
#include "workloads/kernels/attention_kernels.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

using namespace shardsim;
using workloads::CollectiveOp;

namespace {

std::string sample(const std::string& name) { return std::string(SHARDSIM_SOURCE_DIR) + "/tests/data/nccl_tests/" + name; }

std::string read_text(const std::string& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json base_profile(const std::string& preset) {
  return load_json_file(resolve_preset(preset, "calib/profiles", "profile"));
}

std::vector<calib::LinePoint> points_of(const calib::Measurements& m, bool in_place) {
  std::vector<calib::LinePoint> points;
  for (const auto& c : m.collectives) {
    if (c.in_place == in_place && c.bytes > 0) points.push_back({c.bytes, c.seconds});
  }
  return points;
}

// A probe's square bf16 GEMMs from `from` to `to`, each at `efficiency` of `peak`.
calib::Measurements gemms_at(double efficiency, double peak, long long from, long long to) {
  calib::Measurements m;
  m.machine = {"test", "synthetic GEMMs at " + std::to_string(efficiency) + " of peak", "cuda", ""};
  for (long long s = from; s <= to; s *= 2) m.gemm.push_back({"bf16", s, s, s, 2.0 * s * s * s / (efficiency * peak)});
  return m;
}

// Two LLaMA-7B layers on the 8 GPUs of one node, every overlap off, so the
// step is a sequence whose parts can be added up.
workloads::Program two_layer_step(const std::string& plan, std::int64_t sequence) {
  workloads::StepConfig config;
  config.model = workloads::load_model("llama-7b");
  config.model.layers = 2;
  config.training.sequence_length = sequence;
  config.training.micro_batch_size = 1;
  config.training.global_batch_sequences = 8;
  config.plan = workloads::load_plan(plan);
  workloads::apply_overlap_level(config.plan, "none");
  config.data_parallel = 8;
  config.gpus_per_node = 8;
  return workloads::compile(config);
}

}  // namespace

TEST_CASE("the line fit recovers alpha and beta from noisy points within 1%", "[calib]") {
  const double alpha = 20e-6, rate = 50e9;
  std::mt19937 random(7);
  std::normal_distribution<double> noise(0.0, 0.01);
  std::vector<calib::LinePoint> points;
  for (double bytes = 1024; bytes <= 1024.0 * 1024 * 1024; bytes *= 2) {
    for (int repeat = 0; repeat < 5; ++repeat) points.push_back({bytes, (alpha + bytes / rate) * (1 + noise(random))});
  }
  const calib::LineFit fit = calib::fit_line(points);
  CHECK(fit.alpha_seconds == Approx(alpha).epsilon(0.01));
  CHECK(fit.units_per_second == Approx(rate).epsilon(0.01));
  CHECK(fit.r_squared > 0.99);
  CHECK(fit.worst_relative_error < 0.05);

  REQUIRE_THROWS_AS(calib::fit_line({{1024, 1e-3}, {1024, 2e-3}}), std::invalid_argument);

  // R^2 and the relative errors do not depend on the unit of time, even
  // where squares of seconds no longer fit in a double.
  std::vector<calib::LinePoint> huge = points;
  for (auto& p : huge) p.seconds *= 1e300;
  const calib::LineFit far = calib::fit_line(huge);
  CHECK(far.r_squared == Approx(fit.r_squared).epsilon(1e-9));
  CHECK(far.worst_relative_error == Approx(fit.worst_relative_error).epsilon(1e-9));
}

TEST_CASE("the fit recovers a GEMM efficiency curve and keeps the nominal peak", "[calib]") {
  const nlohmann::json base = base_profile("h200");
  const double peak = base["compute"]["dtypes"]["bf16"]["peak_flops_per_second"].get<double>();
  const double overhead = 8e-6, rate = 0.75 * peak;  // t = t0 + F / R: efficiency F / (P (t0 + F / R))
  std::mt19937 random(11);
  std::normal_distribution<double> noise(0.0, 0.005);
  calib::Measurements m;
  m.machine = {"test", "synthetic H200", "cuda", ""};
  for (long long s = 256; s <= 16384; s *= 2) {
    for (int repeat = 0; repeat < 3; ++repeat) {
      const double flops = 2.0 * s * s * s;
      m.gemm.push_back({"bf16", s, s, s, (overhead + flops / rate) * (1 + noise(random))});
    }
  }
  calib::FitOptions options;
  options.base = base;
  const calib::FitResult result = calib::fit_profile(m, options, "synthetic");
  const calib::Profile profile = calib::parse_profile(result.profile, "fitted");
  const calib::DtypeCompute& bf16 = *profile.compute.find("bf16");
  CHECK(bf16.peak_flops_per_second == peak);
  REQUIRE(bf16.gemm_efficiency.size() == 7);  // one octave of FLOPs per square size (x8 apart)
  for (const auto& point : bf16.gemm_efficiency) {
    INFO(point.flops);
    CHECK(point.efficiency == Approx(point.flops / (peak * (overhead + point.flops / rate))).epsilon(0.01));
  }
  const calib::MeasuredCurve& curve = profile.measured.gemm.at("bf16");
  CHECK(curve.fit.units_per_second == Approx(rate).epsilon(0.01));
  CHECK(curve.fit.alpha_seconds == Approx(overhead).epsilon(0.01));
  // What was not measured stays the base's.
  CHECK(profile.compute.hbm_efficiency == base["compute"]["hbm_efficiency"].get<double>());
  CHECK(profile.name == "h200-measured");
}

TEST_CASE("batched GEMMs are kept by shape, per GEMM of the batch, and stay off the curve by FLOPs", "[calib]") {
  // Layer GEMMs at 0.6 of peak beside attention's per-head products at 0.3
  // (a head size deep, they run far slower): the curve by FLOPs must be the
  // layers' alone, and each batched shape must keep its time per GEMM.
  const nlohmann::json base = base_profile("h200");
  const double peak = base["compute"]["dtypes"]["bf16"]["peak_flops_per_second"].get<double>();
  const double overhead = 6e-6, rate = 0.6 * peak;
  calib::Measurements m;
  m.machine = {"test", "synthetic H200", "cuda", ""};
  for (long long s = 512; s <= 16384; s *= 2) m.gemm.push_back({"bf16", s, s, s, overhead + 2.0 * s * s * s / rate});
  for (long long sequence = 512; sequence <= 8192; sequence *= 2) {
    const calib::GemmMeasurement scores{"bf16", sequence, sequence, 128, 0, 32};
    REQUIRE(scores.flops() == 2.0 * sequence * sequence * 128 * 32);
    m.gemm.push_back(scores);
    m.gemm.back().seconds = scores.flops() / (0.3 * peak);
  }
  calib::FitOptions options;
  options.base = base;
  const calib::Profile profile = calib::parse_profile(calib::fit_profile(m, options, "synthetic").profile, "fitted");
  const calib::MeasuredCurve& curve = profile.measured.gemm.at("bf16");
  CHECK(curve.fit.units_per_second == Approx(rate).epsilon(0.01));
  CHECK(curve.fit.alpha_seconds == Approx(overhead).epsilon(0.01));
  for (const auto& point : profile.compute.find("bf16")->gemm_efficiency) {
    INFO(point.flops);
    CHECK(point.efficiency == Approx(point.flops / (peak * (overhead + point.flops / rate))).epsilon(0.01));
  }

  // Attention without flash attention, 4 sequences x 32 heads of 2048 x 128:
  // 128 GEMMs, each at the batched point's time per GEMM.
  workloads::Op scores;
  scores.kind = workloads::OpKind::compute;
  scores.kernel = workloads::KernelClass::gemm;
  scores.dtype = workloads::Dtype::bf16;
  scores.gemm = {2048, 2048, 128};
  scores.flops = 128 * 2.0 * 2048 * 2048 * 128;
  const double per_gemm = 2.0 * 2048 * 2048 * 128 / (0.3 * peak);
  REQUIRE(profile.measured.gemm_seconds({"bf16", 2048, 2048, 128}) != nullptr);
  CHECK(*profile.measured.gemm_seconds({"bf16", 2048, 2048, 128}) == Approx(per_gemm).epsilon(1e-12));
  CHECK(sim::kernel_seconds(scores, profile) ==
        Approx(128 * per_gemm + profile.compute.kernel_launch_seconds).epsilon(1e-12));

  // The batch survives the raw format, and a point without one is one GEMM.
  nlohmann::json document = calib::measurements_to_json(m);
  CHECK(calib::parse_measurements(document, "raw.json").gemm.back().batch == 32);
  document["gemm"][0].erase("batch");
  CHECK(calib::parse_measurements(document, "raw.json").gemm.front().batch == 1);
  document["gemm"][1]["batch"] = 0;
  REQUIRE_THROWS_WITH(calib::parse_measurements(document, "raw.json"), Catch::Contains("raw.json: gemm[1].batch"));
}

TEST_CASE("nccl-tests text logs import with both sides and the #wrong column", "[calib]") {
  const calib::Measurements m = calib::import_nccl_tests(sample("all_reduce_8gpu.log"));
  REQUIRE(m.collectives.size() == 2 * 28);  // 8 B .. 1 GiB, out-of-place and in-place
  const auto& first = m.collectives[0];
  CHECK(first.op == CollectiveOp::all_reduce);
  CHECK(first.ranks == 8);
  CHECK(first.nodes == 1);
  CHECK(first.algorithm == "auto");
  CHECK(first.bytes == 8);
  CHECK(first.type == "float");
  CHECK_FALSE(first.in_place);
  CHECK(first.seconds == Approx(25.00e-6));
  CHECK(m.collectives[1].in_place);
  CHECK(m.collectives[1].seconds == Approx(24.75e-6));
  CHECK(first.wrong == 0.0);
  CHECK(m.machine.device == "NVIDIA H100 80GB HBM3");

  // The sample's out-of-place line is 25 us + size / 100 GB/s.
  const calib::LineFit fit = calib::fit_line(points_of(m, false));
  CHECK(fit.alpha_seconds == Approx(25e-6).epsilon(0.01));
  CHECK(fit.units_per_second == Approx(100e9).epsilon(0.01));
}

TEST_CASE("nccl-tests -J JSON imports the group, the algorithm and the rows", "[calib]") {
  const calib::Measurements m = calib::import_nccl_tests(sample("all_gather_16gpu_2node.json"));
  REQUIRE(m.collectives.size() == 2 * 19);  // 1 KiB .. 256 MiB
  CHECK(m.collectives[0].op == CollectiveOp::all_gather);
  CHECK(m.collectives[0].ranks == 16);
  CHECK(m.collectives[0].nodes == 2);
  CHECK(m.collectives[0].algorithm == "ring");  // NCCL_ALGO=Ring in the run's environment
  const calib::LineFit fit = calib::fit_line(points_of(m, false));
  CHECK(fit.alpha_seconds == Approx(40e-6).epsilon(0.01));
  CHECK(fit.units_per_second == Approx(20e9).epsilon(0.01));
}

TEST_CASE("a log of several nccl-tests runs imports each test with its own collective and line", "[calib]") {
  const calib::Measurements m = calib::import_nccl_tests(sample("suite_16gpu_2node.log"));
  // The generator's lines (make_samples.py): alpha and bytes per second of each test.
  struct Expected {
    CollectiveOp op;
    std::size_t rows;
    double alpha_seconds;
    double bytes_per_second;
  };
  const Expected expected[] = {{CollectiveOp::all_reduce, 19, 30e-6, 40e9},
                               {CollectiveOp::all_gather, 19, 35e-6, 25e9},
                               {CollectiveOp::reduce_scatter, 15, 45e-6, 30e9}};
  std::size_t total = 0;
  for (const Expected& e : expected) {
    calib::Measurements part;
    for (const auto& c : m.collectives) {
      if (c.op != e.op) continue;
      CHECK(c.ranks == 16);
      CHECK(c.nodes == 2);
      part.collectives.push_back(c);
    }
    REQUIRE(part.collectives.size() == 2 * e.rows);
    total += part.collectives.size();
    const calib::LineFit fit = calib::fit_line(points_of(part, false));
    CHECK(fit.alpha_seconds == Approx(e.alpha_seconds).epsilon(0.01));
    CHECK(fit.units_per_second == Approx(e.bytes_per_second).epsilon(0.01));
  }
  CHECK(total == m.collectives.size());

  // A cut in the second test names that test; a footer-less first one, the first.
  const std::string log = read_text(sample("suite_16gpu_2node.log"));
  const std::string cut = log.substr(0, log.find('\n', log.find("  4194304", log.find("all_gather_perf"))) + 1);
  REQUIRE_THROWS_WITH(calib::parse_nccl_tests_text(cut, "suite.log"),
                      Catch::Contains("suite.log (test 2 of 2, from line") && Catch::Contains("truncated"));
  std::string footerless = log;
  footerless.erase(footerless.find("# Avg bus bandwidth"), footerless.find('\n', footerless.find("# Avg bus bandwidth")) -
                                                                footerless.find("# Avg bus bandwidth"));
  REQUIRE_THROWS_WITH(calib::parse_nccl_tests_text(footerless, "suite.log"), Catch::Contains("test 1 of 3"));
}

TEST_CASE("bad nccl-tests logs are refused with the reason", "[calib]") {
  SECTION("truncated") {
    REQUIRE_THROWS_WITH(calib::import_nccl_tests(sample("all_reduce_truncated.log")), Catch::Contains("truncated"));
  }
  SECTION("#wrong != 0 is refused, or kept flagged and left out of the fit") {
    REQUIRE_THROWS_WITH(calib::import_nccl_tests(sample("reduce_scatter_wrong.log")),
                        Catch::Contains("#wrong != 0") && Catch::Contains("reduce_scatter_wrong.log:"));
    calib::NcclTestsImportOptions keep;
    keep.keep_wrong = true;
    const calib::Measurements m = calib::import_nccl_tests(sample("reduce_scatter_wrong.log"), keep);
    int wrong = 0;
    for (const auto& c : m.collectives) wrong += c.wrong && *c.wrong != 0;
    CHECK(wrong == 2);  // 1 MiB, both sides
    calib::FitOptions options;
    options.base = base_profile("h100");
    const calib::FitResult result = calib::fit_profile(m, options, "wrong.json");
    const calib::Profile profile = calib::parse_profile(result.profile, "fitted");
    const auto* curve = profile.measured.find(CollectiveOp::reduce_scatter, 4, 1);
    REQUIRE(curve != nullptr);
    CHECK(curve->curve.points.size() == 14);  // 1 KiB .. 16 MiB less 1 MiB
    CHECK(curve->curve.fit.units_per_second == Approx(50e9 / 0.995).epsilon(0.01));
    bool noted = false;
    for (const auto& note : result.notes) noted |= note.find("#wrong") != std::string::npos;
    CHECK(noted);
    // Without a base, collectives alone make no profile: it says what is missing.
    REQUIRE_THROWS_WITH(calib::fit_profile(m, {}, "wrong.json"), Catch::Contains("--base"));
  }
  SECTION("a collective the bus factor contradicts") {
    std::string text = read_text(sample("all_reduce_8gpu.log"));
    text.erase(text.find("# Collective test starting"), text.find('\n', text.find("# Collective test starting")) + 1 -
                                                            text.find("# Collective test starting"));
    REQUIRE_THROWS_WITH(calib::parse_nccl_tests_text(text, "mystery.log"), Catch::Contains("pass --op"));
    calib::NcclTestsImportOptions options;
    options.op = CollectiveOp::all_gather;
    REQUIRE_THROWS_WITH(calib::parse_nccl_tests_text(text, "mystery.log", options), Catch::Contains("bus factor"));
  }
  SECTION("fields of the wrong type or out of range name the file and the field") {
    const std::string log = read_text(sample("all_reduce_8gpu.log"));
    std::string huge_rank = log;
    huge_rank.replace(huge_rank.find("#  Rank  1 "), 11, "#  Rank  99999999999999999999 ");
    REQUIRE_THROWS_WITH(calib::parse_nccl_tests_text(huge_rank, "ranks.log"),
                        Catch::StartsWith("ranks.log:7: rank") && Catch::Contains("is not a rank from 0 to"));
    const std::string json = read_text(sample("all_gather_16gpu_2node.json"));
    const auto with = [&](const std::string& from, const std::string& to) {
      std::string text = json;
      text.replace(text.find(from), from.size(), to);
      return text;
    };
    REQUIRE_THROWS_WITH(calib::parse_nccl_tests_json(with("\"alg_bw\": 0.025567", "\"alg_bw\": \"fast\""), "j.json"),
                        "j.json: results[0].out_of_place.alg_bw: must be a number, got \"fast\"");
    REQUIRE_THROWS_WITH(calib::parse_nccl_tests_json(with("\"nwrong\": 0.0", "\"nwrong\": \"none\""), "j.json"),
                        "j.json: results[0].out_of_place.nwrong: must be a count of wrong elements or null, got \"none\"");
    REQUIRE_THROWS_WITH(calib::parse_nccl_tests_json(with("\"nwrong\": 0.0", "\"nwrong\": -1"), "j.json"),
                        Catch::StartsWith("j.json: results[0].out_of_place.nwrong: must be a count"));
    // Unchecked results (-c 0) are null: imported, with no #wrong to flag.
    const calib::Measurements unchecked =
        calib::parse_nccl_tests_json(with("\"nwrong\": 0.0", "\"nwrong\": null"), "j.json");
    CHECK_FALSE(unchecked.collectives[0].wrong.has_value());
    CHECK(unchecked.collectives[1].wrong == 0.0);
    REQUIRE_THROWS_WITH(calib::parse_nccl_tests_json(with("\"type\": \"float\"", "\"type\": 4"), "j.json"),
                        "j.json: results[0].type: must be a string, got 4");
    REQUIRE_THROWS_WITH(calib::parse_nccl_tests_json(with("\"rank\": 3,", "\"rank\": -3,"), "j.json"),
                        Catch::StartsWith("j.json: config.devices: rank -3 is not a rank"));
    REQUIRE_THROWS_WITH(calib::parse_nccl_tests_json(with("\"size\": 1024", "\"size\": 1e999"), "j.json"),
                        Catch::StartsWith("j.json: malformed JSON") && Catch::Contains("number overflow"));
  }
}

TEST_CASE("raw measurements survive a JSON round trip and name bad fields", "[calib]") {
  calib::Measurements m = calib::import_nccl_tests(sample("all_reduce_8gpu.log"));
  m.gemm.push_back({"bf16", 128, 256, 512, 1e-5});
  m.copies.push_back({"device_copy", 1 << 20, 1e-6});
  m.kernel_launch_seconds = {3e-6, 4e-6};
  m.interference.push_back({"bf16", 4096, 4096, 4096, 1e-3, 1.1e-3, CollectiveOp::all_reduce, 1 << 26});
  const nlohmann::json document = calib::measurements_to_json(m);
  CHECK(calib::measurements_to_json(calib::parse_measurements(document, "raw.json")) == document);

  nlohmann::json bad = document;
  bad["collectives"][3].erase("seconds");
  REQUIRE_THROWS_WITH(calib::parse_measurements(bad, "raw.json"), Catch::Contains("raw.json: collectives[3].seconds"));
}

TEST_CASE("a fitted profile missing a field is refused", "[calib]") {
  const calib::Measurements m = calib::import_nccl_tests(sample("all_reduce_8gpu.log"));
  calib::FitOptions options;
  options.base = base_profile("h100");
  nlohmann::json profile = calib::fit_profile(m, options, "raw.json").profile;
  REQUIRE_NOTHROW(calib::parse_profile(profile, "fitted.json"));
  profile["measured"]["collectives"][0].erase("points");
  REQUIRE_THROWS_WITH(calib::parse_profile(profile, "fitted.json"),
                      Catch::Contains("fitted.json: measured.collectives[0].points"));
}

TEST_CASE("a cluster turns measured bus bandwidth into link efficiency", "[calib]") {
  const calib::Measurements m = calib::import_nccl_tests(sample("all_reduce_8gpu.log"));
  const topology::ClusterSpec cluster = topology::load_cluster_spec("h100-8node");
  calib::FitOptions options;
  options.base = base_profile("h100");
  options.cluster = &cluster;
  const calib::Profile profile = calib::parse_profile(calib::fit_profile(m, options, "raw.json").profile, "fitted");
  // Largest row: 1 GiB, median of both sides, busbw = 2 (n-1)/n x size / time over 450 GB/s per direction.
  const double seconds = 0.5 * (10762.4e-6 + 10654.8e-6);
  const double busbw = 1073741824.0 / seconds * 1.75;
  CHECK(profile.bandwidth_efficiency(topology::LinkKind::nvlink) == Approx(busbw / 450e9));
}

TEST_CASE("table mode replays measured collectives in the step simulator", "[calib]") {
  const calib::Measurements m = calib::import_nccl_tests(sample("all_reduce_8gpu.log"));
  const test::World datasheet("dgx-a100-8node");
  calib::FitOptions options;
  options.base = base_profile(datasheet.profile().name);
  const calib::Profile fitted = calib::parse_profile(calib::fit_profile(m, options, "raw.json").profile, "fitted");
  const test::World w(topology::load_cluster_spec("dgx-a100-8node"), fitted);

  // A measured size gives the median of its rows; 1 MiB: 35.49 and 35.13 us.
  CHECK(sim::measured_collective_seconds(fitted, CollectiveOp::all_reduce, 8, 1, 1048576) ==
        Approx(0.5 * (35.49e-6 + 35.13e-6)));
  CHECK(sim::measured_collective_seconds(fitted, CollectiveOp::all_reduce, 16, 2, 1048576) < 0);  // not measured

  const workloads::Program program = two_layer_step("zero0", 512);
  sim::StepSimulationOptions table;
  table.network = sim::NetworkMode::table;
  const workloads::Timeline timeline = sim::simulate(program, w.cluster(), w.router(), w.profile(), table);
  int collectives = 0;
  const auto& ops = program.program_of(0).ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != workloads::OpKind::collective || ops[i].bytes == 0) continue;
    ++collectives;
    const auto& timing = timeline.ops[0][i];
    INFO(ops[i].name);
    CHECK(seconds_from_picoseconds(timing.end - timing.start) ==
          Approx(sim::measured_collective_seconds(fitted, ops[i].collective, 8, 1, ops[i].bytes)).epsilon(1e-6));
  }
  CHECK(collectives > 0);
}

TEST_CASE("a measured GEMM efficiency changes kernel and step times by what the numbers say", "[calib]") {
  const test::World datasheet("dgx-a100-8node");
  const calib::Profile& ds = datasheet.profile();
  const double peak = ds.compute.find("bf16")->peak_flops_per_second;
  const calib::Measurements m = gemms_at(0.4, peak, 64, 32768);
  calib::FitOptions options;
  options.base = base_profile(ds.name);
  const calib::Profile measured = calib::parse_profile(calib::fit_profile(m, options, "raw.json").profile, "fitted");
  const test::World w(topology::load_cluster_spec("dgx-a100-8node"), measured);

  const workloads::Program program = two_layer_step("zero3", 1024);
  double difference = 0;
  int gemms = 0;
  for (const auto& op : program.program_of(0).ops) {
    if (op.kind != workloads::OpKind::compute || op.kernel != workloads::KernelClass::gemm) continue;
    ++gemms;
    const double expected = std::max(op.flops / (0.4 * peak), op.hbm_bytes / measured.compute.achievable_hbm_bytes_per_second()) +
                            measured.compute.kernel_launch_seconds;
    CHECK(sim::kernel_seconds(op, measured) == Approx(expected).epsilon(1e-9));
    difference += sim::kernel_seconds(op, measured) - sim::kernel_seconds(op, ds);
  }
  REQUIRE(gemms > 0);
  CHECK(difference > 0);  // the datasheet's efficiency is above 0.4 at these sizes
  // With every overlap off the step is a sequence: only the GEMMs changed.
  const auto step = [&](const test::World& world) {
    return seconds_from_picoseconds(
        sim::simulate(program, world.cluster(), world.router(), world.profile(), sim::StepSimulationOptions{}).step_time);
  };
  CHECK(step(w) - step(datasheet) == Approx(difference).epsilon(1e-6));
}

TEST_CASE("a GEMM of a measured shape takes its measured time, any other shape the curve by FLOPs", "[calib]") {
  const nlohmann::json base = base_profile("h200");
  const double peak = base["compute"]["dtypes"]["bf16"]["peak_flops_per_second"].get<double>();
  calib::Measurements m = gemms_at(0.5, peak, 256, 16384);
  // An MLP down projection's input gradient, 15 % slower than the curve says.
  const double down_dgrad = 1.15 * 2.0 * 4096 * 11008 * 4096 / (0.5 * peak);
  m.gemm.push_back({"bf16", 4096, 11008, 4096, down_dgrad});
  m.gemm.push_back({"bf16", 4096, 11008, 4096, 1.01 * down_dgrad});  // timed twice: the median of the two
  m.gemm.push_back({"bf16", 4096, 11008, 4096, 0.99 * down_dgrad});
  calib::FitOptions options;
  options.base = base;
  const nlohmann::json fitted = calib::fit_profile(m, options, "raw.json").profile;
  const calib::Profile profile = calib::parse_profile(fitted, "fitted");
  const double launch = profile.compute.kernel_launch_seconds;

  workloads::Op gemm;
  gemm.kind = workloads::OpKind::compute;
  gemm.kernel = workloads::KernelClass::gemm;
  gemm.dtype = workloads::Dtype::bf16;
  gemm.gemm = {4096, 11008, 4096};
  gemm.flops = 2.0 * 4096 * 11008 * 4096;
  CHECK(sim::kernel_seconds(gemm, profile) == Approx(down_dgrad + launch).epsilon(1e-12));
  // Its forward, the same FLOPs in another shape, was not measured: the curve.
  gemm.gemm = {4096, 4096, 11008};
  const double curve = gemm.flops / (peak * profile.compute.find("bf16")->gemm_efficiency_at(gemm.flops));
  CHECK(sim::kernel_seconds(gemm, profile) == Approx(curve + launch).epsilon(1e-12));  // no HBM bytes given
  CHECK(sim::kernel_seconds(gemm, profile) < down_dgrad);
  // Another dtype of the measured shape: not measured either.
  gemm.gemm = {4096, 11008, 4096};
  gemm.dtype = workloads::Dtype::fp8;
  CHECK(profile.measured.gemm_seconds({"fp8", 4096, 11008, 4096}) == nullptr);

  // The shapes survive the profile's JSON; a repeated or bad entry is refused by name.
  CHECK(calib::parse_profile(fitted, "again").measured.gemm_shapes == profile.measured.gemm_shapes);
  nlohmann::json twice = fitted;
  auto& shapes = twice["measured"]["gemm_shapes"];
  REQUIRE(shapes.size() >= 2);
  shapes.push_back(shapes[0]);
  REQUIRE_THROWS_WITH(calib::parse_profile(twice, "p.json"),
                      Catch::Contains("p.json: measured.gemm_shapes[" + std::to_string(shapes.size() - 1) + "]") &&
                          Catch::Contains("repeats"));
  nlohmann::json negative = fitted;
  negative["measured"]["gemm_shapes"][1]["seconds"] = -1;
  REQUIRE_THROWS_WITH(calib::parse_profile(negative, "p.json"), Catch::Contains("measured.gemm_shapes[1].seconds"));
}

TEST_CASE("fused attention is counted as FlashAttention counts it, and a measured efficiency prices its ops",
          "[calib][attention]") {
  // By hand: Q K^T and P V over 2 x 4 heads of 1024 x 1024 scores, 128 wide.
  const double every_score = 4.0 * 2 * 4 * 1024 * 1024 * 128;
  REQUIRE(workloads::flash_attention_flops(2, 4, 1024, 128, false, false) == every_score);
  REQUIRE(workloads::flash_attention_flops(2, 4, 1024, 128, true, false) == every_score / 2);
  REQUIRE(workloads::flash_attention_flops(2, 4, 1024, 128, true, true) == 2.5 * every_score / 2);

  // The probe's points: GEMMs, and the attention forward without a mask at
  // 45-65 % of the peak.
  const test::World datasheet("dgx-a100-8node");
  const calib::Profile& ds = datasheet.profile();
  const double peak = ds.compute.find("bf16")->peak_flops_per_second;
  calib::Measurements m = gemms_at(0.7, peak, 1024, 16384);
  const std::vector<double> efficiencies{0.65, 0.45, 0.6, 0.5, 0.55};
  for (std::size_t i = 0; i < efficiencies.size(); ++i) {
    const int sequence = 512 << i;
    calib::AttentionMeasurement a;
    a.dtype = "bf16";
    a.batch = 16384 / sequence;
    a.heads = 32;
    a.sequence = sequence;
    a.head_dim = 128;
    a.flops = workloads::flash_attention_flops(a.batch, 32, sequence, 128, false, false);
    a.seconds = a.flops / (efficiencies[i] * peak);
    m.attention.push_back(a);
  }
  calib::FitOptions options;
  options.base = base_profile(ds.name);
  const nlohmann::json fitted = calib::fit_profile(m, options, "raw.json").profile;
  const calib::Profile measured = calib::parse_profile(fitted, "fitted");
  REQUIRE(measured.compute.attention_efficiency == Approx(0.55));
  REQUIRE(ds.compute.attention_efficiency != Approx(0.55));
  const std::string source = fitted["compute"]["attention_source"];
  CHECK(source.find("measured on") != std::string::npos);
  CHECK(source.find("without a causal mask") != std::string::npos);

  // LLaMA-7B's causal attention over 1024 tokens: its ops carry
  // FlashAttention's FLOPs and take them at the measured efficiency.
  const workloads::Program program = two_layer_step("zero3", 1024);
  int forwards = 0, backwards = 0;
  for (const auto& op : program.program_of(0).ops) {
    if (op.kind != workloads::OpKind::compute || op.kernel != workloads::KernelClass::attention) continue;
    const bool backward = op.name.find("backward") != std::string::npos;
    (backward ? backwards : forwards) += 1;
    CHECK(op.flops == 4.0 * 1024 * 1024 * 4096 / 2 * (backward ? 2.5 : 1));
    const double expected = std::max(op.flops / (0.55 * peak), op.hbm_bytes / measured.compute.achievable_hbm_bytes_per_second()) +
                            measured.compute.kernel_launch_seconds;
    CHECK(sim::kernel_seconds(op, measured) == Approx(expected).epsilon(1e-12));
  }
  CHECK(forwards == 2);  // one per layer
  CHECK(backwards == 2);
}

TEST_CASE("the CPU probe times back-to-back batches of at least the minimum time and keeps their mean", "[calib]") {
  // A world of one (no MPI here): the barrier and the maximum are the rank's own.
  calib::ProbeOptions options;
  options.warmup = 1;
  options.repeats = 3;
  options.min_timed_seconds = 0.05;
  int calls = 0;
  const double seconds = calib::time_together(options, [&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  // One call lasts at least 5 ms, so a batch holds at most 10 calls, and at
  // least 2 unless the sizing call took over 25 ms.
  const int batch = (calls - options.warmup - 1) / options.repeats;
  REQUIRE((calls - options.warmup - 1) % options.repeats == 0);
  REQUIRE(batch >= 2);
  REQUIRE(batch <= 10);
  REQUIRE(seconds >= 0.005);
  REQUIRE(seconds < 0.005 * batch);  // the mean of a batch, not its total

  options.min_timed_seconds = 0;  // one call per timing
  calls = 0;
  calib::time_together(options, [&] { ++calls; });
  REQUIRE(calls == options.warmup + 1 + options.repeats);
}

TEST_CASE("the committed H200 profile holds what its raw points measured", "[calib]") {
  // Recomputed here from the probe's raw points (calib/profiles/measured/),
  // without the fit's code: the profile a user runs with must be the
  // measurement, not an edit of it.
  const std::string dir = std::string(SHARDSIM_SOURCE_DIR) + "/calib/profiles/measured/";
  const calib::Profile profile = calib::load_profile(dir + "h200-1gpu.json");
  const calib::Measurements raw = calib::load_measurements(dir + "h200-1gpu-raw.json");
  const calib::Profile datasheet = calib::load_profile("h200");

  // HBM: the largest device copy's traffic rate, over the datasheet's 4.8 TB/s.
  const calib::CopyMeasurement* largest = nullptr;
  for (const auto& copy : raw.copies) {
    if (copy.kind == "device_copy" && (largest == nullptr || copy.bytes > largest->bytes)) largest = &copy;
  }
  REQUIRE(largest != nullptr);
  CHECK(profile.compute.hbm_bytes_per_second == datasheet.compute.hbm_bytes_per_second);
  CHECK(profile.compute.achievable_hbm_bytes_per_second() ==
        Approx(largest->traffic_bytes() / largest->seconds).epsilon(1e-9));

  // Kernel launch: the median of the samples.
  std::vector<double> launches = raw.kernel_launch_seconds;
  REQUIRE(launches.size() % 2 == 0);
  std::sort(launches.begin(), launches.end());
  const std::size_t half = launches.size() / 2;
  CHECK(profile.compute.kernel_launch_seconds == Approx(0.5 * (launches[half - 1] + launches[half])).epsilon(1e-9));

  // bf16 keeps the datasheet's nominal peak (MFU keeps its meaning); the
  // largest GEMM, 16384^3, is alone in its octave, so the table holds its
  // own efficiency there, and no octave's median beats the best GEMM.
  const calib::DtypeCompute& bf16 = *profile.compute.find("bf16");
  CHECK(bf16.peak_flops_per_second == datasheet.compute.find("bf16")->peak_flops_per_second);
  double best = 0;
  const calib::GemmMeasurement* cube = nullptr;
  for (const auto& gemm : raw.gemm) {
    if (gemm.dtype != "bf16") continue;
    best = std::max(best, gemm.flops() / gemm.seconds / bf16.peak_flops_per_second);
    if (gemm.m == 16384 && gemm.n == 16384 && gemm.k == 16384) cube = &gemm;
  }
  REQUIRE(cube != nullptr);
  CHECK(bf16.gemm_efficiency_at(cube->flops()) ==
        Approx(cube->flops() / cube->seconds / bf16.peak_flops_per_second).epsilon(1e-6));
  for (const auto& point : bf16.gemm_efficiency) CHECK(point.efficiency <= best);

  // Every measured shape keeps its time per GEMM; a shape on both of the
  // probe's lists (4096^3 is a square and a layer's) was timed twice: the
  // mean of the two, which is their median.
  std::map<std::tuple<std::string, long long, long long, long long>, std::vector<double>> timed;
  for (const auto& gemm : raw.gemm) {
    timed[{gemm.dtype, gemm.m, gemm.n, gemm.k}].push_back(gemm.seconds / static_cast<double>(gemm.batch));
  }
  for (const auto& [shape, seconds] : timed) {
    const auto& [dtype, m, n, k] = shape;
    INFO(dtype << " " << m << " x " << n << " x " << k);
    REQUIRE(seconds.size() <= 2);
    const double* kept = profile.measured.gemm_seconds({dtype, m, n, k});
    REQUIRE(kept != nullptr);
    CHECK(*kept == Approx((seconds.front() + seconds.back()) / 2).epsilon(1e-9));
  }
  CHECK(profile.measured.gemm_shapes.size() == timed.size());
}
