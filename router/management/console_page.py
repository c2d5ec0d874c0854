"""The web console's page (router.management.console): one HTML file, no external resources.

It fetches ``/api/state`` every second and redraws: the mesh graph (SVG, nodes on a circle, an edge per
inter-router link), one card per node and the addresses. Element ids the tests read: ``node-count``,
``edge-count``, ``status``; each node's circle has ``data-node``.
"""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>meshrouter console</title>
<style>
  body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; margin: 0 0 .3em; }
  #status { color: #666; margin-bottom: 1em; }
  #status.down { color: #b00; }
  .row { display: flex; gap: 2em; flex-wrap: wrap; align-items: flex-start; }
  svg { border: 1px solid #ddd; border-radius: 6px; background: #fafafa; }
  circle { fill: #2d6cdf; stroke: #14418f; stroke-width: 2; }
  circle.connected { fill: #1d9a5b; stroke: #0f5d36; }
  line { stroke: #888; stroke-width: 2; }
  text.label { fill: white; font-weight: bold; text-anchor: middle; dominant-baseline: central; }
  .cards { display: flex; gap: 1em; flex-wrap: wrap; }
  .card { border: 1px solid #ddd; border-radius: 6px; padding: .6em .9em; min-width: 14em; }
  .card h2 { font-size: 1.1em; margin: 0 0 .4em; }
  table { border-collapse: collapse; margin-top: .5em; }
  td, th { padding: 2px 8px; text-align: left; border-bottom: 1px solid #eee; }
  td.n { text-align: right; font-variant-numeric: tabular-nums; }
</style>
</head>
<body>
<h1>meshrouter console</h1>
<div id="status">connecting…</div>
<div class="row">
  <div>
    <svg id="graph" width="360" height="360" viewBox="0 0 360 360"></svg>
    <div><span id="node-count">0</span> nodes, <span id="edge-count">0</span> links</div>
  </div>
  <div class="cards" id="cards"></div>
</div>
<h2>Addresses</h2>
<table id="addresses"><thead><tr><th>address</th><th>node</th><th>distribution</th><th>local consumers</th>
<th>remote</th><th>in</th><th>out</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const SVG = "http://www.w3.org/2000/svg";
function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
}
function drawGraph(state) {
  const svg = document.getElementById("graph");
  svg.replaceChildren();
  const names = Object.keys(state.nodes).sort();
  const pos = {};
  names.forEach((n, i) => {
    const a = 2 * Math.PI * i / Math.max(names.length, 1) - Math.PI / 2;
    pos[n] = [180 + 130 * Math.cos(a), 180 + 130 * Math.sin(a)];
  });
  for (const [a, b] of state.edges) {
    if (!pos[a] || !pos[b]) continue;
    svg.appendChild(el("line", {x1: pos[a][0], y1: pos[a][1], x2: pos[b][0], y2: pos[b][1]}));
  }
  for (const n of names) {
    const g = el("g", {"data-node": n});
    g.appendChild(el("circle", {cx: pos[n][0], cy: pos[n][1], r: 24, "data-node": n,
                                class: n === state.connectedTo ? "connected" : ""}));
    g.appendChild(el("text", {x: pos[n][0], y: pos[n][1], class: "label"}, n));
    const rate = state.nodes[n].rates || {};
    g.appendChild(el("title", {}, `${n}: ${state.nodes[n].connections} connections, ` +
                                  `${rate.deliveriesIngress || 0} msg/s in`));
    svg.appendChild(g);
  }
  document.getElementById("node-count").textContent = names.length;
  document.getElementById("edge-count").textContent = state.edges.length;
}
function drawCards(state) {
  const cards = [];
  for (const n of Object.keys(state.nodes).sort()) {
    const s = state.nodes[n], c = s.counters, r = s.rates || {};
    cards.push(`<div class="card" data-node="${esc(n)}"><h2>${esc(n)}</h2><table>
      <tr><td>connections</td><td class="n">${s.connections}</td></tr>
      <tr><td>links</td><td class="n">${s.links}</td></tr>
      <tr><td>addresses</td><td class="n">${s.addressCount}</td></tr>
      <tr><td>msg/s in / out</td>
          <td class="n">${r.deliveriesIngress ?? "–"} / ${r.deliveriesEgress ?? "–"}</td></tr>
      <tr><td>transit msg/s</td><td class="n">${r.deliveriesTransit ?? "–"}</td></tr>
      <tr><td>accepted</td><td class="n">${c.acceptedDeliveries}</td></tr>
      <tr><td>released / modified</td>
          <td class="n">${c.releasedDeliveries} / ${c.modifiedDeliveries}</td></tr>
      <tr><td>rejected</td><td class="n">${c.rejectedDeliveries}</td></tr>
      </table><details><summary>connections</summary><table>${s.connectionRows.map((x) =>
        `<tr><td>${esc(x.host ?? "")}</td><td>${esc(x.role)}</td><td class="n">${x.linkCount} links</td></tr>`
      ).join("")}</table></details></div>`);
  }
  document.getElementById("cards").innerHTML = cards.join("");
}
function drawAddresses(state) {
  const rows = [];
  for (const n of Object.keys(state.nodes).sort()) {
    for (const a of state.nodes[n].addresses) {
      rows.push(`<tr><td>${esc(a.identity)}</td><td>${esc(n)}</td><td>${esc(a.distribution)}</td>
        <td class="n">${a.subscriberCount}</td><td class="n">${a.remoteCount}</td>
        <td class="n">${a.deliveriesIngress}</td><td class="n">${a.deliveriesEgress}</td></tr>`);
    }
  }
  document.querySelector("#addresses tbody").innerHTML = rows.join("");
}
async function refresh() {
  const status = document.getElementById("status");
  try {
    const state = await (await fetch("/api/state", {cache: "no-store"})).json();
    if (!state.ok) throw new Error(state.error || "no reading");
    drawGraph(state); drawCards(state); drawAddresses(state);
    status.className = "";
    status.textContent = `through ${state.bus} (node ${state.connectedTo}), ` +
                         `read at ${new Date(state.time * 1000).toLocaleTimeString()}`;
  } catch (err) {
    status.className = "down";
    status.textContent = `cannot read the mesh: ${err.message}`;
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
"""
