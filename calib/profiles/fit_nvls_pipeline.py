#!/usr/bin/env python3
"""Fits the NVLS chunk pipeline of the h100 and h200 profiles to one public
nccl-tests series with `shardsim calib fit`, and checks it on the others.

    python3 calib/profiles/fit_nvls_pipeline.py [--check PROFILE.json...] [path/to/shardsim]

The model and the fit are shardsim's (sim/collectives/nvls.h,
nccl_chunking.h, nvls_pipeline_fit.h): an 8-GPU NVLS all-reduce of S bytes
runs 16 channels x 8 heads = 128 operations at once, each moving its share in
chunks of c bytes that NCCL's calcCollChunking picks from S; with k =
max(1, S / (128 c)) chunks per operation it takes

    t(S) = t0 + (k + F) (c' 128 / B + h),   c' = min(c, S / 128)

B being the profile's link-limited rate, F the chunks that fill and drain the
pipeline, h the synchronisation each chunk costs and t0 what is left of the
latency: three global numbers with a physical meaning.

Fit half: stas00's 8x H200 (records 199-218 of shared/data, bare metal,
NCCL 2.30.7), written as raw measurements and fitted by `shardsim calib fit
--base h200 --cluster h200-1024` (sizes from 1 MiB: below, NCCL runs ring LL).
Check half: Azure ND H200 v5 (records 176-198) and Azure ND H100 v5 (the
guide's results file), simulated with `shardsim collective` under the fitted
profile, the same sizes. Prints the fitted numbers and simulated / measured
bus bandwidth on both halves. With --check it exits 1 unless each profile
holds the fitted numbers (the test suite runs it on h100 and h200).
"""
import csv
import json
import math
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
N = 8
FIT = "stas00-h200-8gpu"
CHECK = ["azure-h200-8gpu", "azure-h100-8gpu"]
CLUSTER = {"stas00-h200-8gpu": "h200-1024", "azure-h200-8gpu": "h200-1024", "azure-h100-8gpu": "h100-8node"}
FROM_BYTES = 1 << 20


def series(name):
    with (ROOT / "results" / "public_nccl_tests.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["series"] == name and int(r["size_bytes"]) >= FROM_BYTES]
    # The measured time, from busbw: t = S 2 (n-1)/n / busbw.
    return [(int(r["size_bytes"]), int(r["size_bytes"]) * 2 * (N - 1) / N / (float(r["busbw_gb_per_s"]) * 1e9))
            for r in rows]


def fitted_profile(shardsim, tmp):
    raw = {"format": "shardsim-measurements-1",
           "machine": {"backend": "nccl-tests", "device": "NVIDIA H200", "host": "stas00 8x H200 (records 199-218)",
                       "software": "NCCL 2.30.7"},
           "gemm": [], "copies": [], "kernel_launch_seconds": [], "attention": [], "interference": [],
           "collectives": [{"op": "all_reduce", "algorithm": "auto", "ranks": N, "nodes": 1, "bytes": float(size),
                            "type": "float", "in_place": False, "seconds": seconds, "wrong": 0.0,
                            "source": f"results/public_nccl_tests.csv {FIT} {size}"}
                           for size, seconds in series(FIT)]}
    raw_path = tmp / "raw.json"
    raw_path.write_text(json.dumps(raw))
    profile_path = tmp / "fitted.json"
    subprocess.run([shardsim, "calib", "fit", str(raw_path), "--base", "h200", "--cluster", "h200-1024",
                    "-o", str(profile_path)], check=True, stdout=subprocess.DEVNULL)
    return profile_path


def pipeline_of(profile_path):
    with open(profile_path) as f:
        return json.load(f)["collectives"]["all_reduce"]["nvls"]["simple"]["chunk_pipeline"]


def with_pipeline(base, pipeline, tmp):
    """The bundled profile `base` with the fitted pipeline, for the check half."""
    with (ROOT / "calib" / "profiles" / f"{base}.json").open() as f:
        profile = json.load(f)
    profile["collectives"]["all_reduce"]["nvls"]["simple"]["chunk_pipeline"] = pipeline
    path = tmp / f"{base}-fitted.json"
    path.write_text(json.dumps(profile))
    return path


def report(shardsim, name, profile, tmp):
    points = series(name)
    out = tmp / f"{name}.csv"
    subprocess.run([shardsim, "collective", "--cluster", CLUSTER[name], "--profile", str(profile), "--group", "intra",
                    "--op", "all_reduce", "--algo", "nvls", "-b", str(points[0][0]), "-e", str(points[-1][0]),
                    "-f", "2", "--csv", str(out)], check=True, stdout=subprocess.DEVNULL)
    with out.open() as f:
        simulated = {int(r["size_bytes"]): float(r["time_us"]) * 1e-6 for r in csv.DictReader(f)}
    ratios = [t / simulated[s] for s, t in points]  # busbw simulated / measured
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    worst = max(ratios, key=lambda r: abs(math.log(r)))
    print(f"  {name:22} {len(points):2} sizes 1 MiB - {points[-1][0] / 2**30:g} GiB: geomean {mean:.3f}, "
          f"worst {worst:.3f}")


def main():
    args = sys.argv[1:]
    profiles = []
    if args and args[0] == "--check":
        profiles = [a for a in args[1:] if a.endswith(".json")]
        args = [a for a in args[1:] if not a.endswith(".json")]
    shardsim = args[0] if args else str(ROOT / "build" / "shardsim")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        pipeline = pipeline_of(fitted_profile(shardsim, tmp))
        print(f"fit on {FIT}: base_latency_seconds {pipeline['base_latency_seconds'] * 1e6:.2f} us, fill_chunks "
              f"{pipeline['fill_chunks']:.2f}, chunk_overhead_seconds {pipeline['chunk_overhead_seconds'] * 1e6:.3f} us")
        print("simulated / measured bus bandwidth, NVLS under the fitted pipeline (fit half, then check half):")
        for name in [FIT] + CHECK:
            report(shardsim, name, with_pipeline("h100" if "h100" in name else "h200", pipeline, tmp), tmp)
    status = 0
    for path in profiles:
        with open(path) as f:
            got = json.load(f)["collectives"]["all_reduce"]["nvls"]["simple"]["chunk_pipeline"]
        for key in ("base_latency_seconds", "fill_chunks", "chunk_overhead_seconds"):
            if abs(got[key] - pipeline[key]) > 1e-9 * abs(pipeline[key]) + 1e-15:
                print(f"{path}: collectives.all_reduce.nvls.simple.chunk_pipeline.{key} is {got[key]}, the fit gives "
                      f"{pipeline[key]!r}: put the fit's numbers in make_datasheet_profiles.py and rerun it")
                status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
