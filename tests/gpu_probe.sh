#!/bin/sh
# The GPU probe, as a user with a GPU runs it. Without one: --backend gpu
# exits 2 saying so and writes nothing, and the test reports itself skipped
# (77). With one: a quick probe, whose cuDNN fused attention is either
# timed (after its results matched the reference) or skipped with the
# reason; then the fit on the H200 datasheet base, whose attention
# efficiency is the measured one whenever attention was timed.
set -eu
bin=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

if ! "$bin/shardsim-devices" --require-gpu > "$out/devices.txt" 2>&1; then
  status=0
  "$bin/shardsim-probe" --backend gpu -o "$out/raw.json" > "$out/probe.txt" 2>&1 || status=$?
  [ "$status" -eq 2 ] && grep -q "no CUDA device visible" "$out/probe.txt" && [ ! -e "$out/raw.json" ] ||
    { cat "$out/probe.txt" >&2; echo "--backend gpu without a GPU: exit $status" >&2; exit 1; }
  echo "no GPU: --backend gpu refuses with exit 2; the GPU probe is skipped"
  exit 77
fi

timeout 300 "$bin/shardsim-probe" --backend gpu --quick -o "$out/raw.json" > "$out/probe.txt" 2>&1
cat "$out/probe.txt"
grep -q '"gemm"' "$out/raw.json"
"$bin/shardsim" calib fit "$out/raw.json" --base h200 -o "$out/profile.json" > "$out/fit.txt"
if grep -q "^# fused attention bf16 .* TFLOP/s" "$out/probe.txt"; then
  grep -q '"attention_source": *"measured on' "$out/profile.json"
else
  grep -q "^# fused attention: \(skipped\|largest error .*wrong results\)" "$out/probe.txt"
fi
echo "gpu probe: probe -> fit OK"
