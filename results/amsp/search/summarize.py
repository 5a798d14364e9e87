"""Planner against search: one row per (model, GPUs) from the search CSVs and
the published plans' `shardsim run --json` files that run.sh leaves here."""
import csv
import json
import sys

here = sys.argv[1]
scenarios = [("llama-7b", "amsp-llama7b", "none"), ("llama-13b", "amsp-llama13b", "none"),
             ("llama-30b", "amsp-llama30b", "full")]
columns = ["model", "gpus", "search_plan", "search_micro_batch", "search_recompute", "search_bucket_bytes",
           "search_placement", "search_step_seconds", "search_mfu", "search_peak_gib", "search_exposed_seconds",
           "published_plan", "published_recompute", "published_step_seconds", "published_mfu", "published_peak_gib",
           "published_exposed_seconds", "published_over_search",
           "best_factors_at_published_batch", "its_estimate_seconds", "published_estimate_seconds"]
out = csv.writer(sys.stdout, lineterminator="\n")
out.writerow(columns)
for model, plan, recompute in scenarios:
    for gpus in (64, 1024):
        rows = list(csv.DictReader(open(f"{here}/{model}-{gpus}.csv")))
        best = next(r for r in rows if r["rank"] == "1")
        published = json.load(open(f"{here}/{model}-{gpus}.published.json"))
        factors = published["factors"]
        # The batch settings AMSP ran with: micro-batch 1, its recompute, 1 GB buckets, consecutive ranks.
        same = [r for r in rows if r["micro_batch_size"] == "1" and r["recompute"] == recompute
                and float(r["bucket_bytes"]) == 1e9 and r["placement"] == "consecutive"
                and r["estimate_step_seconds"] and r["estimate_out_of_memory"] == "0"]
        fastest = min(same, key=lambda r: (float(r["estimate_step_seconds"]), int(r["index"])))
        mine = next(r for r in same if r["system"] == "amsp" and int(r["f_P"]) == factors["parameters"]
                    and int(r["f_G"]) == factors["gradients"] and int(r["f_OS"]) == factors["optimizer"])
        gib = 1024 ** 3
        out.writerow([model, gpus, best["plan"], best["micro_batch_size"], best["recompute"], best["bucket_bytes"],
                      best["placement"], best["step_seconds"], best["mfu"], "%.2f" % (float(best["peak_bytes"]) / gib),
                      best["exposed_seconds"], plan, recompute, "%.6g" % published["step_seconds"],
                      "%.6g" % published["mfu"], "%.2f" % (published["peak_memory"]["total_bytes"] / gib),
                      "%.6g" % published["time"]["exposed_communication_seconds"],
                      "%.4f" % (published["step_seconds"] / float(best["step_seconds"])),
                      fastest["plan"], fastest["estimate_step_seconds"], mine["estimate_step_seconds"]])
