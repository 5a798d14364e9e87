#!/usr/bin/env python3
"""Writes the bundled datasheet profiles (a100, a800, h100, h200) in this folder,
and beside each its burst variant (a100-burst, ...).

Regenerate with:  python3 calib/profiles/make_datasheet_profiles.py

A profile's GEMM curve is the speed a training step sustains: GEMMs back to
back for seconds, the GPU at its power limit. The -burst profiles keep the
speed of a GEMM timed for a fraction of a second, at the boost clock, which
is what short GEMM benchmarks report; they are for comparison, not planning.

Every number below names its source. "record N" is entry N (0-based) of
shared/data/public_hardware.json, the team's collection of public hardware
and nccl-tests figures. Nothing here is tuned to make a simulation agree with
anything: link efficiencies are measured large-message NCCL bandwidth over
nominal link bandwidth, and latencies and protocol factors are NVIDIA's own
published NCCL tuning model. A measured profile (shardsim calib fit) replaces
all of this for a machine that has been probed.
"""
import json
import pathlib

NCCL_TUNING = ("NVIDIA/nccl src/graph/tuning.cc at commit b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2: "
               "baseLat and hwLat tables (microseconds) and the protocol bandwidth refinements of "
               "ncclTopoTuneModel")

# NCCL tuning model, microseconds: base latency per (algorithm, protocol) and
# per-hop latency per (hardware, algorithm, protocol).
BASE_US = {"tree": {"ll": 6.8, "ll128": 14.0, "simple": 0.0},
           "ring": {"ll": 6.6, "ll128": 14.0, "simple": 8.4}}
HOP_US = {"tree": {"ll": {"nvlink": 0.6, "pcie": 1.0, "network": 5.0},
                   "ll128": {"nvlink": 1.25, "pcie": 1.9, "network": 8.5},
                   "simple": {"nvlink": 28.0, "pcie": 28.0, "network": 28.0}},
          "ring": {"ll": {"nvlink": 0.6, "pcie": 1.0, "network": 2.7},
                   "ll128": {"nvlink": 1.9, "pcie": 2.5, "network": 4.0},
                   "simple": {"nvlink": 3.4, "pcie": 5.7, "network": 14.0}}}
# Fraction of the link bandwidth each protocol reaches in NCCL's model
# ("various model refinements" of ncclTopoTuneModel): ring LL busBw/4, ring
# LL128 x0.92, tree x0.92 for all protocols, then LL /3.8 and LL128 x120/128.
BANDWIDTH_FACTOR = {"ring": {"ll": 0.25, "ll128": 0.92, "simple": 1.0},
                    "tree": {"ll": 0.92 / 3.8, "ll128": 0.92 * 120 / 128, "simple": 0.92}}
# The same refinements by group shape. Inside one node, ring LL reaches busBw/3
# for every collective but all-reduce and reduce, and tree LL128 x7/9 in place
# of x120/128. With fewer than two ranks per node ("sending/receiving at the
# same GPU through the NIC"), ring LL128 reaches x0.7 in place of x0.92.
SINGLE_NODE_RING_LL = 1.0 / 3.0
SINGLE_NODE_TREE_LL128 = 0.92 * 7 / 9
ONE_RANK_PER_NODE_RING_LL128 = 0.7
# The same line caps LL at llMaxBw, 87.7 GB/s of bus bandwidth inside one
# Ampere or Hopper node (llMaxBws). A ring or tree inside a node is held by
# each GPU's NVLink, where the profile's rings reach the measured bus bandwidth
# its NVLink efficiency comes from, so the cap is a factor of 87.7 over that.
# Across nodes the caps (39 GB/s and less) are far above what LL reaches on
# the NICs, so they are left out.
LL_MAX_BUSBW_ONE_NODE_GB = 87.7
# And it caps what one channel carries (perChMaxRingLL128Bws, perChMaxTreeBws,
# perChMaxTreeLL128Bws), GB/s by GPU generation; the column for more than two
# nodes, where NCCL's channels are one per NIC at the network's speed, as the
# simulator's are. Tree LL and LL128 are refined after the tree cap (/3.8,
# x120/128), so their caps are the tree's scaled so, and no more than LL128's
# own.
CHANNEL_CAPS_GB = {"ampere": {"ring_ll128": 20.0, "tree": 17.8, "tree_ll128": 20.0},
                   "hopper": {"ring_ll128": 36.7, "tree": 36.0, "tree_ll128": 29.0}}


