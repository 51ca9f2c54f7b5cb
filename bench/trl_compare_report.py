#!/usr/bin/env python3
"""Chart and table of bench/trl_compare.sh: train reward and held-out accuracy of each arm
against samples seen and against wall time, every seed drawn, one colour per arm.

Reads OUT/<arm>-s<seed>/metrics.jsonl (trl, train) or status.json (run<W>: the bucket's versions
and evaluations: samples = the samples folded into versions up to that one; time = the version's
publication since version 0). Writes OUT/compare.svg and OUT/compare.md (the table). Standard
library only.
Usage: bench/trl_compare_report.py --out DIR --recipe R --seeds "1 2 3" --arms "trl train run2 run4" --steps N
"""
import argparse
import json
import math
import os
import statistics

COLORS = {"trl": "#d1242f", "train": "#0969da", "run2": "#1a7f37", "run4": "#8250df"}
NAMES = {"trl": "TRL GRPOTrainer + PEFT", "train": "bucketrl train (1 process)",
         "run2": "bucketrl run, 2 workers", "run4": "bucketrl run, 4 workers"}


def load(out, arm, seed):
    """(rewards, evals): rewards [(samples, time_s, reward)], evals [(samples, time_s, accuracy)]."""
    d = os.path.join(out, f"{arm}-s{seed}")
    rewards, evals = [], []
    if arm.startswith("run"):
        st = json.load(open(os.path.join(d, "status.json")))
        vs = sorted(st["versions"], key=lambda v: v["version"])
        t0 = vs[0]["created_ms"]
        seen, at = 0, {}
        for v in vs:
            seen += v["samples"]
            at[v["version"]] = (seen, (v["created_ms"] - t0) / 1000.0)
            if v["version"] > 0 and v["updates"] > 0:
                rewards.append((seen, at[v["version"]][1], v["reward_mean"]))
        for e in st["evals"]:
            if e["version"] in at:
                evals.append((*at[e["version"]], e["accuracy"]))
    else:
        # Samples by step: an evaluation after step s has seen s steps' samples (TRL logs the
        # step's reward after its evaluation callback, bucketrl before).
        lines = [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl"))]
        per_step = next((j["samples"] for j in lines if "reward" in j), 0)
        for j in lines:
            if "reward" in j:
                rewards.append((j["step"] * per_step, j["time_s"], j["reward"]))
            elif "eval_accuracy" in j:
                evals.append((j["step"] * per_step, j.get("time_s", 0.0), j["eval_accuracy"]))
    return rewards, evals


def smooth(points, window):
    out = []
    for i in range(len(points)):
        w = points[max(0, i - window + 1): i + 1]
        out.append((points[i][0], points[i][1], sum(p[2] for p in w) / len(w)))
    return out


def panel(x0, y0, w, h, title, xlabel, series, xmax):
    """series: [(color, [(x, y)])]; y in [0, 1]."""
    s = [f'<g transform="translate({x0},{y0})">',
         f'<text x="{w / 2}" y="-8" text-anchor="middle" font-size="13" font-weight="600">{title}</text>',
         f'<rect x="0" y="0" width="{w}" height="{h}" fill="none" stroke="#999"/>']
    for t in range(0, 11, 2):
        y = h - h * t / 10
        s.append(f'<line x1="0" x2="{w}" y1="{y}" y2="{y}" stroke="#eee"/>')
        s.append(f'<text x="-6" y="{y + 4}" text-anchor="end" font-size="10">{t / 10:.1f}</text>')
    step = 10 ** math.floor(math.log10(max(xmax, 1e-9)))
    if xmax / step < 4:
        step /= 2
    x = 0.0
    while x <= xmax * 1.0001:
        px = w * x / xmax
        s.append(f'<line x1="{px}" x2="{px}" y1="0" y2="{h}" stroke="#eee"/>')
        label = f"{x:.0f}" if step >= 1 else f"{x:.1f}"
        s.append(f'<text x="{px}" y="{h + 14}" text-anchor="middle" font-size="10">{label}</text>')
        x += step
    s.append(f'<text x="{w / 2}" y="{h + 30}" text-anchor="middle" font-size="11">{xlabel}</text>')
    for color, pts in series:
        if len(pts) < 2:
            continue
        d = " ".join(f"{w * min(px, xmax) / xmax:.1f},{h - h * max(0.0, min(1.0, py)):.1f}" for px, py in pts)
        s.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="1.4" stroke-opacity="0.8"/>')
    s.append("</g>")
    return "\n".join(s)


def at_or_before(evals, samples):
    best = None
    for s, _, a in evals:
        if s <= samples:
            best = a
    return best


def fmt(values, digits=3):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--recipe", default="fast")
    ap.add_argument("--seeds", default="1 2 3")
    ap.add_argument("--arms", default="trl train run2 run4")
    ap.add_argument("--steps", type=int, required=True)
    a = ap.parse_args()
    seeds, arms = a.seeds.split(), a.arms.split()
    data = {(arm, s): load(a.out, arm, s) for arm in arms for s in seeds}
    smax = max((r[-1][0] for r, _ in data.values() if r), default=1)
    tmax = max((max([p[1] for p in r + e] or [0]) for r, e in data.values()), default=1)
    W, H, PW, PH = 1100, 760, 440, 250
    body = []
    panels = [("train reward (mean of 10 steps)", "samples seen", 0, 0, 0, smax),
              ("held-out accuracy (greedy)", "samples seen", 2, 0, 1, smax),
              ("train reward (mean of 10 steps)", "seconds of training", 0, 1, 0, tmax),
              ("held-out accuracy (greedy)", "seconds of training", 2, 1, 1, tmax)]
    for i, (title, xlabel, which, xi, row, xmax) in enumerate(panels):
        series = []
        for arm in arms:
            for s in seeds:
                rewards, evals = data[(arm, s)]
                pts = smooth(rewards, 10) if which == 0 else evals
                series.append((COLORS.get(arm, "#333"), [(p[xi], p[2]) for p in pts]))
        body.append(panel(70 + (PW + 110) * (i // 2), 60 + row * (PH + 90), PW, PH, title, xlabel, series, xmax))
    legend = [f'<g transform="translate(70,{H - 40})">']
    for i, arm in enumerate(arms):
        legend.append(f'<rect x="{i * 250}" y="0" width="14" height="4" fill="{COLORS.get(arm, "#333")}"/>'
                      f'<text x="{i * 250 + 20}" y="6" font-size="12">{NAMES.get(arm, arm)}</text>')
    legend.append("</g>")
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">\n'
           f'<rect width="{W}" height="{H}" fill="white"/>\n'
           f'<text x="{W / 2}" y="24" text-anchor="middle" font-size="15" font-weight="600">GRPO on the {a.recipe} '
           f'recipe: bucketrl vs TRL, seeds {", ".join(seeds)} (one line per seed)</text>\n'
           + "\n".join(body) + "\n" + "\n".join(legend) + "\n</svg>\n")
    open(os.path.join(a.out, "compare.svg"), "w").write(svg)

    # The table: held-out accuracy at a quarter, half and all of the samples; wall time.
    lines = ["| arm | held-out acc. at 1/4 of the samples | at 1/2 | at the end | "
             "first eval ≥ 0.9 at samples | seconds of training | samples/s |",
             "|---|---|---|---|---|---|---|"]
    for arm in arms:
        q, h, f, first, secs, rate = [], [], [], [], [], []
        for s in seeds:
            rewards, evals = data[(arm, s)]
            if not rewards:
                continue
            n = rewards[-1][0]
            q.append(at_or_before(evals, n / 4))
            h.append(at_or_before(evals, n / 2))
            f.append(evals[-1][2] if evals else None)
            first.append(next((e[0] for e in evals if e[2] >= 0.9), None))
            t = max(p[1] for p in rewards + evals)
            secs.append(t)
            rate.append(n / t if t > 0 else None)
        lines.append(f"| {NAMES.get(arm, arm)} | {fmt(q)} | {fmt(h)} | {fmt(f)} | {fmt(first, 0)} | {fmt(secs, 1)} | "
                     f"{fmt(rate, 0)} |")
    md = "\n".join(lines) + "\n"
    open(os.path.join(a.out, "compare.md"), "w").write(md)
    print(md)


if __name__ == "__main__":
    main()
