// Megatron-LM's flags as a launch script writes them, read as Megatron's
// argparse would read them: the shell words of the script, each
// "--name value" or "--name=value" a flag whose field is the name with "-"
// turned into "_", a flag given twice keeping its last value. A value
// "$NAME" or "${NAME}" is what the script assigns NAME, where that is a plain
// value (NUM_LAYERS=32, TP=${TP:-1}).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardsim::workloads {

// One flag as written: its value (none for a switch) and its line.
struct MegatronFlag {
  std::optional<std::string> value;
  int line = 0;
};

// Field name ("tensor_model_parallel_size") -> the flag, the last one given.
using MegatronFlags = std::map<std::string, MegatronFlag>;

MegatronFlags read_megatron_flags(const std::string& text);

// The flags of one file, read with the checks every flag takes; each error
// names the file, the flag and its line.
class FlagReader {
 public:
  FlagReader(const MegatronFlags& flags, std::string file) : flags_(flags), file_(std::move(file)) {}

  bool has(const std::string& field) const { return flags_.count(field) != 0; }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const;

  // A switch, given or not; a value after it is an error.
  bool on(const std::string& field) const;
  // A value, refused when it is a shell expression shardsim cannot expand.
  std::optional<std::string> text(const std::string& field) const;
  // An integer from `minimum` to INT_MAX (what the counts it holds are kept in).
  std::optional<std::int64_t> integer(const std::string& field, std::int64_t minimum = 1) const;
  std::optional<double> positive_number(const std::string& field) const;
  std::optional<double> probability(const std::string& field) const;
  std::optional<std::string> choice(const std::string& field, const std::vector<std::string>& allowed) const;
  // A parallel size that must stay 1 because what it splits is not modelled.
  void refuse_above_one(const std::string& field, const std::string& what) const;

 private:
  const MegatronFlags& flags_;
  std::string file_;
};

}  // namespace shardsim::workloads