def protocol_entry(algorithm, protocol, message_overhead_seconds=None, multi_node_step_floor_seconds=None):
    entry = {
        "base_latency_seconds": round(BASE_US[algorithm][protocol] * 1e-6, 12),
        "hop_latency_seconds": {k: round(v * 1e-6, 12) for k, v in HOP_US[algorithm][protocol].items()},
        "bandwidth_factor": round(BANDWIDTH_FACTOR[algorithm][protocol], 6),
    }
    if message_overhead_seconds is not None:
        entry["message_overhead_seconds"] = message_overhead_seconds
    if multi_node_step_floor_seconds is not None:
        entry["multi_node_step_floor_seconds"] = round(multi_node_step_floor_seconds, 12)
    return entry


# "Inter-node rings still have to launch nsteps * net overhead"
# (ncclTopoTuneModel): once a ring of all-reduce, all-gather or reduce-scatter
# spans nodes, every step, NVLink steps included, costs at least getNetOverhead,
# three times it for Simple. Broadcast and reduce rings are not floored.
NET_OVERHEAD_STEPS = {"ll": 1, "ll128": 1, "simple": 3}


# "Trees are not perfectly sticking to the model for medium sizes" (tuning.cc,
# treeCorrectionFactor): NCCL scales a tree's bandwidth by these factors for
# buffers of 64 B x 2^i up to twice that, i = 0..22 (below 64 B the first
# holds, from 512 MiB on none).
TREE_CORRECTION = {"ll": [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
                          1.0, 1.0, 1.0, 1.0],
                   "ll128": [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
                             .9, .9, 1.0, 1.0],
                   "simple": [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
                              .8, .9, .9]}


def tree_correction(protocol):
    steps = [{"from_bytes": 64 * 2 ** i, "factor": f} for i, f in enumerate(TREE_CORRECTION[protocol])]
    return steps + [{"from_bytes": 64 * 2 ** len(TREE_CORRECTION[protocol]), "factor": 1.0}]


# "Plateau effect of ring" (ncclTopoGetAlgoTime): a Simple ring all-reduce
# across nodes takes 1.4x its model latency on Ampere and later GPUs (1.9x
# before) once the call carries 64 bytes or more per rank and channel.
RING_PLATEAU = {"latency_factor": 1.4, "from_bytes_per_rank_and_channel": 64}


# NVLS and NVLS tree (NVLink SHARP, NVSwitch 3), Simple protocol only. The
# latencies are NCCL's tuning model: no base latency, 23 us per NVLink step,
# 18 us (NVLS) and 14 us (NVLS tree) per network step. The bandwidth factor is
# measured: NVLS moves S (n+1)/n per GPU and direction over NVLink
# (sim/collectives/nvls.h), so an NVLS busbw B on n GPUs whose rings reach R
# (the NVLink efficiency's own figure) means a factor B / (2 (n-1)/(n+1) R):
# what the switch's reductions and multicasts cost. NVLS tree keeps it on its
# network hops too, as NCCL's model scales both parts by the same 5/6.
NVLS_HOP_US = {"nvls": {"nvlink": 23.0, "pcie": 0.0, "network": 18.0},
               "nvls_tree": {"nvlink": 23.0, "pcie": 0.0, "network": 14.0}}


# NVLS inside one node as NCCL runs it: NCCL's chunk sizes and 16 channels on
# SM90 (transport/nvls.cc NVLS_NCHANNELS_SM90), with a pipeline fill, a
# per-chunk overhead and a base latency fitted by `shardsim calib fit` to one
# public series (records 199-218) and checked on two others, as
# fit_nvls_pipeline.py runs it; its output:
#   fit on stas00-h200-8gpu: base_latency_seconds 8.80 us, fill_chunks 2.62, chunk_overhead_seconds 1.040 us
#   stas00-h200-8gpu 15 sizes 1 MiB - 16 GiB: geomean 0.992, worst 1.084
#   azure-h200-8gpu  14 sizes 1 MiB - 8 GiB:  geomean 1.019, worst 1.315 (1 MiB: the VM's latency floor)
#   azure-h100-8gpu  14 sizes 1 MiB - 8 GiB:  geomean 1.054, worst 1.590 (1 MiB: the same)
# NVLS tree keeps the tuning model's line: its only public series (AWS p5,
# EFA) has no second machine to check a fit on.
NVLS_CHUNK_PIPELINE = {"channels": 16, "base_latency_seconds": 8.80e-6, "fill_chunks": 2.62,
                       "chunk_overhead_seconds": 1.04e-6}
