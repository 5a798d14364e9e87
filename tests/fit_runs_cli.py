#!/usr/bin/env python3
"""shardsim calib fit-runs end to end: runs "measured" under a known kernel
time factor are fitted back to it, the written profile reproduces them, and
bad runs files are refused with exit code 2 naming the run.

    python3 tests/fit_runs_cli.py BUILD_DIR
"""
import json
import pathlib
import subprocess
import sys
import tempfile

build = pathlib.Path(sys.argv[1]).resolve()
shardsim = str(build / "shardsim")
TRUTH = 1.1


def run(*args, expect=0):
    done = subprocess.run([shardsim, *map(str, args)], capture_output=True, text=True)
    if done.returncode != expect:
        sys.exit(f"shardsim {' '.join(map(str, args))}: exit {done.returncode}, expected {expect}\n{done.stderr}")
    return done


def check(condition, what):
    if not condition:
        sys.exit("FAILED: " + what)


with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    truth = json.loads((pathlib.Path(__file__).resolve().parent.parent / "calib/profiles/a100.json").read_text())
    truth["compute"]["kernel_time_factor"] = TRUTH
    truth["compute"]["kernel_time_factor_source"] = "the test's truth"
    (tmp / "truth.json").write_text(json.dumps(truth))
    jobs = {
        "zero3-16": ["--cluster", "dgx-a100-2node", "--model", "llama-7b", "--plan", "zero3", "--gpus", "16",
                     "--scale", "layers=2,micro_batches=2"],
        "zero1-8": ["--cluster", "dgx-a100-2node", "--model", "llama-7b", "--plan", "zero1", "--gpus", "8",
                    "--scale", "layers=2,micro_batches=4", "--overlap", "none"],
        "fsdp-16": ["--cluster", "dgx-a100-2node", "--model", "llama-13b", "--plan", "fsdp-full-shard", "--gpus", "16",
                    "--scale", "layers=2,micro_batches=2"],
    }
    measured = {name: json.loads(run("run", *args, "--profile", tmp / "truth.json", "--json", expect=0).stdout)["step_seconds"]
                for name, args in jobs.items()}
    runs = {"source": "fit_runs_cli.py", "runs": [
        {"name": name, "family": "zero" if name.startswith("zero") else "fsdp", "measured_step_seconds": measured[name],
         "role": "check" if name == "fsdp-16" else "fit", "arguments": args} for name, args in jobs.items()]}
    (tmp / "runs.json").write_text(json.dumps(runs))
    out = run("calib", "fit-runs", tmp / "runs.json", "-o", tmp / "fitted", "--csv", tmp / "fit.csv", "--threads", 2).stdout
    line = next(l for l in out.splitlines() if l.startswith("kernel_time_factor"))
    factor = float(line.split()[1].rstrip(","))
    check(abs(factor - TRUTH) < 2e-3, f"fitted {factor}, truth {TRUTH}: {line}")
    rows = (tmp / "fit.csv").read_text().splitlines()
    check(len(rows) == 1 + len(jobs), "one CSV row per run")
    for row in rows[1:]:
        cells = row.split(",")
        check(abs(float(cells[7])) < 2e-3, f"errors near 0 when every run agrees: {row}")
        if cells[2] == "fit":
            check(abs(float(cells[8])) < 2e-3, f"left-out errors near 0 when every run agrees: {row}")
        else:
            check(cells[8] == "" and cells[9] == "", f"a check run has no left-out errors: {row}")
    check("check half (1 runs kept out)" in out, f"the check half is reported: {out}")
    fitted = tmp / "fitted" / "a100-fitted.json"
    profile = json.loads(fitted.read_text())
    check(profile["fitted_to"]["runs"] == ["zero3-16", "zero1-8"], "the profile names the runs it was fitted to")
    check(profile["fitted_to"]["check_runs"] == ["fsdp-16"], "and those it was checked on")
    check("2 fit runs" in profile["compute"]["kernel_time_factor_source"], "the factor's source says what it was fitted to")
    for name, args in jobs.items():
        step = json.loads(run("run", *args, "--profile", fitted, "--json").stdout)["step_seconds"]
        check(abs(step / measured[name] - 1) < 2e-3, f"{name}: the fitted profile gives {step}, measured {measured[name]}")

    # Bad runs: an option run does not take, and a profile already fitted.
    bad = json.loads(json.dumps(runs))
    bad["runs"][1]["arguments"] = ["--no-such-option", "1"]
    (tmp / "bad.json").write_text(json.dumps(bad))
    err = run("calib", "fit-runs", tmp / "bad.json", expect=2).stderr
    check("bad.json" in err and "zero1-8" in err, f"a bad run is named: {err}")
    bad = json.loads(json.dumps(runs))
    bad["runs"][0]["arguments"] += ["--profile", str(fitted)]
    (tmp / "refit.json").write_text(json.dumps(bad))
    err = run("calib", "fit-runs", tmp / "refit.json", expect=2).stderr
    check("kernel_time_factor" in err, f"a fitted profile is not fitted again: {err}")
    bad = json.loads(json.dumps(runs))
    bad["runs"][2]["arguments"] = ["--cluster", "dgx-a100-1024", "--model", "llama-65b", "--plan", "zero0", "--gpus", "8",
                                   "--scale", "layers=8,micro_batches=1"]
    (tmp / "oom.json").write_text(json.dumps(bad))
    err = run("calib", "fit-runs", tmp / "oom.json", "-o", tmp / "none", expect=2).stderr
    check("fsdp-16" in err and "out of memory" in err, f"a run that does not fit is refused, named: {err}")
    check(not (tmp / "none").exists(), "nothing written")
print("fit-runs: the factor, the profile and the refusals as expected")
