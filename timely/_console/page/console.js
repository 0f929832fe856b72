// The console page: draws nothing itself. The graph comes as SVG from the server; every
// server-sent event carries the whole view (api/state), which this script writes into the
// page: stage colours and figures, the tables, the stall explanation.
"use strict";

const token = new URLSearchParams(location.search).get("token");
const q = token ? "?token=" + encodeURIComponent(token) : "";
document.getElementById("json").href = "api/state" + q;
document.getElementById("metrics").href = "metrics" + q;

let graph = null;
let nodes = {};  // stage index -> {group, shapes, detail}
let last = null;

function fmt(x) {
  if (x === null || x === undefined) return "–";
  const a = Math.abs(x);
  if (a >= 1e9) return (x / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (x / 1e6).toFixed(1) + "M";
  if (a >= 1e3) return (x / 1e3).toFixed(1) + "k";
  return Number.isInteger(x) ? String(x) : x.toFixed(1);
}
function bytes(x) { return x === null || x === undefined ? "–" : fmt(x) + "B"; }
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}
function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows.map(([cells, cls, rowId]) => {
    const tr = el("tr", undefined, cls);
    if (rowId) tr.id = rowId;
    for (const c of cells) tr.appendChild(el("td", String(c)));
    return tr;
  }));
}
// white (idle) to green (busy): by the share of time in the stage's callbacks, or (for a
// stage too quick to be caught by the profiler) by records per second on a log scale
function activity(share, rate) {
  let t = Math.min(1, share * 1.5);
  if (t < 0.05 && rate > 0) t = Math.min(0.3, Math.log10(1 + rate) / 20);
  if (t <= 0) return "#ffffff";
  const mix = (a, b) => Math.round(a + (b - a) * t);
  return `rgb(${mix(234, 46)},${mix(247, 160)},${mix(236, 67)})`;
}

async function loadGraph() {
  const response = await fetch("api/graph" + q);
  graph = await response.json();
  const box = document.getElementById("graph");
  if (graph.svg) {
    box.innerHTML = graph.svg;
    for (const g of box.querySelectorAll("g.node")) {
      const title = g.querySelector("title");
      const index = Number(title.textContent.slice(1));
      const stage = graph.stages[index];
      g.id = "stage-" + index;
      g.dataset.stage = stage.name;
      const texts = g.querySelectorAll("text");
      const detail = texts.length > 1 ? texts[texts.length - 1] : null;
      if (detail) detail.textContent = "";
      nodes[index] = { group: g, shapes: g.querySelectorAll("polygon, ellipse, path"), detail };
    }
  } else {
    box.textContent = "(Graphviz's dot is not installed here, so the graph is listed instead: " +
      graph.stages.map(s => s.name).join(", ") + ")";
  }
  if (last) update(last);
}

function update(view) {
  last = view;
  const status = document.getElementById("status");
  const stalled = view.stall !== null;
  status.textContent = view.complete ? "complete" : stalled ? "stalled" : "running";
  status.className = "status " + (view.complete ? "complete" : stalled ? "stalled" : "running");
  const elapsed = view.process_stats.length ? view.process_stats[0].elapsed : 0;
  document.getElementById("summary").textContent =
    `${view.reporting}/${view.processes} process(es) reporting · ${elapsed.toFixed(0)} s`;

  const involved = new Set(stalled ? view.stall.stages : []);
  const waiting = new Set(stalled ? view.stall.waiting.map(w => w.stage) : []);
  for (const s of view.stages) {
    const n = nodes[s.index];
    if (!n) continue;
    const colour = activity(s.busy_share, s.in_per_s + s.out_per_s);
    for (const shape of n.shapes) shape.setAttribute("fill", colour);
    if (n.detail) n.detail.textContent = `${fmt(s.in_per_s)}/s → ${fmt(s.out_per_s)}/s  q ${s.queued}`;
    n.group.classList.toggle("stalled", involved.has(s.index) && !waiting.has(s.index));
    n.group.classList.toggle("waiting", waiting.has(s.index));
  }
  if (stalled && window.stallShown === undefined) {
    // when the page first said so, against when the scheduler went idle (both wall clocks)
    window.stallShown = { at: Date.now() / 1000, idleSince: view.stall.idle_since, text: view.stall.text };
  }
  const stallBox = document.getElementById("stall");
  stallBox.hidden = !stalled;
  document.getElementById("stall-text").textContent = stalled ? view.stall.text : "";

  fill("stages", view.stages.map(s => [[
    s.name, fmt(s.in_per_s), fmt(s.out_per_s), fmt(s.records_in), fmt(s.records_out), s.queued,
    s.pending_notifications, s.notifications, s.callback_seconds.toFixed(2) + " s",
    Math.round(100 * s.busy_share) + "%", fmt(s.state_rows), bytes(s.state_bytes),
  ], involved.has(s.index) ? "stalled" : "", "stage-row-" + s.index]));
  const progress = [];
  for (const i of view.inputs) progress.push([["input", i.name, i.closed ? "closed" : "epoch " + i.epoch]]);
  for (const p of view.probes) progress.push([["probe", p.name, p.frontier.join(" ") || "done"]]);
  for (const l of view.loops) {
    progress.push([["loop", l.name, l.active.length ? "at " + l.active.join(" ") : "idle"]]);
  }
  fill("progress", progress);
  const done = [];
  for (const [name, list] of Object.entries(view.completions)) {
    for (const [epoch, at, records] of list.slice(-8).reverse()) done.push([[name, epoch, at.toFixed(2), fmt(records)]]);
  }
  fill("completions", done);
  fill("processes", view.process_stats.map(p => [[
    p.process, p.cpu_percent === null ? "–" : p.cpu_percent + "%", bytes(p.rss_bytes),
    bytes(p.data_bytes_sent ?? null) + (p.data_frames_sent !== undefined ? ` / ${fmt(p.data_frames_sent)} frames` : ""),
    bytes(p.data_bytes_received ?? null), bytes(p.progress_bytes_sent ?? null), p.queued_messages,
    p.backpressure_waits, p.quiet ? "quiet!" : p.idle_for === null ? "busy" : p.idle_for.toFixed(1) + " s",
  ], p.quiet ? "stalled" : ""]));
  fill("workers", view.workers.map(w => [[
    w.worker, w.process, w.callback_seconds.toFixed(3), w.queued_messages, w.pending_notifications,
  ]]));
  fill("frontier", view.frontier.map(f => [[f.where, f.time, f.count]]));
}

function connect() {
  const events = new EventSource("api/events" + q);
  events.onmessage = (e) => update(JSON.parse(e.data));
  events.onerror = () => {
    const status = document.getElementById("status");
    if (last && last.complete) return;
    status.textContent = "disconnected";
    status.className = "status lost";
  };
}

loadGraph();
connect();