NVLS_CHUNK_PIPELINE_SOURCE = (
    "; chunk_pipeline: NCCL's NVLS chunking (enqueue.cc calcCollChunking, transport/nvls.cc NVLS_NCHANNELS_SM90 16 "
    "and NCCL_NVLS_CHUNKSIZE 128 KiB, at NVIDIA/nccl 5067397c), its fill, per-chunk overhead and base latency fitted "
    "by shardsim calib fit (calib/profiles/fit_nvls_pipeline.py) on records 199-218 (stas00, 8x H200, NCCL 2.30.7; in-sample geomean "
    "0.992) and checked on records 176-198 (Azure ND H200 v5: 1.019) and Azure ND H100 v5 (1.054); the choice "
    "between algorithms still uses the tuning model's latencies above, as NCCL's does")


def nvls_algorithms(nvls_busbw, ring_busbw, gpus, source):
    factor = nvls_busbw / (2.0 * (gpus - 1) / (gpus + 1) * ring_busbw)
    entries = {}
    for algorithm, hops in NVLS_HOP_US.items():
        entries[algorithm] = {
            "source": (NCCL_TUNING + f" ({algorithm} row, Simple only); bandwidth_factor {factor:.4f} = " + source +
                       f" / (2 x {gpus - 1}/{gpus + 1} x ring {ring_busbw} GB/s)" +
                       (NVLS_CHUNK_PIPELINE_SOURCE if algorithm == "nvls" else "")),
            "simple": {"base_latency_seconds": 0.0,
                       "hop_latency_seconds": {k: round(v * 1e-6, 12) for k, v in hops.items()},
                       "bandwidth_factor": round(factor, 6)},
        }
        if algorithm == "nvls":
            entries[algorithm]["simple"]["chunk_pipeline"] = dict(NVLS_CHUNK_PIPELINE)
    return entries


def by_group_shape(entries, ll_cap, third_in_one_node, note):
    """Ring protocol entries with NCCL's refinements by group shape: LL within
    one node at busBw/3 (or /4 for all-reduce and reduce) and at most ll_cap;
    `note` cites them in the source."""
    shaped = {**entries, "source": entries["source"] + note,
              "ll128": {**entries["ll128"], "one_rank_per_node_bandwidth_factor": ONE_RANK_PER_NODE_RING_LL128}}
    single_node_ll = min(SINGLE_NODE_RING_LL if third_in_one_node else BANDWIDTH_FACTOR["ring"]["ll"], ll_cap)
    if single_node_ll != BANDWIDTH_FACTOR["ring"]["ll"]:
        shaped["ll"] = {**entries["ll"], "single_node_bandwidth_factor": round(single_node_ll, 6)}
    return shaped


