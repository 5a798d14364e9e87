#!/bin/sh
# The calibration loop where there is no GPU, as a user runs it: the CPU
# probe under MPI (2 ranks on loopback, small sizes), the fit without a base
# profile, and the report of the profile it wrote.
set -eu
bin=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
timeout 120 mpirun -np 2 "$bin/shardsim-probe" --backend cpu --quick --out "$out/cpu.json" > "$out/probe.txt"
grep -q "Collective test: all_reduce (2 ranks)" "$out/probe.txt"
"$bin/shardsim" calib fit "$out/cpu.json" --name cpu-ci -o "$out/cpu-profile.json"
"$bin/shardsim" calib report "$out/cpu-profile.json" --png "$out/report.png" > "$out/report.txt"
grep -q "# profile cpu-ci" "$out/report.txt"
grep -q "gemm fp32" "$out/report.txt"
grep -q "all_reduce mpi 2r/1n" "$out/report.txt"
curves=$(sed -n 's/^# wrote \([0-9]*\) curves to .*/\1/p' "$out/report.txt")
[ "$curves" -ge 7 ] || { echo "report plotted '$curves' curves, expected the GEMMs, copies and 6+ collectives" >&2; exit 1; }
set -- $(od -An -tu1 -j16 -N8 "$out/report.png")
width=$(( ($1 << 24) + ($2 << 16) + ($3 << 8) + $4 )); height=$(( ($5 << 24) + ($6 << 16) + ($7 << 8) + $8 ))
head -c 4 "$out/report.png" | grep -q PNG
[ "$width" -eq 1320 ] && [ "$height" -eq $(( 26 + (curves + 2) / 3 * 270 )) ] ||
  { echo "report.png is $width x $height for $curves curves" >&2; exit 1; }
status=0
"$bin/shardsim" calib report a100 --png "$out/a100.png" > "$out/a100.txt" 2>&1 || status=$?
[ "$status" -eq 2 ] && grep -q "no measured curves" "$out/a100.txt" && [ ! -e "$out/a100.png" ] ||
  { cat "$out/a100.txt" >&2; echo "--png on a datasheet profile: exit $status" >&2; exit 1; }
echo "cpu calibration loop: probe -> fit -> report OK"
