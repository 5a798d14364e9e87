"""What the comparison scripts under results/ share: the shardsim runs each makes, the CSV
each writes and the summary of predicted / published ratios each prints."""
import csv
import json
import math
import subprocess
import sys


def geometric_mean(values):
    return math.exp(sum(math.log(x) for x in values) / len(values))


def write_comparison(path, rows):
    """Rows of dicts with the same keys, as CSV with a header."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)


def print_ratio_summary(groups, width=28):
    """One line per (label, ratios) group that has ratios: how many, their geometric mean, their range."""
    print(f"\n{'rows':{width}} {'points':>6} {'predicted/published':>20} {'range':>13}")
    for label, ratios in groups:
        if ratios:
            print(f"{label:{width}} {len(ratios):>6} {geometric_mean(ratios):>20.2f} "
                  f"{min(ratios):>6.2f}-{max(ratios):.2f}")


def run_json(command, cwd=None):
    """A `shardsim run ... --json` command's JSON. Exit 1 is a plan that does not fit, which
    the JSON reports; any other failure stops the script with shardsim's message."""
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"shardsim failed on {' '.join(command)}:\n{done.stderr}")
    return json.loads(done.stdout)