def collectives(net_post_overhead_seconds, cpu_note, nvlink_busbw_gb, generation, nvls=None):
    ll_cap = LL_MAX_BUSBW_ONE_NODE_GB / nvlink_busbw_gb
    caps = CHANNEL_CAPS_GB[generation]
    shape_note = (f"; single_node and one_rank_per_node factors: its refinements by group shape, LL inside one "
                  f"node at most llMaxBw {LL_MAX_BUSBW_ONE_NODE_GB} GB/s over this profile's NVLink ring bus "
                  f"bandwidth {nvlink_busbw_gb} GB/s; channel_cap_bytes_per_second: its per-channel caps for "
                  f"{generation.capitalize()} beyond two nodes")
    ring = {"source": (NCCL_TUNING + " (ring row); multi_node_step_floor_seconds: its network post overhead "
                       "(getNetOverhead) for " + cpu_note + ", 3x for Simple")}
    ring.update({p: protocol_entry("ring", p,
                                   multi_node_step_floor_seconds=NET_OVERHEAD_STEPS[p] * net_post_overhead_seconds)
                 for p in ("ll", "ll128", "simple")})
    ring["ll128"]["channel_cap_bytes_per_second"] = round(caps["ring_ll128"] * 1e9)
    ring_all_reduce = by_group_shape(ring, ll_cap, False, shape_note)
    ring_all_reduce["source"] += ("; multi_node_plateau: its plateau effect of ring (ncclTopoGetAlgoTime), Simple "
                                  "on Ampere and later")
    ring_all_reduce["simple"] = {**ring["simple"], "multi_node_plateau": RING_PLATEAU}
    gather_ring = by_group_shape(ring, ll_cap, True, shape_note)  # all-gather and reduce-scatter
    chain = {"source": NCCL_TUNING + " (ring row)"}
    chain.update({p: protocol_entry("ring", p) for p in ("ll", "ll128", "simple")})
    chain["ll128"]["channel_cap_bytes_per_second"] = round(caps["ring_ll128"] * 1e9)
    tree = {"source": NCCL_TUNING + " (tree row); bandwidth_correction: its treeCorrectionFactor"}
    tree.update({p: {**protocol_entry("tree", p), "bandwidth_correction": tree_correction(p)}
                 for p in ("ll", "ll128", "simple")})
    tree["ll128"]["single_node_bandwidth_factor"] = round(SINGLE_NODE_TREE_LL128, 6)
    tree_caps_gb = {"simple": caps["tree"], "ll": caps["tree"] / 3.8,
                    "ll128": min(caps["tree"] * 120 / 128, caps["tree_ll128"])}
    for protocol, cap_gb in tree_caps_gb.items():
        tree[protocol]["channel_cap_bytes_per_second"] = round(cap_gb * 1e9)
    if ll_cap < BANDWIDTH_FACTOR["tree"]["ll"]:
        tree["ll"]["single_node_bandwidth_factor"] = round(ll_cap, 6)
    tree["source"] += shape_note
    # NCCL's model has no point-to-point entry; its ring model for one step
    # stands in, plus NCCL's network post overhead per message (getNetOverhead).
    direct = {"source": (NCCL_TUNING + ": no point-to-point entry exists, so one ring step (LL, Simple) "
                         "stands in; message_overhead_seconds is NCCL's getNetOverhead for " + cpu_note)}
    direct.update({p: protocol_entry("ring", p, net_post_overhead_seconds) for p in ("ll", "simple")})
    return {
        "all_reduce": {"ring": ring_all_reduce, "tree": tree, **(nvls or {})},
        "all_gather": {"ring": gather_ring},
        "reduce_scatter": {"ring": gather_ring},
        "broadcast": {"ring": by_group_shape(chain, ll_cap, True, shape_note)},
        "reduce": {"ring": by_group_shape(chain, ll_cap, False, shape_note)},
        "all_to_all": {"direct": direct},
        "send_recv": {"direct": direct},
    }


def link(efficiency, source):
    return {"bandwidth_efficiency": round(efficiency, 4), "source": source}


A100_NVLINK = link(231.58 / 300.0,
                   "record 174: nccl-tests all_reduce, 8x A100-SXM4-80GB (Azure ND A100 v4, NCCL 2.18.5), "
                   "8 GiB in-place busbw 231.58 GB/s over 300 GB/s per direction (record 9: 600 GB/s bidirectional)")
A100_PCIE = link(26.28 / 32.0,
                 "record 72: nvbandwidth host_to_device 26.28 GB/s on A100-SXM4-80GB over PCIe Gen4 x16 "
                 "32 GB/s per direction (record 10)")
HDR_NETWORK = link(96.0 / 100.0,
                   "record 247: nccl-tests all_reduce on A100 nodes with 4x HDR 200 Gb/s, peak busbw ~96 GB/s "
                   "over the 100 GB/s the four NICs carry (user report, NVIDIA/nccl-tests #119)")
NDR_NETWORK = link(47.5 / 50.0,
                   "record 37: NVIDIA (nccl-tests #290, #267): 46-49 GB/s per ConnectX-7 NIC at NDR 400 Gb/s; "
                   "midpoint 47.5 over 50 GB/s")
