#!/bin/sh
# The CPU loop, calibrate -> simulate -> execute -> compare, on 4 MPI ranks of
# this machine, for a LLaMA-7B-shaped model scaled to 2 layers of hidden 256,
# under ZeRO-3 (as DeepSpeed implements it) and ZeRO-1, with every overlap on
# and with none. Writes the fitted profile, the timelines' comparisons (CSV,
# PNG) and summary.csv here. Run from the repository root after ./setup.sh:
#   sh results/executor_cpu/run.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "$here/../../build" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpirun -np 4 "$bin/shardsim-probe" --backend cpu --max-bytes 33554432 -o "$here/cpu-4rank-raw.json" > "$work/probe.txt"
(cd "$here" && "$bin/shardsim" calib fit cpu-4rank-raw.json --name cpu-4rank -o cpu-4rank-profile.json > fit.txt)
scale="layers=2,hidden=256,ffn=688,vocab=1024,seq=128,micro_batches=2"
echo "plan,overlap,predicted_step_seconds,measured_step_seconds,step_error,predicted_gemm_seconds,measured_gemm_seconds,gemm_error" > "$here/summary.csv"
for plan in zero3 zero1; do
  for overlap in all none; do
    job="--cluster cpu-4rank --model llama-7b --plan $plan --overlap $overlap --scale $scale"
    name="$plan-overlap-$overlap"
    "$bin/shardsim" run $job --profile "$here/cpu-4rank-profile.json" --network table --record-ranks all \
      --h5 "$work/$name-predicted.h5" > /dev/null
    mpirun -np 4 "$bin/shardsim" exec $job --profile "$here/cpu-4rank-profile.json" --steps 10 --warmup 3 \
      --h5 "$work/$name-measured.h5" > /dev/null
    sh "$here/../compare_row.sh" "$bin" "$work" "$name" "$here/$name" "$plan,$overlap" >> "$here/summary.csv"
  done
done
cat "$here/summary.csv"
