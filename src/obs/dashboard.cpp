#include "obs/dashboard.h"

namespace brl::obs {

namespace {
// The page polls "status" relative to its own URL, so it also works behind a path prefix.
constexpr std::string_view kHtml = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bucketrl proxy</title>
<style>
:root {
  --bg: #0f1419; --panel: #171d25; --panel2: #1d2530; --line: #2a3441; --text: #e6edf3;
  --muted: #8b98a7; --accent: #4cc2ff; --accent2: #a78bfa; --good: #3fb950; --warn: #d29922;
  --bad: #f85149; --idle: #6e7681;
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--text);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header { display: flex; align-items: center; gap: 18px; padding: 14px 24px; border-bottom: 1px solid var(--line);
  background: linear-gradient(90deg, #121a24, #151b2b); position: sticky; top: 0; z-index: 2; }
.logo { font-weight: 700; font-size: 18px; letter-spacing: .3px; }
.logo span { color: var(--accent); }
.meta { color: var(--muted); font-size: 13px; }
.meta b { color: var(--text); font-weight: 600; }
.conn { margin-left: auto; display: flex; align-items: center; gap: 8px; color: var(--muted); font-size: 13px; }
.dot { width: 9px; height: 9px; border-radius: 50%; background: var(--idle); box-shadow: 0 0 0 3px rgba(110,118,129,.2); }
.dot.live { background: var(--good); box-shadow: 0 0 0 3px rgba(63,185,80,.2); }
.dot.down { background: var(--bad); box-shadow: 0 0 0 3px rgba(248,81,73,.2); }
main { padding: 20px 24px 40px; max-width: 1500px; margin: 0 auto; }
.kpis { display: grid; grid-template-columns: repeat(auto-fit, minmax(160px, 1fr)); gap: 12px; margin-bottom: 18px; }
.kpi { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; }
.kpi .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .6px; }
.kpi .value { font-size: 24px; font-weight: 650; margin-top: 2px; font-variant-numeric: tabular-nums; }
.kpi .sub { color: var(--muted); font-size: 12px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 14px; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px 8px; }
.card h2 { font-size: 13px; font-weight: 600; margin: 0 0 6px; color: var(--text); display: flex; gap: 10px; align-items: baseline; }
.card h2 small { color: var(--muted); font-weight: 400; }
svg.chart { width: 100%; height: auto; display: block; }
svg text { fill: var(--muted); font-size: 11px; font-family: inherit; }
svg .grid-line { stroke: var(--line); stroke-width: 1; }
svg .axis { stroke: #3a4656; }
svg .empty { fill: var(--muted); font-size: 13px; }
.legend { display: flex; gap: 14px; flex-wrap: wrap; font-size: 12px; color: var(--muted); margin: 2px 0 6px; }
.legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; vertical-align: -1px; }
table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
th { text-align: left; color: var(--muted); font-weight: 500; font-size: 12px; padding: 6px 8px; border-bottom: 1px solid var(--line); }
td { padding: 7px 8px; border-bottom: 1px solid #202934; }
tr:hover td { background: var(--panel2); }
td.num, th.num { text-align: right; }
.pill { display: inline-block; padding: 1px 9px; border-radius: 999px; font-size: 12px; font-weight: 600; }
.h-alive { background: rgba(63,185,80,.15); color: var(--good); }
.h-straggling { background: rgba(210,153,34,.15); color: var(--warn); }
.h-lost { background: rgba(248,81,73,.15); color: var(--bad); }
.h-stopped, .h-unknown { background: rgba(110,118,129,.2); color: #9aa5b1; }
.swatch { display: inline-block; width: 8px; height: 8px; border-radius: 50%; margin-right: 7px; }
.reason { color: var(--bad); font-weight: 600; }
.wide { grid-column: 1 / -1; }
.muted { color: var(--muted); }
.err { color: var(--bad); }
.health { display: none; margin: 12px 0 0; padding: 10px 14px; border: 1px solid var(--bad); border-radius: 8px; color: var(--bad); font-weight: 600; }
</style>
</head>
<body>
<header>
  <div class="logo">bucket<span>rl</span></div>
  <div class="meta" id="run-meta">connecting…</div>
  <div class="conn"><div class="dot" id="conn-dot"></div><span id="conn-text">connecting</span></div>
</header>
<main>
  <div class="health" id="run-health" role="alert"></div>
  <section class="kpis">
    <div class="kpi"><div class="label">Global version</div><div class="value" id="kpi-version">–</div><div class="sub" id="kpi-version-sub">&nbsp;</div></div>
    <div class="kpi"><div class="label">Train reward</div><div class="value" id="kpi-reward">–</div><div class="sub" id="kpi-reward-sub">&nbsp;</div></div>
    <div class="kpi"><div class="label">Held-out accuracy</div><div class="value" id="kpi-eval">–</div><div class="sub" id="kpi-eval-sub">&nbsp;</div></div>
    <div class="kpi"><div class="label">Workers</div><div class="value" id="kpi-workers">–</div><div class="sub" id="kpi-workers-sub">&nbsp;</div></div>
    <div class="kpi"><div class="label">Updates</div><div class="value" id="kpi-updates">–</div><div class="sub" id="kpi-updates-sub">&nbsp;</div></div>
    <div class="kpi"><div class="label">Bytes in</div><div class="value" id="kpi-bytes">–</div><div class="sub" id="kpi-bytes-sub">&nbsp;</div></div>
  </section>
  <section class="grid">
    <div class="card"><h2>Train reward over time <small>mean of the folded updates, ±1 std band</small></h2>
      <svg class="chart" id="chart-reward-time" viewBox="0 0 640 250"></svg></div>
    <div class="card"><h2>Reward per global version <small>train mean ± std, held-out accuracy</small></h2>
      <div class="legend"><span><i style="background:var(--accent)"></i>train reward</span><span><i style="background:var(--accent2)"></i>held-out accuracy</span><span><i style="background:#e3b341"></i>held-out pass@1 (sampled)</span></div>
      <svg class="chart" id="chart-reward-version" viewBox="0 0 640 232"></svg></div>
    <div class="card"><h2>Contribution per worker <small>updates folded, rejected, mean staleness</small></h2>
      <svg class="chart" id="chart-workers" viewBox="0 0 640 250"></svg></div>
    <div class="card"><h2>Staleness <small>mean versions behind, per global version</small></h2>
      <svg class="chart" id="chart-staleness" viewBox="0 0 640 250"></svg></div>
    <div class="card"><h2>Bytes per sync <small>mean update size folded into each version</small></h2>
      <svg class="chart" id="chart-bytes" viewBox="0 0 640 250"></svg></div>
    <div class="card"><h2>Updates per version <small>folded (bars) and rejected (red); hover for aggregation time</small></h2>
      <svg class="chart" id="chart-updates" viewBox="0 0 640 250"></svg></div>
    <div class="card wide"><h2>Workers <small id="workers-note"></small></h2>
      <table id="workers"><thead><tr><th>worker</th><th>health</th><th class="num">last beat</th><th class="num">step</th>
        <th class="num">base v</th><th class="num">samples/s</th><th class="num">reward</th><th class="num">uploaded</th>
        <th class="num">folded</th><th class="num">rejected</th><th class="num">staleness</th><th>host / device / last error</th></tr></thead>
        <tbody></tbody></table></div>
    <div class="card wide"><h2>Rejected updates <small id="rejected-note"></small></h2>
      <table id="rejected"><thead><tr><th class="num">version</th><th>worker</th><th>update</th><th>reason</th></tr></thead>
        <tbody></tbody></table></div>
  </section>
</main>
<script>
"use strict";
const PALETTE = ["#4cc2ff", "#a78bfa", "#3fb950", "#f0883e", "#ff7b72", "#d2a8ff", "#79c0ff", "#e3b341", "#56d4dd", "#db61a2"];
const W = 640, PAD = {l: 56, r: 16, t: 12, b: 34};
const esc = s => String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const workerColor = (() => { const m = new Map(); return n => { if (!m.has(n)) m.set(n, PALETTE[m.size % PALETTE.length]); return m.get(n); }; })();

function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; ++i; }
  return (i ? b.toFixed(b < 10 ? 2 : 1) : b.toFixed(0)) + " " + u[i];
}
function fmtNum(x, d = 3) {
  if (!isFinite(x)) return "–";
  const a = Math.abs(x);
  if (a >= 1e6) return (x / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (x / 1e3).toFixed(1) + "k";
  if (a >= 100 || Number.isInteger(x)) return x.toFixed(0);
  return x.toFixed(a >= 10 ? 1 : d);
}
function fmtAge(s) {
  if (s < 0) return "–";
  if (s < 90) return s.toFixed(0) + " s";
  if (s < 5400) return (s / 60).toFixed(0) + " min";
  return (s / 3600).toFixed(1) + " h";
}
// A tick label with as many decimals as the step needs.
const stepFmt = (a) => { const step = a.length > 1 ? a[1] - a[0] : 1, d = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return v => v.toFixed(Math.min(d, 6)); };
// Round tick positions covering [lo, hi] (steps of 1, 2 or 5 x 10^k, at least minStep).
function ticks(lo, hi, n, minStep = 0) {
  if (!(hi > lo)) { hi = lo + 1; }
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / mag;
  const step = Math.max(minStep, (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag);
  const out = [], first = Math.floor(lo / step + 1e-9), last = Math.ceil(hi / step - 1e-9);
  for (let i = first; i <= last; ++i) out.push(i * step);
  return out;  // rounded out: the first tick <= lo, the last >= hi
}
function emptyChart(svg, h, msg) {
  svg.setAttribute("data-points", "0");
  svg.innerHTML = `<text class="empty" x="${W / 2}" y="${h / 2}" text-anchor="middle">${esc(msg)}</text>`;
}
// series: [{name, color, points: [[x, y, label]], band: [[x, lo, hi]], dots, bars, dashed}]
function xyChart(svg, series, o) {
  const h = +svg.viewBox.baseVal.height;
  const all = series.flatMap(s => s.points);
  if (!all.length) return emptyChart(svg, h, o.empty || "waiting for data…");
  const xs = all.map(p => p[0]), ys = all.map(p => p[1]).concat(series.flatMap(s => (s.band || []).flatMap(b => [b[1], b[2]])));
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (o.yMin !== undefined) y0 = Math.min(y0, o.yMin);
  if (o.yMax !== undefined) y1 = Math.max(y1, o.yMax);
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y1 += Math.abs(y1) * 0.1 || 1; }
  const yt = ticks(y0, y1, 5, o.yInt ? 1 : 0); y0 = yt[0]; y1 = yt[yt.length - 1];
  const xt = ticks(x0, x1, 6, o.xInt ? 1 : 0);  // x spans the data, not the rounded ticks
  const yFmt = o.yFmt || stepFmt(yt), xFmt = o.xFmt || stepFmt(xt);
  const X = x => PAD.l + (x - x0) / (x1 - x0) * (W - PAD.l - PAD.r);
  const Y = y => h - PAD.b - (y - y0) / (y1 - y0) * (h - PAD.t - PAD.b);
  let g = "";
  for (const t of yt) g += `<line class="grid-line" x1="${PAD.l}" x2="${W - PAD.r}" y1="${Y(t)}" y2="${Y(t)}"/>` +
    `<text x="${PAD.l - 8}" y="${Y(t) + 4}" text-anchor="end">${esc(yFmt(t))}</text>`;
  for (const t of xt) if (t >= x0 && t <= x1) g += `<text x="${X(t)}" y="${h - PAD.b + 16}" text-anchor="middle">${esc(xFmt(t))}</text>`;
  g += `<line class="axis" x1="${PAD.l}" x2="${W - PAD.r}" y1="${h - PAD.b}" y2="${h - PAD.b}"/>`;
  g += `<text x="${W - PAD.r}" y="${h - 4}" text-anchor="end">${esc(o.xLabel || "")}</text>`;
  let n = 0;
  for (const s of series) {
    if (s.band && s.band.length > 1) {
      const top = s.band.map(b => `${X(b[0]).toFixed(1)},${Y(b[2]).toFixed(1)}`);
      const bot = s.band.slice().reverse().map(b => `${X(b[0]).toFixed(1)},${Y(b[1]).toFixed(1)}`);
      g += `<polygon class="band" points="${top.concat(bot).join(" ")}" fill="${s.color}" fill-opacity="0.16" stroke="none"/>`;
    }
    if (s.bars) {
      const bw = Math.max(2, Math.min(18, (W - PAD.l - PAD.r) / Math.max(1, s.points.length) * 0.7));
      for (const p of s.points)
        g += `<rect class="bar" x="${(X(p[0]) - bw / 2).toFixed(1)}" y="${Y(Math.max(p[1], 0)).toFixed(1)}" width="${bw.toFixed(1)}" height="${Math.abs(Y(p[1]) - Y(0)).toFixed(1)}" fill="${s.color}" fill-opacity="0.75" rx="1.5"><title>${esc(p[2] || "")}</title></rect>`;
    } else if (s.points.length > 1) {
      const d = s.points.map((p, i) => (i ? "L" : "M") + X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1)).join("");
      g += `<path class="series" d="${d}" fill="none" stroke="${s.color}" stroke-width="2" stroke-linejoin="round"${s.dashed ? ' stroke-dasharray="5 4"' : ""}/>`;
    }
    if (s.dots !== false && !s.bars)
      for (const p of s.points) g += `<circle class="pt" cx="${X(p[0]).toFixed(1)}" cy="${Y(p[1]).toFixed(1)}" r="${s.points.length > 80 ? 1.6 : 3}" fill="${s.color}"><title>${esc(p[2] || "")}</title></circle>`;
    n += s.points.length;
  }
  svg.setAttribute("data-points", String(n));
  svg.innerHTML = g;
}
// rows: [{name, color, folded, rejected, staleness}]
function workerBars(svg, rows) {
  const h = +svg.viewBox.baseVal.height;
  if (!rows.length) return emptyChart(svg, h, "no updates folded yet");
  const left = 110, right = 190, top = 14, rh = Math.min(44, (h - top - 10) / Math.max(rows.length, 4));
  const max = Math.max(1, ...rows.map(r => r.folded + r.rejected));
  const Xw = v => v / max * (W - left - right);
  let g = "";
  rows.forEach((r, i) => {
    const y = top + i * rh, bh = Math.max(6, rh * 0.62);
    g += `<text x="${left - 10}" y="${y + bh / 2 + 4}" text-anchor="end" style="fill:var(--text)">${esc(r.name)}</text>`;
    g += `<rect class="bar" data-worker="${esc(r.name)}" x="${left}" y="${y}" width="${Math.max(1, Xw(r.folded)).toFixed(1)}" height="${bh.toFixed(1)}" rx="3" fill="${r.color}"><title>${esc(r.name)}: ${r.folded} folded</title></rect>`;
    if (r.rejected) g += `<rect class="bar-rejected" x="${(left + Xw(r.folded)).toFixed(1)}" y="${y}" width="${Xw(r.rejected).toFixed(1)}" height="${bh.toFixed(1)}" rx="3" fill="var(--bad)"><title>${r.rejected} rejected</title></rect>`;
    g += `<text x="${(left + Xw(r.folded + r.rejected) + 8).toFixed(1)}" y="${y + bh / 2 + 4}">${r.folded}${r.rejected ? " + " + r.rejected + " rej." : ""} · stale ${r.staleness.toFixed(2)}</text>`;
  });
  svg.setAttribute("data-points", String(rows.length));
  svg.innerHTML = g;
}

function render(st) {
  const vs = st.versions || [], evals = st.evals || [], workers = st.workers || [];
  const t0 = vs.length ? vs[0].created_ms : st.now_ms;
  document.getElementById("run-meta").innerHTML =
    `run <b>${esc(st.run.id)}</b> · task <b>${esc(st.run.task)}</b> · ${esc(st.run.mode)} · ${esc(st.run.codec)} · proxy ${esc(st.proxy.id)} · up ${fmtAge(st.proxy.uptime_s)}`;
  const last = vs[vs.length - 1];
  document.getElementById("kpi-version").textContent = st.version;
  document.getElementById("kpi-version-sub").textContent = last ? `${fmtAge((st.now_ms - last.created_ms) / 1000)} ago · ${vs.length} in view` : "";
  document.getElementById("kpi-reward").textContent = last ? last.reward_mean.toFixed(3) : "–";
  document.getElementById("kpi-reward-sub").textContent = last ? `± ${last.reward_std.toFixed(3)} across ${last.updates} updates` : "";
  const le = evals[evals.length - 1];
  document.getElementById("kpi-eval").textContent = le ? le.accuracy.toFixed(3) : "–";
  document.getElementById("kpi-eval-sub").textContent = !le ? "no evaluator" :
    `v${le.version}, ${le.n} prompts` + (le.k ? ` · pass@1 ${le.pass_at_1.toFixed(3)} · pass@${le.k} ${le.pass_at_k.toFixed(3)}` : "");
  // Run health (protocol/health.h): a banner while the run is collapsed or regressed.
  const rh = st.run_health || {state: "ok"}, banner = document.getElementById("run-health");
  banner.style.display = rh.state === "ok" ? "none" : "block";
  banner.textContent = rh.state === "ok" ? "" : `Run ${rh.state} since v${rh.since_version}: ${rh.detail}`;
  banner.dataset.state = rh.state;
  const alive = workers.filter(w => w.health === "alive").length;
  document.getElementById("kpi-workers").textContent = `${alive} / ${workers.length}`;
  const bad = ["straggling", "lost", "stopped"].map(s => [s, workers.filter(w => w.health === s).length]).filter(x => x[1]);
  document.getElementById("kpi-workers-sub").textContent = bad.length ? bad.map(x => x[1] + " " + x[0]).join(", ") : "all alive";
  const c = st.counters;
  document.getElementById("kpi-updates").textContent = fmtNum(c.accepted);
  document.getElementById("kpi-updates-sub").textContent = `${c.rejected} rejected · ${c.published} versions by this proxy`;
  const bytesView = vs.reduce((a, v) => a + v.bytes_in, 0);
  document.getElementById("kpi-bytes").textContent = fmtBytes(bytesView);
  document.getElementById("kpi-bytes-sub").textContent = `over the ${vs.length} versions in view`;

  // Time axis in seconds for a young run, in minutes after that.
  const span = vs.length ? (vs[vs.length - 1].created_ms - t0) / 1000 : 0, unit = span < 180 ? 1000 : 60000;
  const mins = ms => (ms - t0) / unit;
  const trained = vs.filter(v => v.updates > 0);
  const tip = v => `v${v.version}: reward ${v.reward_mean.toFixed(3)} ± ${v.reward_std.toFixed(3)}, ${v.updates} updates`;
  xyChart(document.getElementById("chart-reward-time"),
    [{name: "reward", color: "#4cc2ff", points: trained.map(v => [mins(v.created_ms), v.reward_mean, tip(v)]),
      band: trained.map(v => [mins(v.created_ms), v.reward_mean - v.reward_std, v.reward_mean + v.reward_std])}],
    {xLabel: (unit === 1000 ? "seconds" : "minutes") + " since the first version shown", empty: "waiting for the first version…"});
  xyChart(document.getElementById("chart-reward-version"),
    [{name: "reward", color: "#4cc2ff", points: trained.map(v => [v.version, v.reward_mean, tip(v)]),
      band: trained.map(v => [v.version, v.reward_mean - v.reward_std, v.reward_mean + v.reward_std])},
     {name: "held-out", color: "#a78bfa", dashed: true, points: evals.map(e => [e.version, e.accuracy, `v${e.version}: held-out accuracy ${e.accuracy.toFixed(3)}`])},
     {name: "pass@1", color: "#e3b341", dashed: true, points: evals.filter(e => e.k).map(e => [e.version, e.pass_at_1, `v${e.version}: pass@1 ${e.pass_at_1.toFixed(3)}, pass@${e.k} ${e.pass_at_k.toFixed(3)}`])}],
    {xLabel: "global version", xInt: true, empty: "waiting for the first version…"});
  workerBars(document.getElementById("chart-workers"),
    workers.filter(w => w.folded > 0 || w.rejected > 0).map(w => ({name: w.worker, color: workerColor(w.worker), folded: w.folded, rejected: w.rejected, staleness: w.staleness_mean})));
  xyChart(document.getElementById("chart-staleness"),
    [{name: "staleness", color: "#f0883e", points: trained.map(v => [v.version, v.staleness_mean, `v${v.version}: mean staleness ${v.staleness_mean.toFixed(2)}`])}],
    {xLabel: "global version", xInt: true, yMin: 0});
  xyChart(document.getElementById("chart-bytes"),
    [{name: "bytes", color: "#56d4dd", bars: true, points: trained.map(v => [v.version, v.bytes_in / v.updates, `v${v.version}: ${fmtBytes(v.bytes_in / v.updates)} per update, ${fmtBytes(v.bytes_in)} in all`])}],
    {xLabel: "global version", xInt: true, yMin: 0, yFmt: fmtBytes});
  xyChart(document.getElementById("chart-updates"),
    [{name: "updates", color: "#3fb950", bars: true, points: vs.map(v => [v.version, v.updates, `v${v.version}: ${v.updates} folded, ${v.rejected} rejected, ${(v.aggregate_s * 1000).toFixed(1)} ms`])},
     {name: "rejected", color: "#f85149", dots: true, points: vs.filter(v => v.rejected > 0).map(v => [v.version, v.rejected, `v${v.version}: ${v.rejected} rejected`])}],
    {xLabel: "global version", xInt: true, yInt: true, yMin: 0});

  const tb = document.querySelector("#workers tbody");
  tb.innerHTML = workers.map(w => `<tr data-worker="${esc(w.worker)}" data-health="${esc(w.health)}">
    <td><span class="swatch" style="background:${workerColor(w.worker)}"></span>${esc(w.worker)}</td>
    <td><span class="pill h-${esc(w.health)}">${esc(w.health)}</span></td>
    <td class="num">${fmtAge(w.age_s)}</td><td class="num">${w.step ?? "–"}</td><td class="num">${w.version ?? "–"}</td>
    <td class="num">${w.samples_per_s !== undefined ? w.samples_per_s.toFixed(1) : "–"}</td>
    <td class="num">${w.reward_mean !== undefined ? w.reward_mean.toFixed(3) : "–"}</td>
    <td class="num">${w.bytes_uploaded !== undefined ? fmtBytes(w.bytes_uploaded) : "–"}</td>
    <td class="num">${w.folded}</td><td class="num">${w.rejected}</td><td class="num">${w.staleness_mean.toFixed(2)}</td>
    <td class="muted">${esc(w.host || "")}${w.device ? ` · ${esc(w.device)}` : ""}${w.device_memory_bytes ? ` (${fmtBytes(w.device_memory_bytes)})` : ""}${w.last_error ? ` <span class="err">${esc(w.last_error)}</span>` : ""}</td></tr>`).join("");
  document.getElementById("workers-note").textContent = `${workers.length} seen · health from heartbeats`;
  const rej = (st.rejected || []).slice().reverse().slice(0, 50);
  document.querySelector("#rejected tbody").innerHTML = rej.length ? rej.map(r => `<tr data-update="${esc(r.worker + "/" + r.id)}">
    <td class="num">v${r.version}</td><td>${esc(r.worker)}</td><td class="muted">${esc(r.id)}</td>
    <td><span class="reason">${esc(r.reason.split(":")[0])}</span>${esc(r.reason.slice(r.reason.split(":")[0].length))}</td></tr>`).join("")
    : `<tr><td colspan="4" class="muted">none in the versions shown</td></tr>`;
  const byReason = Object.entries(c.rejected_by_reason || {}).map(([k, v]) => `${k} ${v}`).join(" · ");
  document.getElementById("rejected-note").textContent = byReason ? "by this proxy: " + byReason : "";
  document.body.setAttribute("data-version", String(st.version));
  document.body.setAttribute("data-rendered", "1");
}

let failures = 0;
async function refresh() {
  const dot = document.getElementById("conn-dot"), txt = document.getElementById("conn-text");
  try {
    const r = await fetch("status", {cache: "no-store"});
    if (!r.ok) throw new Error(r.status === 401 ? "unauthorized: token needed" : "HTTP " + r.status);
    render(await r.json());
    failures = 0;
    dot.className = "dot live";
    txt.textContent = "live · " + new Date().toLocaleTimeString();
  } catch (e) {
    ++failures;
    dot.className = "dot down";
    txt.textContent = "proxy unreachable (" + e.message + ")";
  }
}
refresh();
setInterval(refresh, 3000);
</script>
</body>
</html>
)HTML";
}  // namespace

std::string_view dashboard_html() { return kHtml; }

}  // namespace brl::obs
