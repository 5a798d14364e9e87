#!/bin/sh
# shardsim capacity as a capacity planner runs it, on a 2-node cluster and a
# small batch: the table answers with days and GPU-hours per count, the CSV
# and JSON hold the same rows, `mpirun --oversubscribe -np 2` prints the same
# bytes; a limit nothing fits in exits 1; bad budgets, deadlines and GPU
# counts exit 2 naming the option, and leave no CSV behind. Days hold the
# expected interruptions, none with --failures-per-gpu-day 0. `shardsim run
# --tokens` prices one plan's step the same way.
set -eu
bin=$1
data=$(cd "$(dirname "$0")" && pwd)/data
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd "$out"
# 128 sequences of 4096 tokens a step: 524288 tokens.
batch=$data/training/seq4096-128-sequences.json
capacity="$bin/shardsim capacity --cluster dgx-a100-2node --model llama-7b --training $batch"
small="--micro-batch-sizes 1,2 --recompute none --buckets 1e9 --simulate 2"

$capacity --tokens 2B --deadline-days 2 $small --csv serial.csv > serial.txt
cat serial.txt
grep -q "^# shardsim capacity: llama-7b" serial.txt
# ceil(2e9 / 524288) = 3815 steps.
grep -q "^# 2 B tokens: 3815 steps of 524288 tokens" serial.txt
grep -q "^     8 " serial.txt
grep -q "^    16 " serial.txt
grep -q "^# fewest GPUs within 2 days: " serial.txt
grep -q "^# fewest GPU-hours: " serial.txt
grep -q "^# fastest: " serial.txt
test "$(head -1 serial.csv | cut -d, -f1-2)" = "gpus,plan"
test "$(wc -l < serial.csv)" = 3
# training time = steps x step time, wall time = that / ETTR, GPU-hours =
# GPUs x the wall time: checked on the CSV's rows. The default failure rate
# costs 16 GPUs more of their time than 8.
python3 - serial.csv <<'PY'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [int(r["gpus"]) for r in rows] == [8, 16], rows
for r in rows:
    step = float(r["step_seconds"])
    assert math.isclose(float(r["training_seconds"]), 3815 * step, rel_tol=1e-8), r
    assert 0 < float(r["ettr"]) < 1, r
    assert math.isclose(float(r["wall_seconds"]), float(r["training_seconds"]) / float(r["ettr"]), rel_tol=1e-8), r
    assert math.isclose(float(r["gpu_hours"]), int(r["gpus"]) * float(r["wall_seconds"]) / 3600, rel_tol=1e-8), r
    assert float(r["checkpoint_interval_seconds"]) > 0 and float(r["expected_failures"]) > 0, r
assert float(rows[1]["ettr"]) < float(rows[0]["ettr"]), rows
assert float(rows[0]["scaling_efficiency"]) == 1.0
PY

# Without failures the wall time is the training time.
$capacity --tokens 2B $small --failures-per-gpu-day 0 --csv reliable.csv > reliable.txt
grep -q "no failures (--failures-per-gpu-day 0)" reliable.txt
python3 - reliable.csv <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    assert float(r["ettr"]) == 1 and r["wall_seconds"] == r["training_seconds"], r
PY

# A deadline no count meets: the fastest is named.
$capacity --tokens 2B --deadline-days 0.01 $small > late.txt
grep -q "^# no GPU count tried finishes within 0.01 days: the fastest, 16 GPUs, takes 0.27 days" late.txt

timeout 300 mpirun --oversubscribe -np 2 $capacity --tokens 2B --deadline-days 2 $small --csv mpi.csv > mpi.txt
cmp serial.txt mpi.txt
cmp serial.csv mpi.csv

$capacity --tokens 2B $small --json > plan.json
python3 - plan.json <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
assert plan["steps"] == 3815 and plan["tokens_per_step"] == 524288, plan
assert [r["gpus"] for r in plan["rows"]] == [8, 16]
assert plan["deadline_seconds"] is None and plan["fewest_gpus_in_time"] is None
assert plan["fastest"] in (8, 16) and plan["rows"][0]["best"]["plan"]
PY

# One plan priced on the budget: shardsim run --tokens.
run="$bin/shardsim run --cluster dgx-a100-2node --model llama-7b --training $batch --plan zero3 --gpus 16"
$run --tokens 2B --json > run.json
python3 - run.json <<'PY'
import json, math, sys
run = json.load(open(sys.argv[1]))
budget = run["training_budget"]
assert budget["steps"] == 3815 and budget["tokens"] == 2e9, budget
assert math.isclose(budget["seconds"], 3815 * run["step_seconds"], rel_tol=1e-12), budget
assert math.isclose(budget["gpu_hours"], 16 * budget["seconds"] / 3600, rel_tol=1e-12), budget
hit = budget["interruptions"]
assert budget["reliability"]["failures_per_gpu_day"] > 0, budget
assert 0 < hit["ettr"] < 1 and math.isclose(hit["wall_seconds"], budget["seconds"] / hit["ettr"], rel_tol=1e-12), hit
PY
$run --tokens 2B | grep -q "^training on 2B tokens .* days, 3815 steps"
$run --tokens 2B | grep -q "^with interruptions .* days, .* GPU-hours, ETTR "
code=0
$run --tokens 2X > bad.txt 2> bad.err || code=$?
test "$code" = 2
grep -q "\-\-tokens: '2X'" bad.err

code=0
$capacity --tokens 2B $small --mem-limit 1GiB --csv none.csv > none.txt || code=$?
test "$code" = 1
grep -q "no plan fits in 1.0 GiB" none.txt
test -s none.csv

for bad in "--tokens abc" "--tokens 0" "--tokens 5Q" "--tokens 2B --gpus 12" "--tokens 2B --gpus 32" \
           "--tokens 2B --gpus 8,,16" "--tokens 2B --deadline-days -1" "--deadline-days 3" \
           "--tokens 2B --failures-per-gpu-day -1" "--tokens 2B --restart-seconds inf" \
           "--tokens 2B --checkpoint-bytes-per-second 0" "--tokens 2B --checkpoint-seconds x"; do
  code=0
  # shellcheck disable=SC2086
  $capacity $bad $small --csv bad.csv > bad.txt 2> bad.err || code=$?
  echo "$bad -> $code: $(cat bad.err)"
  test "$code" = 2
  test -s bad.err
  test ! -e bad.csv
done
$capacity --tokens 2B --gpus 12 $small 2>&1 | grep -q "12 GPUs"
$capacity --tokens abc $small 2>&1 | grep -q "\-\-tokens: 'abc' is not a token count"
$capacity --tokens 1e32T $small 2>&1 | grep -q "\-\-tokens: '1e32T' is not a token count from 1 to 1e18"
$capacity --tokens 2B --restart-seconds -5 $small 2>&1 | grep -q "\-\-restart-seconds.*must be a finite number >= 0"
# An empty value is the option's error, not a zero that fails later under another name.
$capacity --tokens 2B --checkpoint-bytes-per-second "" $small 2>&1 | grep -q "^\-\-checkpoint-bytes-per-second: must be a number"
echo "capacity CLI: answers, CSV and JSON agree; serial and MPI identical; exit codes 1 and 2 as documented"
