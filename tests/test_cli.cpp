// End to end: the shardsim binary as a user runs it. Every run is wrapped in
// `timeout`, so a hang fails the test instead of stalling CI.
#include "fixtures.h"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#ifndef SHARDSIM_BINARY
#error "SHARDSIM_BINARY must point at the shardsim executable"
#endif

namespace fs = std::filesystem;

namespace {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

class Scratch {
 public:
  Scratch() : dir_(fs::temp_directory_path() / ("shardsim-cli-" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }
  fs::path path(const std::string& name) const { return dir_ / name; }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name).string();
  }

 private:
  fs::path dir_;
};

std::string read(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Result run(const Scratch& scratch, const std::string& arguments) {
  const auto out = scratch.path("stdout"), err = scratch.path("stderr");
  const std::string command = "timeout 120 " + std::string(SHARDSIM_BINARY) + " " + arguments + " >" + out.string() +
                              " 2>" + err.string();
  const int status = std::system(command.c_str());
  Result result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read(out);
  result.err = read(err);
  return result;
}

std::string cluster_file(const Scratch& scratch, const nlohmann::json& document) {
  return scratch.write("cluster.json", document.dump());
}

struct Refusal {
  std::string arguments;  // a shardsim command line
  std::string message;    // what stderr must say
};

// Every command line must fail with exit code 2 and say what is wrong.
void require_refused(const Scratch& scratch, const std::vector<Refusal>& refusals) {
  for (const auto& refusal : refusals) {
    INFO(refusal.arguments);
    const Result r = run(scratch, refusal.arguments);
    REQUIRE(r.exit_code == 2);
    REQUIRE_THAT(r.err, Catch::Contains(refusal.message));
  }
}

}  // namespace

TEST_CASE("help shows an example for the program and every command", "[cli]") {
  const Scratch scratch;
  for (const std::string command : {"", "collective", "memory", "bench", "presets"}) {
    const Result r = run(scratch, command + " --help");
    INFO(command);
    REQUIRE(r.exit_code == 0);
    REQUIRE_THAT(r.out, Catch::Contains("Example"));
  }
}

TEST_CASE("the main job runs on the bundled defaults", "[cli]") {
  const Scratch scratch;
  const Result r = run(scratch, "collective --min-bytes 8 --max-bytes 1M");
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("dgx-a100-1024 (1024 GPUs)"));
  REQUIRE_THAT(r.out, Catch::Contains("#       size         count      type   redop    root     time   algbw   busbw"));
  REQUIRE_THAT(r.out, Catch::Contains("     1048576        262144     float     sum      -1"));
  REQUIRE_THAT(r.out, Catch::Contains("# Avg bus bandwidth"));
}

TEST_CASE("any set of GPUs can form the group", "[cli]") {
  const Scratch scratch;
  const Result r = run(scratch, "collective --cluster dgx-a100-8node --ranks 0,3,8-11,63 -b 1M -e 1M");
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("# group 0,3,8-11,63: 7 ranks on 3 nodes"));
}

TEST_CASE("two runs print byte-identical output and CSV", "[cli][determinism]") {
  const Scratch scratch;
  const std::string args = "collective --cluster dgx-a100-8node --op all -b 8 -e 64M -f 8 --csv ";
  const Result first = run(scratch, args + scratch.path("a.csv").string());
  const Result second = run(scratch, args + scratch.path("b.csv").string());
  REQUIRE(first.exit_code == 0);
  REQUIRE(first.out == second.out);
  REQUIRE(read(scratch.path("a.csv")) == read(scratch.path("b.csv")));
  REQUIRE_THAT(read(scratch.path("a.csv")), Catch::StartsWith("op,size_bytes,count,type"));
}

