// The kernel time factor fitted to end-to-end runs (calib/run_fit.h), and
// what the factor does to a kernel's time (sim/step/kernel_time.h).
#include "calib/profile.h"
#include "calib/run_fit.h"
#include "sim/step/kernel_time.h"
#include "topology/base/json_input.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>

using namespace shardsim;

namespace {

calib::RunResponse run(const std::string& name, const std::string& family, double fixed, double scaled, double measured) {
  calib::RunResponse r;
  r.name = name;
  r.family = family;
  r.fixed_seconds = fixed;
  r.scaled_seconds = scaled;
  r.measured_seconds = measured;
  return r;
}

}  // namespace

TEST_CASE("a run's line through two simulations", "[calib][run_fit]") {
  // 10 s at factor 1 and 12 s at 1.25: 2 s fixed, 8 s that scale.
  const calib::RunResponse r = calib::linear_response("a", "f", 11, 1.0, 10.0, 1.25, 12.0);
  CHECK(r.fixed_seconds == Approx(2.0));
  CHECK(r.scaled_seconds == Approx(8.0));
  CHECK(r.predicted_seconds(1.125) == Approx(11.0));
  CHECK_THROWS_AS(calib::linear_response("a", "f", 11, 1.0, 10.0, 1.0, 12.0), std::invalid_argument);
}

TEST_CASE("the fit recovers a factor every run agrees on and the left-out errors are then zero", "[calib][run_fit]") {
  std::vector<calib::RunResponse> runs;
  const double truth = 1.137;
  for (int i = 0; i < 7; ++i) {
    const double fixed = 0.3 * i;
    const double scaled = 1.0 + i;
    runs.push_back(run("r" + std::to_string(i), i % 2 ? "odd" : "even", fixed, scaled, fixed + scaled * truth));
  }
  const calib::RunFitResult fit = calib::fit_runs(runs);
  CHECK(fit.factor == Approx(truth).epsilon(1e-6));
  REQUIRE(fit.leave_one_out_errors.size() == runs.size());
  REQUIRE(fit.leave_one_family_out_errors.size() == runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    CHECK(fit.in_sample_errors[i] == Approx(0).margin(1e-6));
    CHECK(fit.leave_one_out_errors[i] == Approx(0).margin(1e-6));
    CHECK(fit.leave_one_family_out_errors[i] == Approx(0).margin(1e-6));
  }
}

TEST_CASE("two compute-bound runs: the geometric mean and each predicted by the other", "[calib][run_fit]") {
  // Each run all kernels: its own best factor is measured / simulated, 1.1
  // and 1.2. Least squares of logs: ln f = (ln 1.1 + ln 1.2) / 2.
  const std::vector<calib::RunResponse> runs = {run("a", "paper A", 0, 10, 11), run("b", "paper B", 0, 20, 24)};
  const calib::RunFitResult fit = calib::fit_runs(runs);
  CHECK(fit.factor == Approx(std::sqrt(1.1 * 1.2)).epsilon(1e-6));
  CHECK(fit.in_sample_errors[0] == Approx(std::sqrt(1.1 * 1.2) / 1.1 - 1).epsilon(1e-6));
  // Left out, a is predicted at b's 1.2 and b at a's 1.1.
  CHECK(fit.leave_one_out_errors[0] == Approx(1.2 / 1.1 - 1).epsilon(1e-6));
  CHECK(fit.leave_one_out_errors[1] == Approx(1.1 / 1.2 - 1).epsilon(1e-6));
  CHECK(fit.leave_one_family_out_errors == fit.leave_one_out_errors);
  CHECK(calib::median_absolute({-0.3, 0.1, 0.2}) == Approx(0.2));
  CHECK(calib::median_absolute({-0.3, 0.1}) == Approx(0.2));
}

