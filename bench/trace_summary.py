#!/usr/bin/env python3
"""Side-by-side summary of profiler traces of one training step (chrome-trace JSON, as Kineto
writes it: `train_step_bench --profile T.json`, `hf_bench.py step --profile T.json`).

  trace_summary.py LABEL=TRACE.json [LABEL=TRACE.json ...] [--top 15]

Per trace: the step's wall span; host side: dispatched aten ops (top level and all), kernel
launches, host waits on the device (synchronize calls and their time); device side: kernels,
their busy time (overlaps counted once) and the idle fraction of the span (a large one means
the host cannot launch work as fast as the GPU runs it), kernel time by class (GEMM,
attention, elementwise, reductions, softmax, optimizer, copies) and the longest kernels by
name. Standard library only: runs on the GPU machine's python or here.
"""
import argparse
import collections
import json
import re

CLASSES = [  # first match wins; names as CUDA kernels are mangled or named by cuBLAS / ATen
    ("gemm", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|s\d+gemm|splitK", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("optimizer", re.compile(r"multi_tensor_apply|fused_adam|adamw|foreach|FusedOptimizer", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("reduction", re.compile(r"reduce|norm_kernel|sum_kernel|Reduce", re.I)),
    ("copy/cast", re.compile(r"copy|cast|memcpy|CatArray|index|gather|scatter|fill", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise", re.I)),
]
SYNC = re.compile(r"Synchronize|cudaMemcpy(?!Async)|cudaStreamWaitEvent|cudaEventSynchronize")
LAUNCH = re.compile(r"LaunchKernel|cudaLaunch|cuLaunch")


def classify(name):
    for c, rx in CLASSES:
        if rx.search(name):
            return c
    return "other"


def union_us(intervals):
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def top_level(events):
    """aten ops not nested in another aten op on the same thread (what the caller dispatched)."""
    n, by_tid = 0, collections.defaultdict(list)
    for e in events:
        by_tid[e.get("tid")].append(e)
    for es in by_tid.values():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        end = float("-inf")
        for e in es:
            if e["ts"] >= end:
                n += 1
                end = e["ts"] + e["dur"]
    return n


def summarize(path, top):
    with open(path) as f:
        d = json.load(f)
    ev = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("ph") == "X" and "dur" in e]
    cat = collections.defaultdict(list)
    for e in ev:
        cat[e.get("cat", "")].append(e)
    timed = [e for e in ev if e.get("cat") not in ("Trace", "")]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e["dur"] for e in timed) - t0
    aten = [e for e in cat["cpu_op"] if e["name"].startswith("aten::")]
    runtime = cat["cuda_runtime"] + cat["cuda_driver"]
    kernels = cat["kernel"]
    copies = cat["gpu_memcpy"] + cat["gpu_memset"]
    dev = kernels + copies
    busy = union_us([(e["ts"], e["ts"] + e["dur"]) for e in dev])
    by_class, by_name = collections.Counter(), collections.defaultdict(lambda: [0, 0.0])
    for e in kernels:
        by_class[classify(e["name"])] += e["dur"]
        by_name[e["name"]][0] += 1
        by_name[e["name"]][1] += e["dur"]
    for e in copies:
        by_class["copy/cast"] += e["dur"]
    waits = [e for e in runtime if SYNC.search(e["name"])]
    return {
        "span_ms": span / 1e3,
        "aten_top": top_level(aten),
        "aten_all": len(aten),
        "launches": sum(1 for e in runtime if LAUNCH.search(e["name"])),
        "waits": len(waits),
        "wait_ms": sum(e["dur"] for e in waits) / 1e3,
        "kernels": len(kernels),
        "copies": len(copies),
        "busy_ms": busy / 1e3,
        "idle": 1 - busy / span if dev else None,
        "classes": {k: v / 1e3 for k, v in by_class.items()},
        "top": sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top],
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("traces", nargs="+", help="LABEL=TRACE.json")
    p.add_argument("--top", type=int, default=15)
    a = p.parse_args()
    runs = []
    for t in a.traces:
        label, _, path = t.partition("=")
        if not path:
            p.error(f"{t}: expected LABEL=TRACE.json")
        runs.append((label, summarize(path, a.top)))
    w = max(12, *(len(lb) for lb, _ in runs))
    rows = [("step span (ms, profiled)", "span_ms", "{:.1f}"), ("aten ops dispatched (top level)", "aten_top", "{}"),
            ("aten ops (all, nested)", "aten_all", "{}"), ("kernel launches", "launches", "{}"),
            ("host waits on the device", "waits", "{}"), ("  their time (ms)", "wait_ms", "{:.1f}"),
            ("GPU kernels", "kernels", "{}"), ("GPU copies / memsets", "copies", "{}"),
            ("GPU busy (ms)", "busy_ms", "{:.1f}"), ("GPU idle fraction of the span", "idle", "{:.2f}")]
    print(f"{'':34}" + "".join(f"{lb:>{w}}" for lb, _ in runs))
    for title, key, fmt in rows:
        print(f"{title:34}" + "".join(f"{('-' if s[key] is None else fmt.format(s[key])):>{w}}" for _, s in runs))
    classes = sorted({c for _, s in runs for c in s["classes"]}, key=lambda c: -max(s["classes"].get(c, 0) for _, s in runs))
    if classes:
        print("GPU time by kernel class (ms)")
        for c in classes:
            print(f"  {c:32}" + "".join(f"{runs[i][1]['classes'].get(c, 0):>{w}.2f}" for i in range(len(runs))))
    for label, s in runs:
        if s["top"]:
            print(f"{label}: longest kernels (count, ms)")
            for name, (n, us) in s["top"]:
                print(f"  {n:6d} {us / 1e3:8.2f}  {name[:110]}")


if __name__ == "__main__":
    main()