TEST_CASE("bad cluster files exit with 2 and name the file and the field", "[cli][errors]") {
  const Scratch scratch;
  struct BadCase {
    std::string what;
    nlohmann::json document;
    std::string message;
  };
  std::vector<BadCase> cases;
  auto unknown = shardsim::test::cluster_json();
  unknown["node"]["nvlink_bandwith"] = 1;
  cases.push_back({"unknown key", unknown, "node.nvlink_bandwith: unknown field"});
  auto missing = shardsim::test::cluster_json();
  missing["fabric"].erase("spines");
  cases.push_back({"missing key", missing, "fabric.spines: missing required field"});
  auto zero = shardsim::test::cluster_json();
  zero["node"]["nic_bits_per_second"] = 0;
  cases.push_back({"zero bandwidth", zero, "node.nic_bits_per_second: must be a positive number, got 0"});
  auto negative = shardsim::test::cluster_json();
  negative["node"]["pcie_bidirectional_bytes_per_second"] = -64e9;
  cases.push_back({"negative bandwidth", negative, "node.pcie_bidirectional_bytes_per_second: must be a positive number"});
  for (const auto& c : cases) {
    INFO(c.what);
    const std::string file = cluster_file(scratch, c.document);
    const Result r = run(scratch, "collective --cluster " + file);
    REQUIRE(r.exit_code == 2);
    REQUIRE_THAT(r.err, Catch::Contains(file + ": " + c.message));
    REQUIRE(r.out.empty());
  }
  const std::string malformed = scratch.write("malformed.json", "{\"name\": \"x\", \"nodes\": [1, 2");
  const Result r = run(scratch, "collective --cluster " + malformed);
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains(malformed + ": malformed JSON"));
}

TEST_CASE("bad command lines exit with 2 and say what is wrong", "[cli][errors]") {
  const Scratch scratch;
  require_refused(scratch, {
      {"collective --gpus 2048", "--gpus 2048: a group 'all' on cluster dgx-a100-1024 holds 1 to 1024 GPUs"},
      {"collective --group inter --gpus 129", "holds 1 to 128 GPUs"},
      {"collective --op all_scatter", "all_scatter"},
      {"collective --min-bytes -5", "--min-bytes: '-5' is not a size in bytes"},
      {"collective --min-bytes=-5", "--min-bytes: '-5' is not a size in bytes"},
      {"collective --max-bytes 8X", "--max-bytes: '8X' is not a size in bytes"},
      {"collective -b 1G -e 8", "-b/--min-bytes 1G is above -e/--max-bytes 8"},
      {"collective --cluster no-such-preset", "no-such-preset: no such cluster file or preset"},
      {"collective --profile no-such-profile", "no-such-profile: no such profile file or preset"},
      {"collective --op all_gather --algo tree", "tree only implements all_reduce"},
      {"collective --op broadcast --root 4096", "root 4096 is not a rank of the group"},
      {"collective --ranks 0,2000", "--ranks: GPU 2000 is outside the cluster (1024 GPUs)"},
      {"collective --ranks 0,1,1", "--ranks: GPU 1 appears twice in the group"},
      {"collective --ranks 3-a", "--ranks: '3-a' is not a list of indices and ranges"},
      {"frobnicate", "frobnicate"},
  });
}

TEST_CASE("a profile missing a field exits with 2 naming the field", "[cli][errors]") {
  const Scratch scratch;
  auto profile = shardsim::test::uniform_profile_json(1e-6);
  profile["collectives"]["all_reduce"].erase("tree");
  const std::string file = scratch.write("profile.json", profile.dump());
  const Result r = run(scratch, "collective --cluster dgx-a100-2node --profile " + file + " --algo tree");
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains(file + ": collectives.all_reduce.tree: missing"));
  // With no algorithm pinned: a training step needs a collective the profile has no algorithm for.
  profile["collectives"].erase("reduce_scatter");
  const std::string none = scratch.write("no-reduce-scatter.json", profile.dump());
  const Result step = run(scratch, "run --cluster dgx-a100-2node --model llama-7b --plan zero3 --profile " + none);
  REQUIRE(step.exit_code == 2);
  REQUIRE_THAT(step.err, Catch::Contains(none + ": collectives.reduce_scatter: missing: the profile lists none of the "
                                                "algorithms that run this collective on a group of 16 ranks (ring)"));
  REQUIRE(step.out.empty());
}