GEN5_PCIE = link(52.0 / 64.0,
                 "record 75: nvbandwidth host_to_device 52 GB/s on H200 (Azure ND H200 v5) over PCIe Gen5 x16 "
                 "64 GB/s per direction (record 22)")

PROFILES = {
    "a100": {
        "gpu": "A100-SXM4-80GB",
        "links": {"nvlink": A100_NVLINK, "pcie": A100_PCIE, "network": HDR_NETWORK},
        "collectives": collectives(2e-6, "AMD CPUs (2 us): DGX A100 has 2x AMD EPYC 7742 (record 38)", 231.58,
                                   "ampere"),
    },
    "a800": {
        "gpu": "A800-SXM4-80GB",
        "links": {
            "nvlink": link(231.58 / 300.0,
                           "no A800 measurement in the records: A100's NVLink3 efficiency (record 174), since "
                           "A800 is the same GPU with fewer NVLinks (record 12, third-party)"),
            "pcie": A100_PCIE,
            "network": HDR_NETWORK,
        },
        "collectives": collectives(1e-6, "a CPU that is not AMD (1 us): the A800 cluster's CPU is not "
                                         "recorded, 1 us is NCCL's default",
                                   round(231.58 / 300.0 * 200.0, 2), "ampere"),
    },
    "h100": {
        "gpu": "H100-SXM5-80GB",
        "links": {
            "nvlink": link(370.0 / 450.0,
                           "record 240: NVIDIA (nccl-tests #212): 'NCCL can get an effective NVLink bandwidth "
                           "of 370GB/s' on H100 for rings, over 450 GB/s per direction (record 21)"),
            "pcie": GEN5_PCIE,
            "network": NDR_NETWORK,
        },
        "collectives": collectives(1e-6, "Intel CPUs (1 us): DGX H100 has 2x Xeon Platinum 8480C (record 40)", 370.0,
                                   "hopper", nvls_algorithms(480.0, 370.0, 8,
                                                   "record 241: NVIDIA (nccl-tests #212), 8x H100 NVLS all_reduce "
                                                   "expected busbw 480 GB/s, with record 240's ring 370 GB/s")),
    },
    "h200": {
        "gpu": "H200-SXM-141GB",
        "links": {
            "nvlink": link(367.61 / 450.0,
                           "record 239: all_reduce with NVLS disabled, 8x H200 SXM, 16 GiB busbw 367.61 GB/s, "
                           "over 450 GB/s per direction (record 29: 900 GB/s bidirectional)"),
            "pcie": GEN5_PCIE,
            "network": NDR_NETWORK,
        },
        "collectives": collectives(1e-6, "a CPU that is not AMD (1 us): NCCL's default", 367.61,
                                   "hopper", nvls_algorithms(482.26, 367.61, 8,
                                                   "record 238: 8x H200 all_reduce with NVLS at 16 GiB, busbw "
                                                   "482.26 GB/s, beside record 239's 367.61 GB/s with NVLS off on "
                                                   "the same machine")),
    },
}


# --- Compute -----------------------------------------------------------------
# GEMM efficiency is achieved over peak FLOP/s, tabulated by the GEMM's FLOP
# count 2mnk (the simulator interpolates on log FLOPs and clamps at the ends).
# Only square shapes are used: a skinny GEMM is limited by its bytes, which the
# roofline's HBM term models, not by a lower compute efficiency.

def gemm_points(records, peak_tflops):
    """records: (record number, m, n, k, achieved TFLOPS)."""
    return [{"flops": 2.0 * m * n * k, "efficiency": round(tflops / peak_tflops, 4), "record": r}
            for r, m, n, k, tflops in records]


A100_FP16_GEMM = [(45, 1024, 1024, 1024, 119.4), (46, 2048, 2048, 2048, 221.8), (47, 4096, 4096, 4096, 228.0),
                  (48, 8192, 8192, 8192, 253.7), (49, 16384, 16384, 16384, 256.5)]
H200_FP8_GEMM = [(53, 1024, 1024, 1024, 290.8), (54, 2048, 2048, 2048, 1013.4), (55, 4096, 4096, 4096, 1249.1),
                 (56, 8192, 8192, 8192, 1300.6), (57, 16384, 16384, 16384, 1366.3),
                 (58, 32768, 32768, 32768, 1349.5)]


