"""What the comparison scripts under results/ share: the CSV each writes and
the summary of predicted / published ratios each prints."""
import csv
import math


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