TEST_CASE("scenarios write a row per run, refused combinations in the same columns, and refuse typos", "[cli]") {
  const Scratch scratch;
  const std::string training = std::string(SHARDSIM_SOURCE_DIR) + "/tests/data/training/seq4096-128-sequences.json";
  const auto scenarios = [&](const std::string& plans) {
    return nlohmann::json{{"name", "t"},
                          {"cluster", "dgx-a100-8node"},
                          {"sources", {"test"}},
                          {"runs",
                           {{{"model", "llama-7b"},
                             {"training", training},
                             {"plans", nlohmann::json::parse(plans)},
                             {"gpus", {8}},
                             {"overlap", {"plan", "none"}}}}}};
  };
  const std::string good = scratch.write("good.json", scenarios(R"(["zero3", "mics-16"])").dump());
  const Result r = run(scratch, "scenarios " + good + " --threads 1 --csv " + scratch.path("good.csv").string());
  REQUIRE(r.exit_code == 0);
  // The rows are simulated apart: on several threads the file is the same.
  const Result threaded = run(scratch, "scenarios " + good + " --threads 3 --csv " + scratch.path("threads.csv").string());
  REQUIRE(threaded.exit_code == 0);
  CHECK(read(scratch.path("threads.csv")) == read(scratch.path("good.csv")));
  std::vector<std::vector<std::string>> rows;
  std::istringstream csv(read(scratch.path("good.csv")));
  for (std::string line; std::getline(csv, line);) {
    std::vector<std::string> fields;
    std::istringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) fields.push_back(cell);
    if (!line.empty() && line.back() == ',') fields.emplace_back();
    rows.push_back(fields);
  }
  REQUIRE(rows.size() == 1 + 2 * 2);  // header, then plans x overlap levels
  const auto column = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(rows[0].begin(), rows[0].end(), name) - rows[0].begin());
  };
  for (std::size_t i = 1; i < rows.size(); ++i) {
    INFO(i);
    REQUIRE(rows[i].size() == rows[0].size());
    CHECK(rows[i][column("gpus")] == "8");
    CHECK(rows[i][column("overlap")] == (i % 2 == 1 ? "plan" : "none"));
    const bool refused = rows[i][column("plan")] == "mics-16";  // 16 GPUs a group, 8 in the job
    CHECK(rows[i][column("fits")] == (refused ? "" : "yes"));
    CHECK((rows[i][column("note")].find("does not divide the 8 data-parallel GPUs") != std::string::npos) == refused);
  }
  for (const auto& [plans, message] : std::vector<std::pair<std::string, std::string>>{
           {R"(["zer03"])", "runs[0].plans: zer03: no such plan file or preset"},
           {R"([])", "runs[0].plans: must name at least one plan"}}) {
    const std::string typo = scratch.write("typo.json", scenarios(plans).dump());
    const Result refused = run(scratch, "scenarios " + typo + " --csv " + scratch.path("typo.csv").string());
    INFO(plans);
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.err, Catch::Contains(typo + ": " + message));
    CHECK_FALSE(fs::exists(scratch.path("typo.csv")));
  }
  // More GPUs than the cluster holds: the file's entry, not a --gpus option the command never had.
  nlohmann::json too_many = scenarios(R"(["zero3"])");
  too_many["runs"][0]["gpus"] = {8, 128};
  const std::string big = scratch.write("big.json", too_many.dump());
  const Result refused = run(scratch, "scenarios " + big + " --csv " + scratch.path("big.csv").string());
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains(big + ": runs[0].gpus[1]: 128 GPUs, but cluster dgx-a100-8node has 64"));
  CHECK_FALSE(fs::exists(scratch.path("big.csv")));
}