# Burst against sustained. A GEMM benchmark that times each shape for a
# fraction of a second sees the boost clock: mamf-finder's MAMF, which records
# 78-83 are, is "a mean of 100 iterations after 50 warmup iterations"
# (stas00/ml-engineering compute/accelerator/README.md, the table's heading),
# and from its v4 "the median of a shape's 5 fastest iterations that ran at
# the boost clock" (benchmarks/mamf-finder.py at 15de338, docstring), beside a
# sustained figure (MSMF, "the highest throughput a shape holds steady over a
# 2s window under full load (matches sustained training throughput)") that no
# record holds. Azure's cuBLASLt sweeps (records 45-58) are sustained: each
# shape is timed over 1,000 calls after 10,000 warm-up calls on random data
# (Azure/AI-benchmarking-guide Benchmarks/NVIDIA/GEMMCublasLt.py at cd84f36a,
# i=1000, w=10000), seconds to minutes of back-to-back GEMMs per shape.
#
# Ampere: records 45-49 are sustained already, so they are the curve; the
# burst curve lifts it to MAMF's A100 plateau (record 78, 271.2 of 312) with
# the same fall-off. Hopper: no public bf16 sweep is sustained; the
# project's own probe of an H200 is (calib/probe/probe_options.h: each shape
# run back to back for 0.15 s, then 20 ms of calls timed), twice, on two
# machines; H100 has the same GH100 compute, clocks and 700 W limit
# (records 13, 23, 30, 31), so its curve is the same. The burst curve is
# MAMF's H100 plateau (record 80, 794.5 of 989) with the fall-off of the fp8
# sweep (records 53-58). fp8 stays Azure's sustained sweep; the probe's fp8 is
# 6-14 % below it from 4096^3 up, likely cuBLASLt's fast-accumulation mode,
# which the probe does not set and superbench's cuBLASLt benchmark may.
HERE = pathlib.Path(__file__).resolve().parent
H200_PROBE_RUNS = [HERE / "measured" / "h200-1gpu-raw.json",
                   HERE.parent.parent / "results" / "executor_h200" / "repeat" / "h200-1gpu-raw.json"]
H200_PROBE_NOTE = ("shardsim-probe, sustained load (calib/probe/probe_options.h), on two H200 SXM machines "
                   "(calib/profiles/measured/h200-1gpu-raw.json, results/executor_h200/repeat/h200-1gpu-raw.json; "
                   "machines in results/executor_h200/machine.txt and repeat/machine.txt): the median TFLOP/s of "
                   "each square shape from 1024^3 over both runs")


def probe_square_points(dtype, peak_tflops):
    """The probe's square GEMMs from 1024^3 up, median over both runs per size.
    Smaller squares are launch-bound: the curve clamps to its first point."""
    rates = {}
    for run in H200_PROBE_RUNS:
        for g in json.loads(run.read_text())["gemm"]:
            if g["dtype"] == dtype and g["batch"] == 1 and g["m"] == g["n"] == g["k"] and g["m"] >= 1024:
                rates.setdefault(g["m"], []).append(2.0 * g["m"] ** 3 / g["seconds"] / 1e12)
    points = []
    for size in sorted(rates):
        values = sorted(rates[size])
        middle = len(values) // 2
        median = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
        points.append({"flops": 2.0 * size ** 3, "efficiency": round(median / peak_tflops, 4)})
    return points


def burst_points(records, plateau_tflops, peak_tflops):
    """A sustained sweep's fall-off, lifted to a burst plateau."""
    best = max(t for *_, t in records)
    return [{"flops": 2.0 * m * n * k, "efficiency": round(plateau_tflops / peak_tflops * t / best, 4), "record": r}
            for r, m, n, k, t in records]


AMPERE_ATTENTION = ("FlashAttention-2 (Dao 2023, arXiv:2307.08691, abstract): 50-73% of the theoretical "
                    "maximum FLOP/s on A100; midpoint 0.615")
HOPPER_ATTENTION = ("FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608, abstract): FlashAttention-2 reaches "
                    "35% of H100 peak and FlashAttention-3 is 1.5-2.0x faster; midpoint 1.75 x 35% = 0.61")
