#include "sim/cli/commands.h"

#include "sim/search/parallel_for.h"

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardsim::cli {

namespace {

struct BenchCase {
  std::string name;
  std::vector<std::string> arguments;  // after the program name
  std::string target;
};

struct Measurement {
  double wall_seconds = std::numeric_limits<double>::infinity();
  double peak_rss_mib = 0;
};

std::string self_executable() {
  std::vector<char> buffer(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buffer.data(), buffer.size() - 1);
  if (n <= 0) throw std::runtime_error("cannot find the shardsim executable (/proc/self/exe)");
  return std::string(buffer.data(), static_cast<std::size_t>(n));
}

// Runs shardsim in a child process (stdout discarded), so the time and peak
// memory are those of the whole process, start-up and preset loading included.
Measurement run_child(const std::string& executable, const std::vector<std::string>& arguments) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(executable.c_str()));
  for (const auto& a : arguments) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
    ::execv(executable.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  if (::wait4(child, &status, 0, &usage) != child) throw std::runtime_error("wait4 failed");
  const auto end = std::chrono::steady_clock::now();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string command = executable;
    for (const auto& a : arguments) command += " " + a;
    throw std::runtime_error("benchmark case failed: " + command);
  }
  return {std::chrono::duration<double>(end - start).count(), static_cast<double>(usage.ru_maxrss) / 1024.0};
}

int run_bench(const std::string& cluster, int repeat) {
  const std::string executable = self_executable();
  // The searches run on every CPU here, as `shardsim search` does by default.
  const std::string threads = std::to_string(sim::available_cpus());
  const std::string on_threads = ", " + threads + " thread" + (threads == "1" ? "" : "s");
  const std::vector<BenchCase> cases = {
      {"1 GiB all-reduce, " + cluster + ", flow",
       {"collective", "--cluster", cluster, "--op", "all_reduce", "-b", "1G", "-e", "1G"},
       "about 0.01 s"},
      {"8 B..8 GiB sweep of every collective, " + cluster + ", flow",
       {"collective", "--cluster", cluster, "--op", "all", "-b", "8", "-e", "8G"},
       "under 5 s"},
      {"8 B..8 GiB sweep of every collective, " + cluster + ", analytical",
       {"collective", "--cluster", cluster, "--op", "all", "-b", "8", "-e", "8G", "--network", "analytical"},
       ""},
      {"training step, LLaMA-7B ZeRO-3, every rank of " + cluster,
       {"run", "--cluster", cluster, "--model", "llama-7b", "--plan", "zero3"},
       "<= 1 s, <= 2 GiB"},
      {"training step, LLaMA-7B ZeRO-1, a reduce per owner, every rank of " + cluster,
       {"run", "--cluster", cluster, "--model", "llama-7b", "--plan", "zero1"},
       "<= 1 s, <= 2 GiB"},
      {"training step, LLaMA-30B AMSP (8, 8, 32), every rank of " + cluster,
       {"run", "--cluster", cluster, "--model", "llama-30b", "--plan", "amsp-llama30b", "--training",
        "seq4096-mbs1-4m-tokens-full-recompute"},
       "<= 1 s, <= 2 GiB"},
      {"training step, LLaMA-65B Megatron TP8 PP8x2, every rank of " + cluster,
       {"run", "--cluster", cluster, "--model", "llama-65b", "--plan", "megatron-tp8-pp8-interleaved"},
       "<= 1 s, <= 2 GiB"},
      {"training step, LLaMA-65B Megatron TP8 PP8x2 + TP comm overlap, every rank of " + cluster,
       {"run", "--cluster", cluster, "--model", "llama-65b", "--plan", "megatron-tp8-pp8-tp-overlap"},
       "<= 1 s, <= 2 GiB"},
      {"training step, LLaMA-65B ZeroPP PP8x2 + ZeRO-1, full recompute, every rank of " + cluster,
       {"run", "--cluster", cluster, "--model", "llama-65b", "--plan", "zero-pipeline-pp8-zero1", "--training",
        "seq4096-mbs1-4m-tokens-full-recompute"},
       "<= 1 s, <= 2 GiB"},
      {"training step, Mixtral-8x7B ZeRO-1, experts over 8 (E+D), every rank of " + cluster,
       {"run", "--cluster", cluster, "--model", "mixtral-8x7b", "--plan", "zero1", "--expert-parallel", "8"},
       "<= 1 s, <= 2 GiB"},
      {"full plan search, LLaMA-7B on all 1024 GPUs of " + cluster + ", 1 thread",
       {"search", "--cluster", cluster, "--model", "llama-7b", "--threads", "1"},
       ""},
      {"full plan search, LLaMA-7B on all 1024 GPUs of " + cluster + on_threads,
       {"search", "--cluster", cluster, "--model", "llama-7b", "--threads", threads},
       "< 60 s"},
      {"full plan search, LLaMA-30B on all 1024 GPUs of " + cluster + on_threads,
       {"search", "--cluster", cluster, "--model", "llama-30b", "--threads", threads},
       "< 60 s"},
      {"full plan search, LLaMA-65B on all 1024 GPUs of " + cluster + " (pipelines win)" + on_threads,
       {"search", "--cluster", cluster, "--model", "llama-65b", "--threads", threads},
       "< 60 s"},
  };
  std::printf("# shardsim bench: whole process per case, best wall time of %d runs, peak RSS\n", repeat);
  std::printf("%-80s %10s %14s  %s\n", "case", "wall (s)", "peak RSS (MiB)", "target");
  for (const BenchCase& c : cases) {
    Measurement best;
    for (int i = 0; i < repeat; ++i) {
      const Measurement m = run_child(executable, c.arguments);
      best.wall_seconds = std::min(best.wall_seconds, m.wall_seconds);
      best.peak_rss_mib = std::max(best.peak_rss_mib, m.peak_rss_mib);
    }
    std::printf("%-80s %10.3f %14.1f  %s\n", c.name.c_str(), best.wall_seconds, best.peak_rss_mib, c.target.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto cluster = std::make_shared<std::string>("dgx-a100-1024");
  auto repeat = std::make_shared<int>(3);
  CLI::App* command = app.add_subcommand("bench", "Time shardsim on its reference workloads (wall time, peak RSS)");
  command->footer("Example:\n  shardsim bench --cluster dgx-a100-1024 --repeat 3");
  command->add_option("--cluster", *cluster, "Cluster JSON file or preset name")->capture_default_str();
  command->add_option("--repeat", *repeat, "Runs per case; the best wall time is reported")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  command->callback([cluster, repeat, &exit_code] { exit_code = run_bench(*cluster, *repeat); });
}

}  // namespace shardsim::cli