TEST_CASE("a profile of another device than the cluster's is said, not taken silently", "[cli]") {
  const Scratch scratch;
  const std::string job = "run --model llama-7b --plan zero1 --gpus 8 --scale layers=2,micro_batches=1";
  const Result cpu = run(scratch, job + " --profile measured/cpu-2core");
  REQUIRE(cpu.exit_code == 0);
  REQUIRE_THAT(cpu.err, Catch::Contains("note: --profile measured/cpu-2core describes CPU") &&
                            Catch::Contains("cluster dgx-a100-1024's GPUs are A100-SXM4-80GB (its profile a100)"));
  // The same device's profiles (burst, fitted) say nothing.
  for (const std::string profile : {"a100-burst", "fitted/a100-fitted"}) {
    const Result same = run(scratch, job + " --profile " + profile);
    REQUIRE(same.exit_code == 0);
    REQUIRE_THAT(same.err, !Catch::Contains("note: --profile"));
  }
}

TEST_CASE("memory answers as a table or as one JSON object", "[cli][memory]") {
  const Scratch scratch;
  const Result table = run(scratch, "memory --cluster a800-1024 --model llama-13b --plan amsp-llama13b --gpus 64");
  REQUIRE(table.exit_code == 0);
  REQUIRE_THAT(table.out, Catch::Contains("# plan amsp-llama13b (amsp): f_P 4, f_G 4, f_OS 8"));
  REQUIRE_THAT(table.out, Catch::Contains("16 micro-batches per step"));
  const Result json = run(scratch, "memory --model llama-7b --plan zero1 --gpus 8 --json");
  REQUIRE(json.exit_code == 0);
  const auto answer = nlohmann::json::parse(json.out);
  // ZeRO-1 on 8 GPUs: (4 + 12/8) bytes per parameter of model states.
  const double psi = answer["parameters"].get<double>();
  const auto& bytes = answer["bytes"];
  REQUIRE(bytes["parameters"].get<double>() + bytes["gradients"].get<double>() + bytes["optimizer_states"].get<double>() ==
          Approx(5.5 * psi));
  REQUIRE(answer["fits"].get<bool>() == (answer["total_bytes"].get<double>() <= answer["gpu_memory_bytes"].get<double>()));
  REQUIRE(answer["gradient_accumulation_steps"] == 128);

  // DeepSpeed-Ulysses over 4: four times the micro-batches, a quarter of the
  // activations each; --scale's micro_batches still counts each rank's.
  const Result ulysses = run(scratch, "memory --model llama-7b --plan zero1 --gpus 8 --ulysses 4 --json");
  REQUIRE(ulysses.exit_code == 0);
  const auto split = nlohmann::json::parse(ulysses.out);
  REQUIRE(split["ulysses"] == 4);
  REQUIRE(split["gradient_accumulation_steps"] == 512);
  REQUIRE(split["bytes"]["activations"].get<double>() == Approx(bytes["activations"].get<double>() / 4));
  const Result scaled = run(scratch, "memory --model llama-7b --plan zero3 --gpus 8 --ulysses 4 --json "
                                     "--scale layers=2,hidden=512,seq=256,micro_batches=3");
  REQUIRE(scaled.exit_code == 0);
  REQUIRE(nlohmann::json::parse(scaled.out)["gradient_accumulation_steps"] == 3);

  // --mem-limit replaces the cluster's GPU memory; the headroom is what is left of it.
  const double total = answer["total_bytes"].get<double>();
  const double limit_bytes = std::floor(total / (1 << 20)) * (1 << 20);  // just under the total, in whole MiB
  const Result limited = run(scratch, "memory --model llama-7b --plan zero1 --gpus 8 --json --mem-limit " +
                                          std::to_string(static_cast<long long>(limit_bytes)) + "B");
  REQUIRE(limited.exit_code == 0);
  const auto tight = nlohmann::json::parse(limited.out);
  REQUIRE(tight["gpu_memory_bytes"].get<double>() == limit_bytes);
  REQUIRE_FALSE(tight["fits"].get<bool>());
  REQUIRE(tight["headroom_bytes"].get<double>() == Approx(limit_bytes - total));
  REQUIRE(answer["headroom_bytes"].get<double>() == Approx(answer["gpu_memory_bytes"].get<double>() - total));
  const Result run_limited = run(scratch, "run --model llama-7b --plan zero1 --gpus 8 --scale layers=2 --mem-limit 1GiB");
  REQUIRE(run_limited.exit_code == 1);
  REQUIRE_THAT(run_limited.out, Catch::Contains("OUT OF MEMORY") && Catch::Contains("the GPU holds 1.00 GiB"));
}

