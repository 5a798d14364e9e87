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
"$bin/shardsim" calib report "$out/cpu-profile.json" > "$out/report.txt"
grep -q "# profile cpu-ci" "$out/report.txt"
grep -q "gemm fp32" "$out/report.txt"
grep -q "all_reduce mpi 2r/1n" "$out/report.txt"
echo "cpu calibration loop: probe -> fit -> report OK"
