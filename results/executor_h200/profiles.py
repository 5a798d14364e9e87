#!/usr/bin/env python3
"""Every job of this folder under each H200 profile, against its measured step.

    python3 results/executor_h200/profiles.py      # needs ./build/shardsim; about 20 s

The measured steps are the executor's (summary.csv, held_out_summary.csv);
nothing here needs a GPU. Profiles: measured/h200-1gpu (the probe's, the
h200-1024 preset's default), h200 (the datasheet profile, GEMMs at the speed
the probe sustained) and h200-burst (GEMMs at a lone call's speed, as the
datasheet profile had them before). Output: profiles.csv.
"""
import csv
import json
import pathlib
import subprocess

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SHARDSIM = ROOT / "build" / "shardsim"
PROFILES = [("h200-1gpu", str(ROOT / "calib" / "profiles" / "measured" / "h200-1gpu.json")),
            ("h200", "h200"), ("h200-burst", "h200-burst")]
MAIN_JOB = "--cluster h200-1024 --model llama-7b --plan zero3 --gpus 1 --scale layers=16,micro_batches=4"


def measured_steps():
    """(job name, arguments, measured step seconds), one per job."""
    jobs = []
    with open(HERE / "summary.csv") as f:
        for row in csv.DictReader(f):
            if row["profile"] == "h200-1gpu":
                jobs.append(("llama-7b-16l, overlap " + row["overlap"], MAIN_JOB + " --overlap " + row["overlap"],
                             float(row["measured_step_seconds"])))
    arguments = {}
    for line in (HERE / "held_out.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, job = line.split(None, 1)
            arguments[name] = job
    with open(HERE / "held_out_summary.csv") as f:
        for row in csv.DictReader(f):
            if row["profile"] == "h200-1gpu":
                jobs.append((row["job"] + " (held out)", arguments[row["job"]], float(row["measured_step_seconds"])))
    return jobs


def main():
    rows = []
    for name, job, measured in measured_steps():
        row = {"job": name, "measured_step_seconds": measured}
        for label, profile in PROFILES:
            out = subprocess.run([str(SHARDSIM), "run", *job.split(), "--profile", profile, "--json"],
                                 check=True, capture_output=True, text=True).stdout
            step = json.loads(out)["step_seconds"]
            row[label + "_step_seconds"] = step
            row[label + "_error"] = round(step / measured - 1, 4)
        rows.append(row)
    with open(HERE / "profiles.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print("| job | measured step (s) | " + " | ".join(label for label, _ in PROFILES) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in PROFILES) + " |")
    for row in rows:
        print(f"| {row['job']} | {row['measured_step_seconds']:.3f} | " +
              " | ".join(f"{100 * row[label + '_error']:+.1f} %" for label, _ in PROFILES) + " |")


if __name__ == "__main__":
    main()
