#!/usr/bin/env bash
# The held-out jobs of results/executor_h200/held_out.txt executed on a lent
# GPU machine, one call of the device tool after h200_session.sh:
#
#   here:   calib/portable/make_bundle.sh
#   there:  bash calib/portable/h200_held_out.sh       (carry: .gpu-bundle)
#
# Writes into $OUT (./h200-held-out otherwise): exec-NAME.h5 per job and
# held-out.log. Back here: `sh results/executor_h200/held_out.sh DIR`.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-h200-held-out}
mkdir -p "$out"
. calib/portable/bundle_env.sh .gpu-bundle/shardsim-bundle.tar.gz

if ! shardsim-devices --require-gpu >> "$out/held-out.log" 2>&1; then
  cat "$out/held-out.log"
  echo "h200_held_out.sh: the bundle sees no GPU" >&2
  exit 1
fi
grep -v '^#' results/executor_h200/held_out.txt | while read -r name job; do
  [ -n "$name" ] || continue
  echo "# $name: shardsim exec $job" >> "$out/held-out.log"
  # shellcheck disable=SC2086  # the job is a list of arguments
  timeout 90 shardsim exec $job --backend gpu --steps 10 --warmup 3 --h5 "$out/exec-$name.h5" \
    >> "$out/held-out.log" 2>&1 < /dev/null
  echo "# exit $?" >> "$out/held-out.log"
done
grep -E "^# |^step time|^peak memory" "$out/held-out.log"
