#!/usr/bin/env bash
# Everything issues 4 and 6 need measured on a lent single-H200 machine, in
# one call of the device tool (a fresh machine costs minutes to start):
#
#   here:   calib/portable/make_bundle.sh
#   there:  bash calib/portable/h200_session.sh        (carry: .gpu-bundle)
#
# Writes into $OUT (the device tool's; ./h200-session otherwise):
#   machine.txt          nvidia-smi, the device query, which libraries ran
#   exec-all.h5 / exec-none.h5 / exec.log
#                        `shardsim exec` of a 16-layer LLaMA-7B-shaped stack
#                        on one GPU (ZeRO-3 at world size 1), every overlap
#                        on and none, 10 measured steps after 3
#   h200-1gpu-raw.json / probe.log
#                        shardsim-probe's raw points and its tables
#   gpu-tests.log        the GPU tests (tests/gpu_*.sh) on the bundle's binaries
# Back here: `sh results/executor_h200/run.sh DIR` fits the profile,
# simulates the same jobs under it and compares. Each step has its own time limit and a
# failed one does not stop the next.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-h200-session}
mkdir -p "$out"
. calib/portable/bundle_env.sh .gpu-bundle/shardsim-bundle.tar.gz

{
  echo "# bundle commit $(cat "$shardsim_bundle/commit"), $(date -u +%FT%TZ)"
  nvidia-smi
  nvidia-smi -q | grep -E "Product Name|Driver Version|CUDA Version|Max Clocks|Graphics|Memory  |SM  " | head -40
  shardsim-devices
  echo "# LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$shardsim_bundle/bin/shardsim-gpu-backend.so" | grep -E "cuda|cublas|nccl|stdc"
  lscpu | head -20
} > "$out/machine.txt" 2>&1
# A bundle that cannot see the GPU stops here, so that the lease's
# remaining minutes are left for a corrected rerun.
if ! shardsim-devices --require-gpu >> "$out/machine.txt" 2>&1; then
  cat "$out/machine.txt"
  echo "h200_session.sh: the bundle sees no GPU; stopped before the runs" >&2
  exit 1
fi

job="--cluster h200-1024 --model llama-7b --plan zero3 --gpus 1 --scale layers=16,micro_batches=4"
for overlap in all none; do
  echo "# shardsim exec $job --overlap $overlap" >> "$out/exec.log"
  timeout 90 shardsim exec $job --overlap "$overlap" --backend gpu --steps 10 --warmup 3 \
    --h5 "$out/exec-$overlap.h5" >> "$out/exec.log" 2>&1
  echo "# exit $?" >> "$out/exec.log"
done

timeout 240 shardsim-probe --backend gpu -o "$out/h200-1gpu-raw.json" > "$out/probe.log" 2>&1
echo "# exit $?" >> "$out/probe.log"

for test in gpu_execution gpu_probe; do
  echo "# tests/$test.sh" >> "$out/gpu-tests.log"
  timeout 80 sh "tests/$test.sh" "$shardsim_bundle/bin" >> "$out/gpu-tests.log" 2>&1
  echo "# exit $?" >> "$out/gpu-tests.log"
done
grep -E "^# (shardsim exec|exit)|step time|measured" "$out/exec.log"
grep -E "^# exit|^# gemm bf16 (8192|16384)x|copies 1073741824" "$out/probe.log"
grep "^# " "$out/gpu-tests.log"
ls -la "$out"
