// The page of `python -m accelopt_evo serve`: polls the server's JSON views and draws them.
// Plain JavaScript and inline SVG, no framework, nothing from the network but this server.
// Text from the run folder (kernel sources, plans, rationales, errors) comes from an LLM: it is
// only ever set as text (textContent, createTextNode), never parsed as markup.
"use strict";

(() => {
  const POLL_MS = 2000;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const RUN_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];

  const state = {
    runs: [],            // [{id, name, version, error?}] from /api/runs
    summaries: {},       // run id -> summary view
    memories: {},        // run id -> memory view
    trees: {},           // "run|problem" -> tree view
    kernels: {},         // "run|problem|id" -> kernel view
    statusColors: {},
    lastPoll: null,
    pollError: "",
  };

  // DOM ------------------------------------------------------------------------------------
  function fill(node, attrs, children) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  const el = (tag, attrs, ...children) => fill(document.createElement(tag), attrs, children);
  const svg = (tag, attrs, ...children) => fill(document.createElementNS(SVG_NS, tag), attrs, children);
  const byId = (id) => document.getElementById(id);

  // Formatting -----------------------------------------------------------------------------
  const num = (x) => typeof x === "number" && isFinite(x);
  const fx = (x) => (num(x) ? x.toFixed(3) + "×" : "n/a");
  const pct = (x) => (num(x) ? x.toFixed(1) + "%" : "n/a");
  const ms = (x) => (num(x) ? x.toFixed(4) + " ms" : "n/a");
  const int = (x) => (num(x) ? Math.round(x).toLocaleString("en-US") : "n/a");
  const usd = (x) => (num(x) ? "$" + x.toFixed(x >= 1 ? 2 : 4) : "n/a");
  const short = (id) => String(id || "").slice(0, 8);
  const runColor = (i) => RUN_COLORS[i % RUN_COLORS.length];
  const statusColor = (s) => state.statusColors[s] || "#7f7f7f";

  // Routes: #run=0&problem=silu&kernel=abcd1234 ----------------------------------------------
  function route() {
    const q = new URLSearchParams(location.hash.slice(1));
    const run = Number.parseInt(q.get("run") || "0", 10);
    return { run: Number.isFinite(run) ? run : 0, problem: q.get("problem"), kernel: q.get("kernel") };
  }
  function go(change) {
    const next = { ...route(), ...change };
    if ("problem" in change && !("kernel" in change)) next.kernel = null;
    if ("run" in change && !("kernel" in change)) next.kernel = null;
    const q = new URLSearchParams();
    q.set("run", String(next.run));
    if (next.problem) q.set("problem", next.problem);
    if (next.kernel) q.set("kernel", next.kernel);
    location.hash = q.toString();
  }
  function kernelButton(problem, id, label) {
    return el("button", { class: "kid", type: "button", title: id, text: label || short(id),
                          onclick: () => go({ problem, kernel: id }) });
  }

  // Fetching -------------------------------------------------------------------------------
  async function getJSON(url) {
    const response = await fetch(url, { cache: "no-store" });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  }

  async function poll() {
    try {
      const list = await getJSON("/api/runs");
      state.runs = list.runs;
      const changed = list.runs.filter((r) => !r.error && (!state.summaries[r.id] || state.summaries[r.id].version !== r.version));
      await Promise.all(changed.map(async (r) => {
        const [summary, memory] = await Promise.all([getJSON(`/api/run/${r.id}/summary`), getJSON(`/api/run/${r.id}/memory`)]);
        state.summaries[r.id] = summary;
        state.memories[r.id] = memory;
        state.statusColors = summary.status_colors;
      }));
      state.lastPoll = new Date();
      state.pollError = "";
      if (changed.length || !document.body.dataset.ready) await render();
    } catch (err) {
      state.pollError = String(err && err.message ? err.message : err);
    } finally {
      showStatus();
      setTimeout(poll, POLL_MS);
    }
  }

  function showStatus() {
    const status = byId("status");
    status.classList.toggle("stale", !!state.pollError);
    status.textContent = state.pollError
      ? `cannot reach the server (${state.pollError}); retrying`
      : `updated ${state.lastPoll ? state.lastPoll.toLocaleTimeString() : "never"} · every ${POLL_MS / 1000} s`;
  }

  // What the runs hold -----------------------------------------------------------------------
  function runsWithData() {
    return state.runs.filter((r) => state.summaries[r.id]).map((r) => ({ run: r, summary: state.summaries[r.id] }));
  }
  function problemNames() {
    const names = [];
    for (const { summary } of runsWithData()) {
      for (const p of summary.problems) if (!names.includes(p.name)) names.push(p.name);
    }
    return names;
  }
  const problemOf = (summary, name) => summary.problems.find((p) => p.name === name);
  // the x axis runs to the last generation a run is configured for, so that a live curve grows into it
  const plannedGenerations = () => Math.max(0, ...runsWithData().map(({ summary }) => (num(summary.gens) ? summary.gens : 0)));

  // Drawing ----------------------------------------------------------------------------------
  async function render() {
    const names = problemNames();
    const r = route();
    if (r.problem === null && names.length) { go({ problem: names[0] }); return; }
    renderRuns(r);
    renderGrid(names, r);
    renderProgress(r);
    renderMemory(r);
    renderNotes();
    await Promise.all([renderTree(r), renderKernel(r)]);
    document.body.dataset.versions = JSON.stringify(state.runs.map((x) => x.version));
    if (!document.body.dataset.ready) {
      document.body.dataset.readyMs = String(Math.round(performance.now()));   // first drawn (benchmarks/serve_page.py)
      document.body.dataset.ready = "1";
    }
  }

  function renderRuns(r) {
    const box = byId("runs");
    box.replaceChildren(...state.runs.map((run) => {
      const s = state.summaries[run.id];
      const parts = [el("span", { class: "swatch" }), el("strong", { text: run.name })];
      if (run.error) parts.push(" ", el("span", { class: "error", text: run.error }));
      if (s) {
        const gens = num(s.gens) ? ` of ${s.gens}` : "";
        parts.push(` · ${s.label}` + (s.hosts.length ? ` · evaluated on ${s.hosts.join(", ")}` : "") + ` · generation ${s.generation}${gens}`);
        if (s.evaluating !== null) parts.push(" · ", el("span", { class: "live", text: `evaluating generation ${s.evaluating}` }));
        else if (num(s.gens) && s.generation >= s.gens) parts.push(" · finished");
      }
      const chip = el("div", { class: "run" + (run.id === r.run ? " active" : ""), title: "show this run's lineage and memory",
                               onclick: () => go({ run: run.id }) }, parts);
      chip.querySelector(".swatch").style.background = runColor(run.id);
      return chip;
    }));
  }

  function renderGrid(names, r) {
    const runs = runsWithData();
    if (!names.length) {
      byId("grid").replaceChildren(el("p", { class: "hint", text: "No kernel evaluated yet: the page fills in as the run writes its folder." }));
      return;
    }
    byId("grid").replaceChildren(...names.map((name) => {
      const series = runs.map(({ run, summary }) => ({ color: runColor(run.id), name: run.name,
        points: ((problemOf(summary, name) || {}).series || []).map((p) => [p[0], p[1]]) }));
      const figs = runs.map(({ run, summary }) => {
        const p = problemOf(summary, name);
        return p && p.best ? `${run.name}: ${fx(p.best.speedup)}, ${pct(p.best.percent_of_peak)}` : `${run.name}: n/a`;
      }).join(" · ");
      return el("div", { class: "mini" + (name === r.problem ? " active" : ""), "data-problem": name,
                         onclick: () => go({ problem: name }) },
        el("div", { class: "title", text: name }),
        lineChart({ width: 200, height: 86, series, refs: [{ y: 1, color: "#888" }], mini: true, xMax: plannedGenerations() }),
        el("div", { class: "figs", text: figs }));
    }));
  }

  function renderProgress(r) {
    const runs = runsWithData();
    byId("problem-name").textContent = r.problem || "";
    const speed = [], peak = [], peakRefs = [];
    for (const { run, summary } of runs) {
      const p = problemOf(summary, r.problem);
      if (!p) continue;
      const color = runColor(run.id);
      speed.push({ color, name: run.name, points: p.series.map((x) => [x[0], x[1], `${run.name} generation ${x[0]}: ${fx(x[1])}`]) });
      peak.push({ color, name: run.name, points: p.series.filter((x) => num(x[2])).map((x) => [x[0], x[2], `${run.name} generation ${x[0]}: ${pct(x[2])}`]) });
      if (p.baseline && num(p.baseline.percent_of_peak)) peakRefs.push({ y: p.baseline.percent_of_peak, color, label: `baseline ${pct(p.baseline.percent_of_peak)}` });
    }
    const labels = [...new Set(runs.map(({ summary }) => (problemOf(summary, r.problem) || {}).label).filter(Boolean))].join("; ");
    byId("chart-speedup").replaceChildren(
      lineChart({ width: 520, height: 280, series: speed, refs: [{ y: 1, color: "#555", label: "baseline 1×" }], xMax: plannedGenerations(),
                  xLabel: "generation", yLabel: "best speedup so far (×)", format: (y) => y.toFixed(2) + "×" }),
      el("figcaption", { text: `Best speedup over the baseline per generation (${labels})` }));
    byId("chart-peak").replaceChildren(
      lineChart({ width: 520, height: 280, series: peak, refs: peakRefs, zero: true, xMax: plannedGenerations(),
                  xLabel: "generation", yLabel: "% of peak of the best kernel", format: (y) => y.toFixed(0) + "%" }),
      el("figcaption", { text: `% of peak throughput (roofline) of the best kernel so far, dashed: the baseline (${labels})` }));
    byId("stats").replaceChildren(statsTable(runs, r.problem), llmTable(runs, r.problem), statusLegend());
    renderDiversity(runs, r.problem);
  }

  // The state of each run's selection.strategy and novelty for a problem (summary.diversity):
  // the islands with their members and migrations, the MAP-Elites grid, children sent back.
  function renderDiversity(runs, name) {
    const boxes = [];
    for (const { run, summary } of runs) {
      const d = summary.diversity;
      if (!d) continue;
      const p = d.problems.find((x) => x.name === name);
      const box = el("div", { class: "diversity", "data-run": run.id },
        el("h3", { text: `Strategy of ${run.name}: ${d.strategy}` + (d.novelty ? `, novelty threshold ${d.novelty}` : "") }));
      if (!p) {
        box.append(el("p", { class: "hint", text: "No generation of this problem recorded yet." }));
      } else {
        if (p.islands) box.append(islandsTable(name, p));
        if (p.archive) box.append(archiveGrid(name, d, p));
        if (num(p.novelty_rejected)) {
          const by = p.novelty_by_generation.map(([g, n]) => `generation ${g}: ${n}`).join(", ");
          box.append(el("p", { class: "novelty", text: `${p.novelty_rejected} child(ren) too close to a kernel already evaluated, ` +
                                                       `sent back to their operator` + (by ? ` (${by})` : "") }));
        }
      }
      boxes.push(box);
    }
    byId("diversity").hidden = !boxes.length;
    byId("diversity").replaceChildren(...boxes);
  }

  function islandsTable(name, p) {
    const rows = p.islands.map((island, i) => el("tr", { "data-island": i }, el("td", { text: `island ${i}` }),
      el("td", { class: "num", text: int(island.members.length) }), el("td", { class: "num", text: fx(island.best) }),
      el("td", {}, island.members.flatMap((m) => [kernelButton(name, m.id, `${short(m.id)} ${fx(m.speedup)}`), " "]))));
    const moves = p.migrations.map(([g, n]) => `generation ${g}: ${n}`).join(", ");
    return el("div", { class: "islands" },
      el("table", { class: "islands" }, el("tr", {}, ["island", "members", "best speedup", "kernels"].map((h) => el("th", { text: h }))), rows),
      el("p", { class: "hint", text: `${p.migrated} kernel(s) migrated` + (moves ? ` (${moves})` : "") }));
  }

  function archiveGrid(name, d, p) {
    const B = d.dma_bins;
    const speedups = p.archive.map((c) => c.speedup).filter(num);
    const lo = Math.min(...speedups, 1), hi = Math.max(...speedups, 1);
    const head = el("tr", {}, el("th", { text: "busiest engine ↓ · DMA share →" }),
      Array.from({ length: B }, (_, b) => el("th", { text: `${Math.round((100 * b) / B)}–${Math.round((100 * (b + 1)) / B)}%` })));
    const rows = d.engines.map((engine) => el("tr", { "data-engine": engine }, el("th", { text: engine }),
      Array.from({ length: B }, (_, b) => {
        const c = p.archive.find((x) => x.engine === engine && x.bin === b);
        if (!c) return el("td", { class: "empty", text: "·" });
        const td = el("td", { class: "occupied", title: `elite ${c.id}` }, kernelButton(name, c.id, fx(c.speedup)));
        if (num(c.speedup)) td.style.background = speedupColor(c.speedup, lo, hi);
        return td;
      })));
    return el("div", { class: "archive" }, el("table", { class: "archive" }, head, rows),
      el("p", { class: "hint", text: `${p.archive_cells} cell(s) occupied; ${p.archive_placed} child(ren) took a cell` }));
  }

  function statsTable(runs, name) {
    const head = ["run", "figures", "baseline", "best kernel", "evaluations by status"];
    const rows = runs.map(({ run, summary }) => {
      const p = problemOf(summary, name);
      if (!p) return el("tr", {}, el("td", { text: run.name }), el("td", { colspan: 4, text: "no such problem in this run" }));
      const best = p.best;
      const bestCell = best
        ? el("td", {}, `${fx(best.speedup)}, ${pct(best.percent_of_peak)}, ${ms(best.latency_ms)} (generation ${best.generation}) `,
          kernelButton(name, best.id))
        : el("td", { text: "no correct kernel yet" });
      const base = p.baseline;
      const baseCell = el("td", {}, base ? `${ms(base.latency_ms)}, ${pct(base.percent_of_peak)} ` : "n/a ", base ? kernelButton(name, base.id) : null);
      return el("tr", { "data-run": run.id }, el("td", { text: run.name }), el("td", { text: p.label }), baseCell, bestCell,
        el("td", {}, statusBar(p.statuses), statusText(p.statuses, p.reused)));
    });
    return el("table", { class: "stats" }, el("tr", {}, head.map((h) => el("th", { text: h }))), rows);
  }

  function statusBar(counts) {
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    const bar = el("span", { class: "bar", title: statusText(counts) });
    for (const [status, n] of Object.entries(counts)) {
      const part = el("span", { title: `${n} ${status}` });
      part.style.width = `${(100 * n) / Math.max(total, 1)}%`;
      part.style.background = statusColor(status);
      bar.appendChild(part);
    }
    return bar;
  }
  function statusText(counts, reused) {
    const parts = Object.entries(counts).sort((a, b) => b[1] - a[1]).map(([s, n]) => `${n} ${s}`);
    if (reused) parts.push(`${reused} reused`);
    return parts.join(", ") || "none yet";
  }
  function statusLegend() {
    return el("div", { class: "legend" }, Object.entries(state.statusColors).map(([s, c]) => {
      const sw = el("span", { class: "swatch" });
      sw.style.background = c;
      return el("span", { class: "key" }, sw, s);
    }));
  }

  function meter(used, cap, format) {
    if (!num(cap) || cap <= 0) return el("span", { text: `${format(used)} (no cap)` });
    const bar = el("span", { class: "meter" }, el("span"));
    bar.firstChild.style.width = `${Math.min(100, (100 * used) / cap)}%`;
    return el("span", {}, bar, `${format(used)} of ${format(cap)}`);
  }

  function llmTable(runs, name) {
    if (runs.every(({ summary }) => summary.offline && !summary.llm.calls)) {
      return el("p", { class: "hint", text: "LLM: none, the offline operators made every kernel." });
    }
    const head = ["run", `LLM calls for ${name}`, "tokens", "cost", "whole run: calls vs budget", "tokens vs budget", "cost vs budget"];
    const rows = runs.map(({ run, summary }) => {
      const p = problemOf(summary, name);
      const l = summary.llm;
      const mine = p ? p.llm : { calls: 0, tokens: 0, cost_usd: 0 };
      if (summary.offline && !l.calls) {
        return el("tr", {}, el("td", { text: run.name }), el("td", { colspan: 6, text: `no LLM: ${summary.operators}` }));
      }
      return el("tr", {}, el("td", { text: run.name }), el("td", { class: "num", text: int(mine.calls) }),
        el("td", { class: "num", text: int(mine.tokens) }), el("td", { class: "num", text: usd(mine.cost_usd) }),
        el("td", {}, meter(l.billed_calls, l.budget.max_llm_calls, int), ` (${int(l.calls)} logged, ${int(l.cached)} cached)`),
        el("td", {}, meter(l.tokens, l.budget.max_tokens, int)), el("td", {}, meter(l.cost_usd, l.budget.max_usd, usd)));
    });
    return el("table", { class: "llm" }, el("tr", {}, head.map((h) => el("th", { text: h }))), rows);
  }

  // A line chart on shared axes: one polyline with points per series, dashed reference lines.
  function niceTicks(lo, hi, count) {
    const span = hi - lo || 1;
    const raw = span / count;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || 10 * mag;
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
    return ticks;
  }

  function lineChart(o) {
    const W = o.width, H = o.height;
    const m = o.mini ? { l: 30, r: 6, t: 6, b: 14 } : { l: 56, r: 90, t: 12, b: 36 };
    const xs = o.series.flatMap((s) => s.points.map((p) => p[0]));
    const ys = o.series.flatMap((s) => s.points.map((p) => p[1])).concat(o.refs.map((r) => r.y));
    const xMax = Math.max(1, o.xMax || 0, ...xs);
    let yLo = Math.min(...ys), yHi = Math.max(...ys);
    if (!ys.length) { yLo = 0; yHi = 1; }
    if (o.zero) yLo = 0;
    const pad = (yHi - yLo) * 0.08 || Math.abs(yHi) * 0.1 || 1;
    yLo = o.zero ? 0 : yLo - pad;
    yHi += pad;
    const X = (x) => m.l + ((W - m.l - m.r) * x) / xMax;
    const Y = (y) => H - m.b - ((H - m.t - m.b) * (y - yLo)) / (yHi - yLo);
    const format = o.format || ((y) => y.toFixed(2));
    const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "linechart", role: "img" });
    const axis = svg("g", { class: "axis" });
    for (const t of niceTicks(yLo, yHi, o.mini ? 3 : 6)) {
      axis.appendChild(svg("line", { class: "gridline", x1: m.l, x2: W - m.r, y1: Y(t), y2: Y(t) }));
      axis.appendChild(svg("text", { x: m.l - 4, y: Y(t) + 4, "text-anchor": "end", text: format(t) }));
    }
    for (const t of niceTicks(0, xMax, o.mini ? 4 : 10).filter((t) => Number.isInteger(t))) {
      axis.appendChild(svg("text", { x: X(t), y: H - m.b + 12, "text-anchor": "middle", text: String(t) }));
    }
    axis.appendChild(svg("line", { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b }));
    axis.appendChild(svg("line", { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b }));
    if (!o.mini) {
      axis.appendChild(svg("text", { x: (m.l + W - m.r) / 2, y: H - 4, "text-anchor": "middle", text: o.xLabel }));
      axis.appendChild(svg("text", { x: 12, y: (m.t + H - m.b) / 2, "text-anchor": "middle",
                                     transform: `rotate(-90 12 ${(m.t + H - m.b) / 2})`, text: o.yLabel }));
    }
    root.appendChild(axis);
    for (const ref of o.refs) {
      const g = svg("g", { class: "ref" },
        svg("line", { class: "baseline", x1: m.l, x2: W - m.r, y1: Y(ref.y), y2: Y(ref.y), stroke: ref.color, "stroke-width": 1.2 }));
      if (ref.label && !o.mini) g.appendChild(svg("text", { x: W - m.r + 4, y: Y(ref.y) + 4, text: ref.label, fill: ref.color }));
      root.appendChild(g);
    }
    o.series.forEach((s, i) => {
      const g = svg("g", { class: "series", "data-series": s.name, fill: s.color, stroke: s.color });
      if (s.points.length > 1) {
        // a step line: the best so far holds until the next generation improves on it
        let d = `M${X(s.points[0][0])},${Y(s.points[0][1])}`;
        for (const p of s.points.slice(1)) d += ` H${X(p[0])} V${Y(p[1])}`;
        g.appendChild(svg("path", { d, fill: "none", "stroke-width": o.mini ? 1.5 : 2 }));
      }
      for (const p of s.points) {
        g.appendChild(svg("circle", { class: "point", cx: X(p[0]), cy: Y(p[1]), r: o.mini ? 1.8 : 3.2 },
          svg("title", { text: p[2] || `${s.name}: ${format(p[1])} at generation ${p[0]}` })));
      }
      if (!o.mini && o.series.length > 1 && s.points.length) {
        const last = s.points[s.points.length - 1];
        g.appendChild(svg("text", { x: X(last[0]) + 5, y: Y(last[1]) - 5 - 12 * i, text: s.name, stroke: "none" }));
      }
      root.appendChild(g);
    });
    return root;
  }

  // The lineage tree: a column per generation, parent -> child edges, colour by status and speedup.
  function speedupColor(s, lo, hi) {
    const t = hi > lo ? (Math.log(s) - Math.log(lo)) / (Math.log(hi) - Math.log(lo)) : 1;
    return `hsl(${Math.round(25 + 115 * Math.max(0, Math.min(1, t)))}, 70%, 42%)`;
  }

  async function renderTree(r) {
    const summary = state.summaries[r.run];
    const run = state.runs.find((x) => x.id === r.run);
    byId("lineage-of").textContent = run && r.problem ? `of ${r.problem} in run ${run.name}` : "";
    if (!summary || !r.problem || !problemOf(summary, r.problem)) {
      const why = !summary ? "Waiting for the run folder…" : !summary.problems.length ? "No kernel evaluated yet."
        : "This run has no such problem.";
      byId("tree").replaceChildren(el("p", { class: "hint", text: why }));
      byId("tree-legend").replaceChildren();
      return;
    }
    const key = `${r.run}|${r.problem}`;
    let tree = state.trees[key];
    if (!tree || tree.version !== summary.version) {
      try {
        tree = await getJSON(`/api/run/${r.run}/tree?problem=${encodeURIComponent(r.problem)}`);
      } catch (err) {
        byId("tree").replaceChildren(el("p", { class: "error", text: String(err.message || err) }));
        return;
      }
      state.trees[key] = tree;
    }
    const now = route();
    if (now.run !== r.run || now.problem !== r.problem) return;     // the user moved on meanwhile
    drawTree(tree, now.kernel);
  }

  function drawTree(tree, selected) {
    const COL = 64, ROW = 22, L = 30, T = 26;
    const gens = [...new Set(tree.nodes.map((n) => n.generation))].sort((a, b) => a - b);
    const column = new Map(gens.map((g, i) => [g, i]));
    const pos = new Map();
    const oks = tree.nodes.filter((n) => n.status === "ok" && num(n.speedup)).map((n) => n.speedup);
    const lo = Math.min(...oks, 1), hi = Math.max(...oks, 1);
    let rows = 1;
    for (const g of gens) {
      const here = tree.nodes.filter((n) => n.generation === g);
      const key = (n) => {
        const ys = n.parents.filter((p) => pos.has(p)).map((p) => pos.get(p).row);
        return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : -1;
      };
      here.sort((a, b) => key(a) - key(b) || (b.speedup || 0) - (a.speedup || 0) || (a.id < b.id ? -1 : 1));
      here.forEach((n, i) => pos.set(n.id, { row: i, x: L + COL * column.get(g), y: T + ROW * i }));
      rows = Math.max(rows, here.length);
    }
    const W = L + COL * Math.max(gens.length, 1) + 20, H = T + ROW * rows + 10;
    const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "lineage" });
    for (const g of gens) root.appendChild(svg("text", { x: L + COL * column.get(g), y: 14, "text-anchor": "middle", text: `gen ${g}` }));
    const chain = new Set(tree.chain);
    const edges = svg("g", { class: "edges" });
    for (const n of tree.nodes) {
      for (const p of n.parents) {
        if (!pos.has(p)) continue;
        const a = pos.get(p), b = pos.get(n.id);
        const mid = (a.x + b.x) / 2;
        edges.appendChild(svg("path", { class: "edge" + (chain.has(n.id) && chain.has(p) ? " chain" : ""),
                                        d: `M${a.x},${a.y} C${mid},${a.y} ${mid},${b.y} ${b.x},${b.y}` }));
      }
    }
    root.appendChild(edges);
    for (const n of tree.nodes) {
      const at = pos.get(n.id);
      const fill = n.status === "ok" && num(n.speedup) ? speedupColor(n.speedup, lo, hi) : statusColor(n.status);
      const special = n.id === tree.best ? "best kernel, " : n.id === tree.baseline ? "baseline, " : "";
      const circle = svg("circle", { cx: at.x, cy: at.y, r: n.id === tree.best || n.id === tree.baseline ? 8 : 6, fill,
                                     stroke: n.id === tree.best ? "#e6b400" : "#fff", "stroke-width": n.id === tree.best ? 3 : 1 });
      const g = svg("g", { class: "node" + (n.id === selected ? " selected" : ""), "data-id": n.id, "data-status": n.status,
                           tabindex: 0, onclick: () => go({ kernel: n.id }) },
        circle,
        svg("title", { text: `${special}${n.id} · ${n.operator} · generation ${n.generation} · ${n.status}` +
                             (num(n.speedup) ? ` · ${fx(n.speedup)}` : "") }));
      root.appendChild(g);
    }
    byId("tree").replaceChildren(root);
    const legend = [el("span", { text: `${tree.nodes.length} kernels; ok kernels coloured by speedup: ` })];
    for (const [label, s] of [[fx(lo), lo], [fx(hi), hi]]) {
      const sw = el("span", { class: "swatch" });
      sw.style.background = speedupColor(s, lo, hi);
      legend.push(el("span", { class: "key" }, sw, label));
    }
    legend.push(el("span", { text: "· failures by status (below) · large gold ring: best kernel · thick edges: its lineage" }));
    byId("tree-legend").replaceChildren(...legend);
  }

  // One kernel: verdict, figures, plan, rationale, diff to its parents, source, profile.
  async function renderKernel(r) {
    const body = byId("kernel-body");
    const summary = state.summaries[r.run];
    if (!r.kernel || !summary) {
      body.replaceChildren(el("p", { class: "hint", text: "Click a node of the lineage tree." }));
      return;
    }
    const key = `${r.run}|${r.problem}|${r.kernel}`;
    let k = state.kernels[key];
    if (!k || k.version !== summary.version) {
      try {
        k = await getJSON(`/api/run/${r.run}/kernel?problem=${encodeURIComponent(r.problem || "")}&id=${encodeURIComponent(r.kernel)}`);
      } catch (err) {
        body.replaceChildren(el("p", { class: "error", text: `kernel ${r.kernel}: ${err.message || err}` }));
        return;
      }
      state.kernels[key] = k;
    }
    const now = route();
    if (now.kernel !== r.kernel || now.run !== r.run || now.problem !== r.problem) return;
    const badge = el("span", { class: "badge", text: k.status });
    badge.style.background = statusColor(k.status);
    const facts = el("dl", { class: "facts" });
    const fact = (label, ...value) => { facts.append(el("dt", { text: label }), el("dd", {}, ...value)); };
    fact("verdict", badge, k.best ? " best kernel of the run" : "");
    fact("figures", `${fx(k.speedup)} over the baseline · ${ms(k.latency_ms)} · ${pct(k.percent_of_peak)} of peak` +
                    (k.label ? ` (${k.label})` : ""));
    if (k.bottleneck) fact("bottleneck", el("span", { id: "kernel-bottleneck", text: k.bottleneck }));
    fact("operator", `${k.operator}, generation ${k.generation}` + (k.dialect ? `, ${k.dialect} NKI` : ""));
    fact("plan / what it did", el("span", { id: "kernel-note", text: k.note || "(no note)" }));
    fact("parents", ...(k.parents.length ? k.parents.map((p) => [kernelButton(k.problem, p.id), ` ${fx(p.speedup)} `]) : ["none (a baseline)"]));
    if (k.children.length) fact("children", ...k.children.slice(0, 40).map((c) => [kernelButton(k.problem, c.id), " "]),
                                k.children.length > 40 ? `… ${k.children.length - 40} more` : "");
    const parts = [el("h3", {}, `Kernel ${k.id} of ${k.problem}`), facts];
    if (k.error) parts.push(el("h3", { text: "Error" }), el("pre", { class: "wrap", id: "kernel-error", text: k.error }));
    for (const lesson of k.lessons) {
      parts.push(el("h3", { text: `Memory lesson (${lesson.kind} ${fx(lesson.speedup)}, ${short(lesson.parent_id)} → ${short(lesson.child_id)})` }),
                 el("div", { class: "rationale lesson-text", text: lesson.rationale || "(no rationale)" }));
    }
    if (k.diffs.length) {
      const pre = el("pre", { class: "diff", id: "kernel-diff" });
      const show = (i) => {
        pre.replaceChildren(...k.diffs[i].diff.split("\n").map((line) => el("span", {
          class: line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del"
            : line.startsWith("@@") ? "hunk" : "", text: line + "\n" })));
        tabs.querySelectorAll("button").forEach((b, j) => b.classList.toggle("active", i === j));
      };
      const tabs = el("div", { class: "tabs" }, k.diffs.map((d, i) => el("button", { type: "button", text: `diff to parent ${short(d.parent)}`, onclick: () => show(i) })));
      parts.push(el("h3", { text: "Diff to its parent" }), tabs, pre);
      show(0);
    }
    parts.push(el("h3", { text: "Source" }),
               el("pre", { id: "kernel-source", text: k.source === null ? "(the source is missing from the run folder)" : k.source }));
    const profile = Object.entries(k.profile || {});
    if (profile.length) {
      parts.push(el("h3", { text: "Profile" }), el("table", { class: "profile" },
        profile.map(([name, value]) => el("tr", {}, el("td", { text: name }),
          el("td", { class: "num", text: num(value) ? (Number.isInteger(value) ? int(value) : value.toPrecision(4)) : String(value) })))));
    }
    body.replaceChildren(...parts);
  }

  // The optimization memory: lessons newest first, each with the pair it came from.
  function renderMemory(r) {
    const run = state.runs.find((x) => x.id === r.run);
    const memory = state.memories[r.run];
    byId("memory-of").textContent = run ? `of run ${run.name}, newest first` : "";
    if (!memory) { byId("memory-body").replaceChildren(); return; }
    if (!memory.entries.length) {
      byId("memory-body").replaceChildren(el("p", { class: "hint", text: "The memory is empty." }));
      return;
    }
    byId("memory-body").replaceChildren(...memory.entries.map((e) => el("div", { class: `lesson ${e.kind}`, "data-child": e.child_id },
      el("div", { class: "head" }, `generation ${e.generation} · ${e.problem} · ${e.kind} ${fx(e.speedup)} · ${e.operator || "?"}` +
                                   (e.reversed ? " · read child → parent" : "") + " · pair ",
        kernelButton(e.problem, e.parent_id), " → ", kernelButton(e.problem, e.child_id)),
      el("div", { class: "rationale", text: e.rationale || "(no rationale)" }),
      e.diff ? el("details", {}, el("summary", { text: "diff" }), el("pre", { class: "diff", text: e.diff })) : null)));
  }

  function renderNotes() {
    const items = runsWithData().flatMap(({ run, summary }) => summary.notes.map((n) => el("li", { text: `${run.name}: ${n}` })));
    byId("notes").hidden = !items.length;
    byId("notes-body").replaceChildren(el("ul", { class: "notes" }, items));
  }

  window.addEventListener("hashchange", () => { render().catch((err) => { state.pollError = String(err); showStatus(); }); });
  poll();
})();