TEST_CASE("bad memory questions exit with 2 and say why", "[cli][errors][memory]") {
  const Scratch scratch;
  const std::string zero_layers = scratch.write("tiny.json", R"({"name": "tiny", "layers": 0, "hidden": 64,
      "heads": 4, "kv_heads": 4, "head_dim": 16, "ffn_hidden": 256, "vocab": 1000, "max_positions": 128,
      "mlp": "swiglu", "norm": "rmsnorm", "positions": "rotary", "linear_biases": false, "tied_embeddings": true,
      "sources": []})");
  require_refused(scratch, {
      {"memory --plan mics-8 --gpus 12", "factors.parameters: 8 does not divide the 12 data-parallel GPUs"},
      {"memory --plan zero1 --gpus 3", "global_batch: 1024 sequences is not a multiple of micro-batch 1 x 3"},
      {"memory --model " + zero_layers, zero_layers + ": layers: must be a positive integer, got 0"},
      {"memory --plan no-such-plan", "no-such-plan: no such plan file or preset"},
      {"memory --gpus 5000", "--gpus 5000: cluster dgx-a100-1024 has 1 to 1024 GPUs"},
      {"memory --mem-limit lots", "--mem-limit"},
  });
}

TEST_CASE("a run that fails leaves no output file behind", "[cli][errors]") {
  const Scratch scratch;
  const auto csv = scratch.path("out.csv");
  const Result bad = run(scratch, "collective --gpus 4096 --csv " + csv.string());
  REQUIRE(bad.exit_code == 2);
  REQUIRE_FALSE(fs::exists(csv));
  const Result unwritable = run(scratch, "collective -b 8 -e 8 --csv " + scratch.path("missing-dir/out.csv").string());
  REQUIRE(unwritable.exit_code == 2);
  REQUIRE_THAT(unwritable.err, Catch::Contains("missing-dir/out.csv: cannot write here"));
  for (const auto& entry : fs::directory_iterator(scratch.path(""))) {
    REQUIRE(entry.path().string().find(".tmp.") == std::string::npos);
  }
}

TEST_CASE("run reports a step as a table, as JSON, as a Chrome trace and as HDF5", "[cli][run]") {
  const Scratch scratch;
  const std::string args = "run --cluster dgx-a100-2node --model llama-7b --plan zero3 --gpus 16 ";
  const Result table = run(scratch, args);
  REQUIRE(table.exit_code == 0);
  for (const char* line : {"step time", "MFU", "tokens per GPU per second", "peak memory", "exposed all_gather",
                           "exposed reduce_scatter", "idle"}) {
    REQUIRE_THAT(table.out, Catch::Contains(line));
  }
  const std::string trace = scratch.path("trace.json").string(), h5 = scratch.path("step.h5").string();
  const Result json = run(scratch, args + "--json --record-ranks 0,9 --trace " + trace + " --h5 " + h5);
  REQUIRE(json.exit_code == 0);
  const auto summary = nlohmann::json::parse(json.out);
  REQUIRE(summary["fits"] == true);
  const double step = summary["step_seconds"].get<double>();
  const auto& time = summary["time"];
  REQUIRE(time["compute_seconds"].get<double>() + time["exposed_communication_seconds"].get<double>() +
              time["waiting_seconds"].get<double>() + time["idle_seconds"].get<double>() ==
          Approx(step).epsilon(1e-9));
  REQUIRE(summary["mfu"].get<double>() == Approx(summary["model_flops_per_step"].get<double>() / (step * 16 * 312e12)));

  const auto events = nlohmann::json::parse(read(trace))["traceEvents"];
  std::set<int> pids;
  int flows_started = 0, flows_finished = 0;
  for (const auto& event : events) {
    if (event["ph"] == "X") pids.insert(event["pid"].get<int>());
    flows_started += event["ph"] == "s";
    flows_finished += event["ph"] == "f";
  }
  REQUIRE(pids == std::set<int>{0, 9});
  REQUIRE(flows_started > 0);  // rank 0 and rank 9 share every ZeRO-3 collective
  REQUIRE(flows_started == flows_finished);
  REQUIRE(fs::file_size(h5) > 0);

  // Deterministic: the same command writes the same bytes.
  const std::string trace2 = scratch.path("trace2.json").string();
  const Result again = run(scratch, args + "--json --record-ranks 0,9 --trace " + trace2);
  REQUIRE(again.out == json.out);
  REQUIRE(read(trace2) == read(trace));
}