TEST_CASE("a fit that wants a factor past plausibility is refused", "[calib][run_fit]") {
  // Measured three times the simulated kernel time: no in-step effect is
  // that large; the curves are wrong.
  CHECK_THROWS_AS(calib::fit_kernel_time_factor({run("a", "f", 0, 1, 3)}), std::invalid_argument);
  CHECK_THROWS_AS(calib::fit_kernel_time_factor({}), std::invalid_argument);
  // One family: no leave-one-family-out errors; one run: no leave-one-out.
  const calib::RunFitResult one = calib::fit_runs({run("a", "f", 1, 1, 2.2)});
  CHECK(one.factor == Approx(1.2).epsilon(1e-6));
  CHECK(one.leave_one_out_errors.empty());
  CHECK(one.leave_one_family_out_errors.empty());
}

TEST_CASE("a profile's kernel time factor scales each kernel's time and not its launch", "[calib][run_fit]") {
  calib::Profile profile = calib::load_profile("a100");
  profile.compute.kernel_launch_seconds = 4e-6;
  workloads::Op gemm;
  gemm.kernel = workloads::KernelClass::gemm;
  gemm.dtype = workloads::Dtype::bf16;
  gemm.gemm = {4096, 4096, 4096};
  gemm.flops = 2.0 * 4096 * 4096 * 4096;
  workloads::Op copy;
  copy.kernel = workloads::KernelClass::elementwise;
  copy.hbm_bytes = 1e9;
  for (const workloads::Op& op : {gemm, copy}) {
    profile.compute.kernel_time_factor = 1;
    const double plain = sim::kernel_seconds(op, profile) - 4e-6;
    profile.compute.kernel_time_factor = 1.15;
    CHECK(sim::kernel_seconds(op, profile) - 4e-6 == Approx(1.15 * plain).epsilon(1e-12));
  }
}

TEST_CASE("a profile's kernel time factor needs its source and a plausible value", "[calib][run_fit]") {
  nlohmann::json document = load_json_file(std::string(SHARDSIM_SOURCE_DIR) + "/calib/profiles/a100.json");
  document["compute"]["kernel_time_factor"] = 1.1;
  CHECK_THROWS_WITH(calib::parse_profile(document, "p.json"),
                    Catch::Contains("p.json") && Catch::Contains("kernel_time_factor_source"));
  document["compute"]["kernel_time_factor_source"] = "a test";
  CHECK(calib::parse_profile(document, "p.json").compute.kernel_time_factor == 1.1);
  document["compute"]["kernel_time_factor"] = 3.0;
  CHECK_THROWS_WITH(calib::parse_profile(document, "p.json"), Catch::Contains("between 0.5 and 2"));
  document["compute"]["kernel_time_factor"] = 1.1;
  document["fitted_to"] = "runs.json";
  CHECK_THROWS_WITH(calib::parse_profile(document, "p.json"), Catch::Contains("fitted_to"));
}

TEST_CASE("the bundled fitted profiles are their base profiles with the fitted factor and nothing else",
          "[calib][run_fit]") {
  // calib/profiles/fitted/ is written by `shardsim calib fit-runs
  // results/fit_runs/runs.json -o calib/profiles/fitted`: a base profile
  // regenerated without a refit would leave these stale.
  const std::string dir = std::string(SHARDSIM_SOURCE_DIR) + "/calib/profiles/";
  for (const std::string base : {"a100", "a800", "h100"}) {
    INFO(base);
    nlohmann::json fitted = load_json_file(dir + "fitted/" + base + "-fitted.json");
    nlohmann::json original = load_json_file(dir + base + ".json");
    const double factor = fitted["compute"]["kernel_time_factor"].get<double>();
    CHECK(fitted["fitted_to"]["kernel_time_factor"].get<double>() == factor);
    CHECK(fitted["fitted_to"]["runs"].size() > 0);
    CHECK(calib::load_profile("fitted/" + base + "-fitted").compute.kernel_time_factor == factor);
    fitted.erase("fitted_to");
    fitted["compute"].erase("kernel_time_factor");
    fitted["compute"].erase("kernel_time_factor_source");
    fitted.erase("name");
    original.erase("name");
    CHECK(fitted == original);
  }
}