# The generations a training config can name (attention_kernel). The default
# above is the newest the GPU runs; FlashAttention-3 needs Hopper, so Ampere
# lists FlashAttention-2 alone.
# FlashAttention-2 on Hopper is measured, forward and backward together, at a
# training shape, by Azure's AI benchmarking guide (not in shared/data; cited
# by file and commit). It agrees with the 35 % FlashAttention-3's abstract
# gives.
AZURE_GUIDE = "Azure/AI-benchmarking-guide"
AZURE_FLASH_ATTENTION = ("'Flash Attention 2.0' table: flash-attention's benchmark_flash_attention.py, fwd + bwd, "
                         "head dim 128, batch 2, sequence 8192")
AMPERE_ATTENTION_KERNELS = {"flash_attention_2": {"efficiency": 0.615, "source": AMPERE_ATTENTION}}


def hopper_attention_kernels(results_file, flash_attention_2_tflops):
    return {
        "flash_attention_2": {"efficiency": round(flash_attention_2_tflops / 989.0, 4),
                              "source": f"{AZURE_GUIDE} {results_file}, {AZURE_FLASH_ATTENTION}: "
                                        f"{flash_attention_2_tflops} TFLOPS of 989 (records 13, 31); FlashAttention-3's "
                                        "abstract (Shah et al. 2024) gives 35%"},
        "flash_attention_3": {"efficiency": 0.61, "source": HOPPER_ATTENTION},
    }
# Compute slows while NCCL runs beside it because the collective's kernels take
# SMs and HBM bandwidth from it. No record in shared/data measures this, so the
# figure is the published cross-GPU average; shardsim-probe's interference
# measurement replaces it for a probed machine.
INTERFERENCE_SLOWDOWN = 0.189
OVERHEADS_SOURCE = ("interference: Lee et al. 2025, 'Characterizing Compute-Communication Overlap in "
                    "GPU-Accelerated Distributed Deep Learning' (arXiv:2507.03114, abstract): overlapping "
                    "communication slows computation by 18.9% on average (at most 40.0%), GPT and LLaMA "
                    "training on 4x A100, H100, MI250 and MI210; kernel launch: no public figure in "
                    "shared/data/public_hardware.json, 0 until shardsim-probe measures it (calib issue 4)")


AMPERE_SUSTAINED = ("sustained: each shape 1,000 calls after 10,000 warm-up calls on random data "
                    "(Azure/AI-benchmarking-guide GEMMCublasLt.py at cd84f36a)")
AMPERE_BURST = ("burst: records 45-49's fall-off lifted to mamf-finder's A100 SXM plateau, record 78, "
                "271.2 of 312 TFLOPS (100 calls after 50 warm-ups per shape)")


def ampere_compute(hbm_record_note, burst=False):
    if burst:
        a100_fp16, curve = burst_points(A100_FP16_GEMM, 271.2, 312.0), AMPERE_BURST
    else:
        a100_fp16, curve = gemm_points(A100_FP16_GEMM, 312.0), AMPERE_SUSTAINED
    return {
        "dtypes": {
            "bf16": {"peak_flops_per_second": 312e12, "gemm_efficiency": a100_fp16,
                     "source": "record 0: A100 dense bf16 312 TFLOPS; efficiency curve from cuBLASLt fp16 "
                               "(records 45-49, Azure ND A100 v4), fp16 and bf16 having the same peak (record 1); "
                               + curve},
            "fp16": {"peak_flops_per_second": 312e12, "gemm_efficiency": a100_fp16,
                     "source": "record 1: A100 dense fp16 312 TFLOPS; records 45-49 cuBLASLt fp16 GEMMs; " + curve},
        },
        "attention_efficiency": 0.615,
        "attention_source": AMPERE_ATTENTION,
        "attention_kernels": AMPERE_ATTENTION_KERNELS,
        "hbm_bytes_per_second": 2039e9,
        "hbm_efficiency": round(1.70 / 2.039, 4),
        "hbm_source": "record 7: A100-SXM4-80GB HBM2e 2039 GB/s; record 65: STREAM triad 1.70 TB/s" + hbm_record_note,
        "kernel_launch_seconds": 0.0,
        "interference_slowdown": INTERFERENCE_SLOWDOWN,
        "overheads_source": OVERHEADS_SOURCE,
    }