TEST_CASE("run writes Chakra traces of every rank for ASTRA-sim, or none", "[cli][run][chakra]") {
  const Scratch scratch;
  const std::string args = "run --cluster dgx-a100-2node --model llama-7b --plan zero3 --gpus 16 --chakra ";
  const std::string prefix = scratch.path("llama7b").string();
  REQUIRE(run(scratch, args + prefix).exit_code == 0);
  for (int rank = 0; rank < 16; ++rank) {
    INFO("rank " << rank);
    const std::string trace = read(prefix + "." + std::to_string(rank) + ".et");
    // The first record: 7 bytes of GlobalMetadata, its version "0.0.4".
    REQUIRE(trace.substr(0, 8) == std::string("\x07\x0a\x05" "0.0.4"));
    REQUIRE(trace.size() > 1000);
  }
  REQUIRE_FALSE(fs::exists(prefix + ".16.et"));
  // ZeRO-3 on 16 GPUs: one group of every rank.
  const auto groups = nlohmann::json::parse(read(prefix + ".json"));
  REQUIRE(groups == nlohmann::json{{"1", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}});
  // Deterministic: the same command writes the same bytes.
  const std::string again = scratch.path("again").string();
  REQUIRE(run(scratch, args + again).exit_code == 0);
  REQUIRE(read(again + ".9.et") == read(prefix + ".9.et"));

  const Result unwritable = run(scratch, args + scratch.path("missing-dir/x").string());
  REQUIRE(unwritable.exit_code == 2);
  REQUIRE_THAT(unwritable.err, Catch::Contains("missing-dir/x.0.et: cannot write here"));
  for (const auto& entry : fs::directory_iterator(scratch.path(""))) {
    REQUIRE(entry.path().string().find(".tmp.") == std::string::npos);
  }
}

TEST_CASE("run reports a plan that does not fit with exit code 1 and the breakdown", "[cli][run]") {
  const Scratch scratch;
  const Result r = run(scratch, "run --cluster dgx-a100-2node --model llama-13b --plan zero0 --gpus 16");
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("OUT OF MEMORY on rank"));
  REQUIRE_THAT(r.out, Catch::Contains("optimizer_states"));
}

