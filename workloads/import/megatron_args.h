// Megatron-LM arguments -> Plan and TrainingConfig: the launch a Megatron
// user already has, read as Megatron's argparse would read it
// (Megatron-LM's arguments.py and Megatron-Core's
// DistributedDataParallelConfig).
//
// The file is the flags of a pretrain_gpt.py launch, as a user keeps them: a
// shell script (backslash continuations, # comments, VAR="..." strings and
// bash arrays are read through), or a plain list of flags. Every token
// "--name value" or "--name=value" is a flag, its field the name with "-"
// turned into "_" (FORMATS.md); a flag given twice keeps the last value, as
// argparse does. Flags shardsim does not read (learning rate, data paths,
// logging, torchrun's own) are skipped; a value of a flag it reads must be a
// literal ("$TP" is refused: expand the script's variables first). Which
// flags become which plan and training fields, what is refused, and which
// model flags are checked against the model simulated: the README's
// "Files" section, "Megatron-LM launches".
#pragma once

#include "workloads/import/megatron_flags.h"
#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"
#include "workloads/inputs/training.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shardsim::workloads {

struct MegatronJob {
  Plan plan;
  TrainingConfig training;
  int data_parallel = 1;
  // The MTP depths Megatron builds (--mtp-num-layers, none without it), which
  // the simulated model's mtp_layers takes.
  int mtp_layers = 0;
  std::string file;  // the file read, named in later errors about the plan or batch
  // Where the simulation departs from what the flags ask of Megatron-LM
  // (a flag with no effect, an overlap not modelled), for the user to see.
  std::vector<std::string> notes;
};

// The job on `gpus` GPUs, nodes of `gpus_per_node`; `training` gives what
// the flags leave out. Throws InputError naming `file` and the flag.
MegatronJob parse_megatron_args(const std::string& text, const std::string& file, const ModelSpec& model,
                                const TrainingConfig& training, int gpus, int gpus_per_node);
// A file, or a bundled launch (workloads/megatron/<name>.sh).
MegatronJob load_megatron_args(const std::string& file_or_preset, const ModelSpec& model,
                               const TrainingConfig& training, int gpus, int gpus_per_node);

}  // namespace shardsim::workloads
