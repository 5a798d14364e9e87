#!/bin/sh
# The GPU loop on one H200, measure -> fit -> simulate -> compare, from the
# files calib/portable/h200_session.sh wrote on a lent machine (the GPU runs
# happen there; this part needs no GPU):
#   sh results/executor_h200/run.sh SESSION_DIR
# Fits calib/profiles/measured/h200-1gpu.json from the probe's raw points
# (what it did not measure, such as NVLink and InfiniBand, stays the h200
# datasheet profile's), simulates the 16-layer LLaMA-7B-shaped stack of the
# session under it and under the datasheet profile, and compares each with
# its measured timeline. Writes the comparisons (CSV, PNG, table) and
# summary.csv here. Run from the repository root after ./setup.sh.
set -eu
session=$(cd "${1:?usage: sh results/executor_h200/run.sh SESSION_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="$root/build"
measured="$root/calib/profiles/measured"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cp "$session/machine.txt" "$session/exec.log" "$session/probe.log" "$here/"
cp "$session/h200-1gpu-raw.json" "$measured/h200-1gpu-raw.json"
(cd "$measured" && "$bin/shardsim" calib fit h200-1gpu-raw.json --base h200 --cluster h200-1024 --name h200-1gpu \
  -o h200-1gpu.json > "$here/fit.txt" &&
  "$bin/shardsim" calib report h200-1gpu.json --png h200-1gpu.png > "$here/profile-report.txt")

job="--cluster h200-1024 --model llama-7b --plan zero3 --gpus 1 --scale layers=16,micro_batches=4"
echo "overlap,profile,predicted_step_seconds,measured_step_seconds,step_error,predicted_gemm_seconds,measured_gemm_seconds,gemm_error" \
  > "$here/summary.csv"
for overlap in all none; do
  for profile in h200-1gpu h200; do
    case $profile in
      h200-1gpu) profile_file="$measured/h200-1gpu.json" ;;
      *) profile_file=$profile ;;
    esac
    name="overlap-$overlap-$profile"
    "$bin/shardsim" run $job --overlap "$overlap" --profile "$profile_file" --record-ranks all \
      --h5 "$work/$name-predicted.h5" > /dev/null
    cp "$session/exec-$overlap.h5" "$work/$name-measured.h5"
    sh "$here/../compare_row.sh" "$bin" "$work" "$name" "$here/$name" "$overlap,$profile" >> "$here/summary.csv"
  done
done
cat "$here/summary.csv"