TEST_CASE("bad run inputs exit with 2 and say why", "[cli][errors][run]") {
  const Scratch scratch;
  const std::string zero_layers = scratch.write(
      "zero-layers.json",
      R"({"name": "z", "layers": 0, "hidden": 64, "heads": 4, "kv_heads": 4, "head_dim": 16, "ffn_hidden": 128,
          "vocab": 100, "max_positions": 128, "mlp": "swiglu", "norm": "rmsnorm", "positions": "rotary",
          "linear_biases": false, "tied_embeddings": false, "sources": []})");
  const std::string odd_batch = scratch.write(
      "odd-batch.json",
      R"({"sequence_length": 1024, "micro_batch_size": 2, "global_batch": {"sequences": 100}, "precision": "bf16",
          "fp8_gemms": false, "recompute": "none", "flash_attention": true})");
  const std::string bad_deepspeed =
      scratch.write("ds.json", R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": "three"}})");
  // NICs of a thousandth of a bit per second: every step runs past the clock.
  auto slow = shardsim::test::cluster_json();
  slow["node"]["nic_bits_per_second"] = 1e-3;
  const std::string slow_cluster = scratch.write("slow.json", slow.dump());
  const std::string fp8_training = scratch.write(
      "fp8.json",
      R"({"sequence_length": 4096, "micro_batch_size": 1, "global_batch": {"tokens": 4194304}, "precision": "bf16",
          "fp8_gemms": true, "recompute": "none", "flash_attention": true})");
  require_refused(scratch, {
      {"run --cluster dgx-a100-2node --plan mics-8 --gpus 12", "8 does not divide the 12 data-parallel GPUs"},
      {"run --cluster dgx-a100-2node --model " + zero_layers, zero_layers + ": layers: must be a positive integer, got 0"},
      {"run --cluster dgx-a100-2node --gpus 16 --training " + odd_batch, odd_batch + ": global_batch"},
      {"run --cluster dgx-a100-2node --gpus 16 --deepspeed " + bad_deepspeed, bad_deepspeed + ": zero_optimization.stage"},
      {"run --cluster dgx-a100-2node --gpus 16 --record-ranks 3,40", "--record-ranks: rank 40 is outside the job"},
      {"run --cluster dgx-a100-2node --overlap some", "--overlap"},
      // GPT's learned position embeddings have 2048 rows; the default training config runs 4096 tokens.
      {"run --cluster dgx-a100-2node --model gpt-48l-5120h --plan zero3",
       "seq4096-mbs1-4m-tokens: sequence_length: 4096 tokens exceed model gpt-48l-5120h's max_positions 2048"},
      {"search --cluster dgx-a100-2node --model gpt-48l-5120h", "max_positions 2048"},
      // Each once an internal error or a run without end (issue 61).
      {"run --cluster dgx-a100-2node --gpus 16 --scale hidden=2147483647", "--scale: hidden=2147483647 is implausibly large"},
      {"run --cluster dgx-a100-2node --gpus 8 --scale micro_batches=2147483647", "layer passes a step, above the 1e+06"},
      {"run --cluster " + slow_cluster + " --gpus 16 --scale layers=1,micro_batches=1",
       "a transfer would end past the simulated clock's range"},
      // fp8 GEMMs on an A100: the training file's field, not the profile, is what to change.
      {"run --cluster dgx-a100-2node --gpus 16 --training " + fp8_training,
       fp8_training + ": fp8_gemms: asks for fp8 GEMMs, which the profile a100 (A100-SXM4-80GB) does not have"},
  });
  // The same model at its own context length runs (LLaMA's rotary positions have no such limit).
  REQUIRE(run(scratch, "memory --cluster dgx-a100-2node --model gpt-48l-5120h --plan zero3 --training "
                       "seq2048-mbs1-4m-tokens").exit_code == 0);
}

TEST_CASE("run and memory read a Megatron-LM launch, a bad one exits 2 naming the flag", "[cli][megatron-args]") {
  const Scratch scratch;
  const std::string launch = std::string(SHARDSIM_SOURCE_DIR) + "/workloads/megatron/llama-7b-16gpu.sh";
  // A bundled launch is named like any preset.
  const Result r = run(scratch, "run --cluster dgx-a100-2node --model llama-7b --megatron llama-7b-16gpu");
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("plan megatron-t4-p2 (megatron): tensor 4 + sequence parallel, pipeline 2"));
  // 64 sequences over 2 data-parallel ranks of micro-batch 1; recompute from --recompute-activations.
  REQUIRE_THAT(r.out, Catch::Contains("32 micro-batches per step"));
  REQUIRE_THAT(r.out, Catch::Contains("recompute selective"));
  // The one note: selective recompute's default modules include the fused attention, as Megatron-Core's do.
  REQUIRE_THAT(r.err, Catch::StartsWith("note: " + launch + ": selective recompute reruns the fused attention"));
  REQUIRE(std::count(r.err.begin(), r.err.end(), '\n') == 1);

  const std::string fp32 = scratch.write("fp32.sh", "--tensor-model-parallel-size 8 --micro-batch-size 1\n");
  const Result noted = run(scratch, "memory --cluster dgx-a100-2node --megatron " + fp32);
  REQUIRE(noted.exit_code == 0);
  REQUIRE_THAT(noted.err, Catch::Contains("note: " + fp32 + ": neither --bf16 nor --fp16"));

  const std::string variable = scratch.write("variable.sh", "torchrun pretrain_gpt.py \\\n  --pipeline-model-parallel-size $PP\n");
  require_refused(scratch, {
      {"run --cluster dgx-a100-2node --megatron " + variable,
       variable + ": --pipeline-model-parallel-size (line 2): is the shell expression \"$PP\""},
      {"run --cluster dgx-a100-2node --model gpt3-175b --megatron " + launch, launch + ": --num-layers (line 8): 32"},
      {"run --cluster dgx-a100-2node --plan zero3 --megatron " + launch, "--plan excludes --megatron"},
      {"run --cluster dgx-a100-2node --megatron missing.sh",
       "missing.sh: no such Megatron-LM launch file or preset (presets: deepseek-v3-1024gpu, gpt3-175b-1024gpu, llama-7b-16gpu, mixtral-8x7b-256gpu)"},
  });
}

