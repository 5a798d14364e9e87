// Import of nccl-tests results, the text a run prints and the file its
// -J option writes, into raw measurements (calib/measurements.h).
//
// What the logs say and how it is read:
//   - the collective: "# Collective test starting: all_reduce_perf" (text),
//     args[0] (JSON), else the file name, else --op;
//   - the group: one "#  Rank N Group G Pid P on HOST device D ..." line
//     (or JSON "devices" entry) per rank; nodes = distinct hosts;
//   - rows: size (B) count type redop root, then time (us) algbw busbw
//     #wrong out-of-place and again in-place; per-iteration columns (-R)
//     and timestamps are skipped;
//   - the algorithm: NCCL_ALGO from the JSON's environment, or --algorithm,
//     else "auto" (NCCL's own choice).
// Every row is checked against the bus factor of FORMATS.md (busbw / algbw
// must be 2(n-1)/n for all-reduce over n ranks, ...), which catches a wrong
// rank count or collective before it is fitted.
//
// Refused with InputError (exit code 2): a log that ends before nccl-tests'
// "Avg bus bandwidth" footer or has a cut row (truncated), rows whose
// #wrong is not 0 (results were wrong: nothing to fit on) unless
// keep_wrong, in which case they are kept and flagged and the fit skips
// them.
#pragma once

#include "calib/measurements.h"

#include <optional>
#include <string>

namespace shardsim::calib {

struct NcclTestsImportOptions {
  std::optional<workloads::CollectiveOp> op;  // when the log does not say
  std::string algorithm;                      // when the log does not say; "" = "auto"
  bool keep_wrong = false;
};

// `text` is the log's content, `file` its name for messages (and, failing
// all else, for the collective's name).
Measurements parse_nccl_tests_text(const std::string& text, const std::string& file,
                                   const NcclTestsImportOptions& options = {});
Measurements parse_nccl_tests_json(const std::string& text, const std::string& file,
                                   const NcclTestsImportOptions& options = {});
// Reads `file` and picks the parser by its first character ('{': JSON).
Measurements import_nccl_tests(const std::string& file, const NcclTestsImportOptions& options = {});

}  // namespace shardsim::calib
