#!/usr/bin/env python3
"""Simulated nccl-tests against published measurements.

Regenerate with:  python3 results/compare_nccl_tests.py [path/to/shardsim]

Reads results/public_nccl_tests.csv (measured bus bandwidths, each with its
source and its record number in shared/data/public_hardware.json), runs
`shardsim collective` on the matching cluster (a preset, or a file in
results/nccl_tests_clusters/ for machines no preset describes) and group for
each series, and writes results/nccl_tests_comparison.csv with the simulated
bus bandwidth, the ratio simulated / measured and the algorithm the
simulation chose. Points marked fit_input were used to build the datasheet
profiles (a link efficiency), so they agree by construction; every other
point is a prediction.
"""
import collections
import csv
import math
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def simulate(shardsim, cluster, group, op, algo, sizes):
    """busbw and algorithm per size, from one sweep covering all the sizes."""
    if (HERE / cluster).is_file():  # a cluster described here rather than a preset
        cluster = str(HERE / cluster)
    gpus = []
    if ":" in group:  # "all:16": the first 16 GPUs
        group, count = group.split(":")
        gpus = ["--gpus", count]
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "sim.csv"
        subprocess.run([shardsim, "collective", "--cluster", cluster, "--group", group, *gpus, "--op", op,
                        "--algo", algo, "-b", str(min(sizes)), "-e", str(max(sizes)), "-f", "2",
                        "--csv", str(out)],
                       check=True, stdout=subprocess.DEVNULL)
        with out.open() as f:
            return {int(r["size_bytes"]): (float(r["busbw_gb_per_s"]), r["algorithm"]) for r in csv.DictReader(f)}


def main():
    shardsim = sys.argv[1] if len(sys.argv) > 1 else str(HERE.parent / "build" / "shardsim")
    with (HERE / "public_nccl_tests.csv").open() as f:
        measured = list(csv.DictReader(f))
    series = collections.defaultdict(list)
    for row in measured:
        series[(row["series"], row["cluster"], row["group"], row["op"], row["algo"])].append(row)

    out_rows = []
    for (name, cluster, group, op, algo), rows in series.items():
        simulated = simulate(shardsim, cluster, group, op, algo, [int(r["size_bytes"]) for r in rows])
        for r in rows:
            busbw, algorithm = simulated[int(r["size_bytes"])]
            out_rows.append({
                "series": name, "record": r["record"], "cluster": cluster, "group": group, "op": op, "algo": algo,
                "size_bytes": r["size_bytes"], "measured_busbw_gb_per_s": r["busbw_gb_per_s"],
                "simulated_busbw_gb_per_s": f"{busbw:.2f}",
                "ratio": f"{busbw / float(r['busbw_gb_per_s']):.3f}",
                "simulated_algorithm": algorithm, "fit_input": r["fit_input"],
            })
    with (HERE / "nccl_tests_comparison.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(out_rows[0].keys()))
        writer.writeheader()
        writer.writerows(out_rows)

    # Geometric mean of simulated/measured per series and size band, fit inputs left out.
    bands = [("< 1 MiB", 0, 1 << 20), ("1-64 MiB", 1 << 20, 64 << 20), (">= 64 MiB", 64 << 20, 1 << 62)]
    print(f"{'series':28} {'sizes':>10} {'points':>6} {'sim/measured':>13}")
    for name in dict.fromkeys(r["series"] for r in out_rows):
        for label, low, high in bands:
            ratios = [float(r["ratio"]) for r in out_rows if r["series"] == name and r["fit_input"] == "no"
                      and low <= int(r["size_bytes"]) < high]
            if ratios:
                mean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
                print(f"{name:28} {label:>10} {len(ratios):>6} {mean:>13.2f}")


if __name__ == "__main__":
    main()