TEST_CASE("calib: nccl-tests logs -> raw -> profile -> report, bad input exits 2", "[cli][calib]") {
  Scratch scratch;
  const std::string data = std::string(SHARDSIM_SOURCE_DIR) + "/tests/data/nccl_tests/";
  const std::string raw = scratch.path("raw.json").string(), profile = scratch.path("profile.json").string();
  Result r = run(scratch, "calib import-nccl-tests " + data + "all_reduce_8gpu.log " + data +
                              "all_gather_16gpu_2node.json -o " + raw);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("all_gather") && Catch::Contains("ring"));
  r = run(scratch, "calib fit " + raw + " --base h100 --cluster h100-8node -o " + profile);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("all_reduce auto 8 ranks / 1 node") && Catch::Contains("R^2"));
  r = run(scratch, "calib report " + profile);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("all_gather ring 16r/2n"));
  // The simulated sweep in table mode is the log again.
  r = run(scratch, "collective --cluster h100-8node --profile " + profile +
                       " --network table --op all_reduce --gpus 8 -b 1M -e 1M");
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("35.31") && Catch::Contains("measured"));

  nlohmann::json broken = nlohmann::json::parse(read(profile));
  broken["compute"].erase("hbm_efficiency");
  const std::string broken_profile = scratch.write("broken-profile.json", broken.dump());
  nlohmann::json broken_raw = nlohmann::json::parse(read(raw));
  broken_raw["collectives"][0]["seconds"] = -1;
  const std::string bad_raw = scratch.write("bad-raw.json", broken_raw.dump());
  const std::string refused_output = scratch.path("refused.json").string();
  require_refused(scratch, {
      {"calib import-nccl-tests " + data + "all_reduce_truncated.log -o " + refused_output, "truncated"},
      {"calib import-nccl-tests " + data + "reduce_scatter_wrong.log -o " + refused_output, "#wrong != 0"},
      {"calib fit " + bad_raw + " -o " + refused_output, "collectives[0].seconds: must be a positive number"},
      {"calib report " + broken_profile, "compute.hbm_efficiency"},
  });
  CHECK_FALSE(fs::exists(refused_output));
}

TEST_CASE("a log with bytes that are not UTF-8 imports with each such byte as U+FFFD", "[cli][calib][errors]") {
  // One 0xFF in a device name once ended the import as an internal error
  // (nlohmann's invalid UTF-8 byte) when the raw file was written.
  const Scratch scratch;
  std::string log = read(std::string(SHARDSIM_SOURCE_DIR) + "/tests/data/nccl_tests/all_reduce_8gpu.log");
  const auto at = log.find("NVIDIA");
  REQUIRE(at != std::string::npos);
  log.insert(at + 2, "\xff");
  const std::string file = scratch.write("ff.log", log);
  const Result result = run(scratch, "calib import-nccl-tests " + file + " -o " + scratch.path("raw.json").string());
  REQUIRE(result.exit_code == 0);
  const nlohmann::json raw = nlohmann::json::parse(read(scratch.path("raw.json")));
  REQUIRE(raw["machine"]["device"].get<std::string>().find("NV\xef\xbf\xbdIDIA") != std::string::npos);
  REQUIRE(raw["collectives"].size() == 56);
}
