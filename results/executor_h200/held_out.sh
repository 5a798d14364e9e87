#!/bin/sh
# The held-out jobs (held_out.txt) under the measured h200-1gpu profile and
# the datasheet h200 profile:
#   sh results/executor_h200/held_out.sh              predictions only: held_out_predicted.csv (committed
#                                                     before the jobs ran, so nothing was fitted to them)
#   sh results/executor_h200/held_out.sh SESSION_DIR  and the comparison with the timelines that
#                                                     calib/portable/h200_held_out.sh measured:
#                                                     held_out_summary.csv, held-out-NAME-PROFILE.{csv,txt,png}
# Run from the repository root after ./setup.sh.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="$root/build"
session=""
if [ $# -gt 0 ]; then session=$(cd "$1" && pwd); fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "job,profile,predicted_step_seconds" > "$work/predicted.csv"
[ -z "$session" ] || {
  cp "$session/held-out.log" "$here/"
  echo "job,profile,predicted_step_seconds,measured_step_seconds,step_error,predicted_gemm_seconds,measured_gemm_seconds,gemm_error" \
    > "$work/summary.csv"
}
grep -v '^#' "$here/held_out.txt" | while read -r name job; do
  [ -n "$name" ] || continue
  for profile in h200-1gpu h200; do
    case $profile in
      h200-1gpu) profile_file="$root/calib/profiles/measured/h200-1gpu.json" ;;
      *) profile_file=$profile ;;
    esac
    run="$name-$profile"
    # shellcheck disable=SC2086  # the job is a list of arguments
    "$bin/shardsim" run $job --profile "$profile_file" --record-ranks all --h5 "$work/$run-predicted.h5" \
      --json > "$work/$run.json" < /dev/null
    python3 -c "import json, sys; print(sys.argv[2] + ',' + repr(json.load(open(sys.argv[1]))['step_seconds']))" \
      "$work/$run.json" "$name,$profile" >> "$work/predicted.csv"
    if [ -n "$session" ] && [ -e "$session/exec-$name.h5" ]; then
      cp "$session/exec-$name.h5" "$work/$run-measured.h5"
      sh "$here/../compare_row.sh" "$bin" "$work" "$run" "$here/held-out-$run" "$name,$profile" >> "$work/summary.csv"
    fi
  done
done
if [ -z "$session" ]; then
  cp "$work/predicted.csv" "$here/held_out_predicted.csv"
  cat "$here/held_out_predicted.csv"
else
  cp "$work/summary.csv" "$here/held_out_summary.csv"
  cat "$here/held_out_summary.csv"
fi
