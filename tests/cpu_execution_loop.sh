#!/bin/sh
# The whole loop where there is no GPU, as a user runs it, on 4 MPI ranks:
# CPU probe -> fit -> simulate (table mode, the fitted profile) -> execute
# the same Program -> compare. The executor checks its measured timeline
# itself (every op once, causal, collectives consistent) and exits non-zero
# otherwise; here: compare reports numbers for step time, GEMMs and
# collectives, and writes CSV and PNG. Then the faults: a rank killed
# mid-step and a rank that hangs end the run within 60 s, non-zero, with the
# op named, and leave no measured file. Accuracy is not asserted (4 ranks on
# 2 cores are noisy); results/executor_cpu/ reports it.
set -eu
bin=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd "$out"
job="--cluster cpu-4rank --model llama-7b --plan zero3 --scale layers=2,hidden=256,ffn=688,vocab=1024,seq=128,micro_batches=2"

timeout 300 mpirun -np 4 "$bin/shardsim-probe" --backend cpu --quick --out raw.json > probe.txt
"$bin/shardsim" calib fit raw.json --name cpu-4rank-ci -o fitted.json > fit.txt
"$bin/shardsim" run $job --profile fitted.json --network table --record-ranks all --h5 predicted.h5 > run.txt
# The fitted profile covers every collective the ZeRO stages issue (ZeRO-1/2 reduce to owners).
for plan in zero1 zero2; do
  "$bin/shardsim" run $(echo "$job" | sed "s/--plan zero3/--plan $plan/") --profile fitted.json --network table > /dev/null
done
timeout 300 mpirun -np 4 "$bin/shardsim" exec $job --profile fitted.json --steps 3 --warmup 1 --h5 measured.h5 \
  --trace measured-trace.json > exec.txt
grep -q "measured on CPU" exec.txt
grep -q '"traceEvents"' measured-trace.json
"$bin/shardsim" compare predicted.h5 measured.h5 --csv comparison.csv --png timelines.png > compare.txt
cat compare.txt
head -1 comparison.csv | grep -q "^section,quantity,predicted_seconds,measured_seconds,relative_error$"
for quantity in "step time" "gemm" "all_gather in flight" "reduce_scatter in flight" "compute"; do
  awk -F, -v q="$quantity" '$2 == q && $3 > 0 && $4 > 0 { found = 1 } END { exit !found }' comparison.csv ||
    { echo "compare: no predicted and measured time for '$quantity'" >&2; exit 1; }
done
head -c 4 timelines.png | grep -q PNG
status=0
"$bin/shardsim" compare predicted.h5 measured.h5 --png /nonexistent-dir/x.png > /dev/null 2>&1 || status=$?
[ "$status" -eq 2 ] || { echo "compare --png into a missing directory: exit $status, expected 2" >&2; exit 1; }

# Faults. Op 100 of a step is mid-way through the first micro-batch.
for fault in kill-rank=2,op=100 hang-rank=1,op=100; do
  start=$(date +%s)
  status=0
  timeout 120 mpirun -np 4 "$bin/shardsim" exec $job --steps 2 --warmup 1 --stall-timeout 5 --h5 faulty.h5 \
    --inject-fault "$fault" > fault.txt 2>&1 || status=$?
  elapsed=$(( $(date +%s) - start ))
  [ "$status" -ne 0 ] || { echo "$fault: exit code 0" >&2; exit 1; }
  [ "$elapsed" -lt 60 ] || { echo "$fault: took $elapsed s" >&2; exit 1; }
  grep -q "op 100\|op 99\|in flight\|has not completed" fault.txt || { cat fault.txt >&2; echo "$fault: no op named" >&2; exit 1; }
  [ ! -e faulty.h5 ] || { echo "$fault: a measured file was written" >&2; exit 1; }
  echo "$fault: exit $status after $elapsed s"
done
echo "cpu execution loop: probe -> fit -> run -> exec -> compare OK; faults end the run"
