#!/usr/bin/env python3
"""Writes the sample nccl-tests outputs the calibration tests import.

The logs follow nccl-tests' own layout (src/util.cu: header lines, one
"#  Rank" line per rank, columns size count type redop root, then time algbw
busbw #wrong out-of-place and in-place, the "Avg bus bandwidth" footer; the -J
file's keys), with times from known alpha-beta lines so a test can check that
import + fit gives the line back:

  all_reduce, 8 ranks on one host:   t = 25 us + size / 100 GB/s (out-of-place),
                                     in-place 1 % faster; busbw asymptote 175 GB/s
  all_gather, 16 ranks on 2 hosts:   t = 40 us + size / 20 GB/s (JSON, NCCL_ALGO=Ring)
  reduce_scatter, 4 ranks, #wrong 3 at 1 MiB
  truncated: the all_reduce log cut inside a row
  suite, 16 ranks on 2 hosts, three tests one after another in one file, as
  a run script writes them:
                                     all_reduce     t = 30 us + size / 40 GB/s
                                     all_gather     t = 35 us + size / 25 GB/s
                                     reduce_scatter t = 45 us + size / 30 GB/s
"""
import json

TYPES = {"float": 4}


def float_str(value, width):
    # nccl-tests' getFloatStr
    power = 0
    v = 1
    while value >= v:
        power += 1
        v *= 10
    if power < width - 2:
        return "%*.2f" % (width, value)
    if power < width - 1:
        return "%*.1f" % (width, value)
    if power < width + 1:
        return "%*.0f" % (width, value)
    return "%*.1e" % (width, value)


def bus_factor(op, n):
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n}[op]


def sizes(lo, hi):
    s = lo
    while s <= hi:
        yield s
        s *= 2


def rows(op, n, alpha_us, bytes_per_us, lo, hi, wrong_at=None):
    out = []
    for size in sizes(lo, hi):
        count = size // 4
        if op != "all_reduce":
            count = size // 4 // n
        sides = []
        for in_place in (False, True):
            t = alpha_us + size / bytes_per_us
            if in_place:
                t *= 0.99
            algbw = size / 1e3 / t
            wrong = 3 if (wrong_at == size) else 0
            sides.append((t, algbw, algbw * bus_factor(op, n), wrong))
        out.append((size, count, sides))
    return out


def text_log(program, op, ranks, hosts, rows_, redop):
    lines = ["# nccl-tests version 2.17.6 nccl-headers=22809 nccl-library=22809",
             "# Collective test starting: %s" % program,
             "# nThread 1 nGpus %d minBytes %d maxBytes %d step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0"
             % (ranks // len(hosts), rows_[0][0], rows_[-1][0]),
             "#",
             "# Using devices"]
    per_host = ranks // len(hosts)
    for r in range(ranks):
        lines.append("#  Rank %2d Group  0 Pid %6d on %10s device %2d [%04x:%02x:%02x] NVIDIA H100 80GB HBM3"
                     % (r, 4000 + r, hosts[r // per_host], r % per_host, 0, 0x18 + r % per_host, 0))
    lines += ["#",
              "#                                                              out-of-place                       in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         "]
    total = 0
    for size, count, sides in rows_:
        line = "%12d  %12d  %8s  %6s  %6s" % (size, count, "float", redop, "%6i" % -1)
        for t, algbw, busbw, wrong in sides:
            line += "  %7s  %6s  %6s  %6g" % (float_str(t, 7), float_str(algbw, 6), float_str(busbw, 6), wrong)
        total += sides[0][2]
        lines.append(line)
    lines += ["# Out of bounds values : 0 OK",
              "# Avg bus bandwidth    : %g " % (total / len(rows_)),
              "#",
              "# Collective test concluded: %s" % program,
              ""]
    return "\n".join(lines)


ar = rows("all_reduce", 8, 25.0, 100e3, 8, 1 << 30)
with open("all_reduce_8gpu.log", "w") as f:
    f.write(text_log("all_reduce_perf", "all_reduce", 8, ["dgx-a"], ar, "sum"))

text = text_log("all_reduce_perf", "all_reduce", 8, ["dgx-a"], ar, "sum")
truncated = text[: text.index("  1048576") + 60]
with open("all_reduce_truncated.log", "w") as f:
    f.write(truncated)

rs = rows("reduce_scatter", 4, 15.0, 50e3, 1 << 10, 1 << 24, wrong_at=1 << 20)
with open("reduce_scatter_wrong.log", "w") as f:
    f.write(text_log("reduce_scatter_perf", "reduce_scatter", 4, ["node1"], rs, "sum"))

suite = [text_log("all_reduce_perf", "all_reduce", 16, ["gpu-a", "gpu-b"],
                  rows("all_reduce", 16, 30.0, 40e3, 1 << 10, 1 << 28), "sum"),
         text_log("all_gather_perf", "all_gather", 16, ["gpu-a", "gpu-b"],
                  rows("all_gather", 16, 35.0, 25e3, 1 << 10, 1 << 28), "none"),
         text_log("reduce_scatter_perf", "reduce_scatter", 16, ["gpu-a", "gpu-b"],
                  rows("reduce_scatter", 16, 45.0, 30e3, 1 << 12, 1 << 26), "sum")]
with open("suite_16gpu_2node.log", "w") as f:
    f.write("\n".join(suite))

ag = rows("all_gather", 16, 40.0, 20e3, 1 << 10, 1 << 28)
doc = {"version": 2, "start_time": "2026-11-20 10:00:00",
       "args": ["/opt/nccl-tests/build/all_gather_perf", "-b", "1K", "-e", "256M", "-f", "2", "-g", "1"],
       "env": ["NCCL_ALGO=Ring", "NCCL_DEBUG=WARN"], "nccl_version": 22809,
       "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 1024, "maximum_bytes": 1 << 28, "step_factor": 2,
                  "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                  "blocking_collectives": "false", "per_iter_timing": "false", "parallel_init": "false",
                  "devices": [{"rank": r, "group": 0, "pid": 5000 + r, "hostname": "node%d" % (r // 8), "device": r % 8,
                               "device_hex": "0000:%02x:00" % (0x18 + r % 8), "device_info": "NVIDIA H100 80GB HBM3"}
                              for r in range(16)]},
       "results": []}
for size, count, sides in ag:
    entry = {"size": size, "count": count, "type": "float", "redop": "none", "root": "    -1"}
    for key, (t, algbw, busbw, wrong) in zip(("out_of_place", "in_place"), sides):
        entry[key] = {"time": round(t, 6), "alg_bw": round(algbw, 6), "bus_bw": round(busbw, 6), "nwrong": 0.0}
    entry["actual_iterations"] = 20
    entry["experiment_name"] = ""
    doc["results"].append(entry)
doc["out_of_bounds"] = {"count": 0, "okay": "true"}
doc["average_bus_bandwidth"] = {"bandwidth": 10.0, "okay": "unchecked"}
doc["errors"] = []
doc["end_time"] = "2026-11-20 10:01:00"
with open("all_gather_16gpu_2node.json", "w") as f:
    json.dump(doc, f)