def hopper_compute(hbm_bytes_per_second, hbm_efficiency, hbm_source, attention_kernels, burst=False):
    fp8 = gemm_points(H200_FP8_GEMM, 1979.0)
    if burst:
        bf16 = fp16 = burst_points(H200_FP8_GEMM, 794.5, 989.0)
        bf16_source = ("records 13, 31: dense bf16 989 TFLOPS; burst efficiency: record 80 plateau (mamf-finder, "
                       "100 calls after 50 warm-ups per shape) with the fall-off of records 53-58 "
                       "(see make_datasheet_profiles.py)")
        fp16_source = "record 14: dense fp16 989 TFLOPS; efficiency as bf16"
    else:
        bf16, fp16 = probe_square_points("bf16", 989.0), probe_square_points("fp16", 989.0)
        bf16_source = "records 13, 31: dense bf16 989 TFLOPS; sustained efficiency: " + H200_PROBE_NOTE
        fp16_source = "record 14: dense fp16 989 TFLOPS; sustained efficiency: " + H200_PROBE_NOTE
    return {
        "dtypes": {
            "bf16": {"peak_flops_per_second": 989e12, "gemm_efficiency": bf16, "source": bf16_source},
            "fp16": {"peak_flops_per_second": 989e12, "gemm_efficiency": fp16, "source": fp16_source},
            "fp8": {"peak_flops_per_second": 1979e12, "gemm_efficiency": fp8,
                    "source": "record 16: dense fp8 1979 TFLOPS; records 53-58: cuBLASLt fp8 GEMMs on H200 "
                              "(Azure ND H200 v5), same compute as H100 (record 31)"},
        },
        "attention_efficiency": 0.61,
        "attention_source": HOPPER_ATTENTION,
        "attention_kernels": attention_kernels,
        "hbm_bytes_per_second": hbm_bytes_per_second,
        "hbm_efficiency": hbm_efficiency,
        "hbm_source": hbm_source,
        "kernel_launch_seconds": 0.0,
        "interference_slowdown": INTERFERENCE_SLOWDOWN,
        "overheads_source": OVERHEADS_SOURCE,
    }


def compute(name, burst):
    if name in ("a100", "a800"):
        note = "" if name == "a100" else "; A800 compute and HBM as A100 (record 12 notes)"
        return ampere_compute(note, burst)
    if name == "h100":
        return hopper_compute(3350e9, round(2.97 / 3.35, 4),
                              "record 19: H100-SXM5 HBM3 3350 GB/s; STREAM triad 2.97 TB/s on ND H100 v5 "
                              f"({AZURE_GUIDE} 'Azure Results/ND_H100_v5_results.md' at f350e7e6, not in shared/data)",
                              hopper_attention_kernels("'Azure Results/ND_H100_v5_results.md' at f350e7e6", 327.9),
                              burst)
    return hopper_compute(4800e9, round(4.15 / 4.8, 4),
                          "record 28: H200 HBM3e 4800 GB/s; record 70: STREAM triad 4.15 TB/s",
                          hopper_attention_kernels("Azure_Results/ND_H200_v5_results.md at 7f20e5fa", 329.3), burst)


def main():
    for name, body in PROFILES.items():
        for burst in (False, True):
            profile_name = name + ("-burst" if burst else "")
            profile = {
                "name": profile_name,
                "gpu": body["gpu"],
                "links": body["links"],
                "collectives": body["collectives"],
                "compute": compute(name, burst),
                "sources": [
                    "Datasheet profile generated by calib/profiles/make_datasheet_profiles.py from "
                    "shared/data/public_hardware.json and NVIDIA's NCCL tuning model; see each entry's source.",
                    "all_reduce lists nvls and nvls_tree (NVLink SHARP) only where the GPU's NVSwitch has it: "
                    "h100 and h200.",
                    ("GEMMs at burst speed (a lone call at the boost clock), for comparison: a training step "
                     "sustains the speed of the profile without -burst" if burst else
                     "GEMMs at the speed a training step sustains at the GPU's power limit; the -burst profile "
                     "beside this one has the boost-clock speed of a lone call"),
                ],
            }
            (HERE / f"{profile_name}.json").write_text(json.dumps(profile, indent=2) + "\n")


if __name__ == "__main__":
    main()
