// tessera dashboard: plain JavaScript, no framework, nothing loaded from
// anywhere but this server. Each page polls its /api/* answer every
// POLL_MS and re-renders; data is only ever written with textContent.
"use strict";

const POLL_MS = 2000;
const PAGE = 50;
const COLORS = ["#3b6fd8", "#2f9e6e", "#b7791f", "#9f3bd8", "#c53030", "#2b8aa8", "#6b7280", "#d8843b"];

let timer = null;
let generation = 0;  // increases with every route change: late answers of an old route are dropped

// ---- DOM helpers ---------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "text") e.textContent = String(v);
    else if (k === "cls") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
  return e;
}

function link(href, text) { return el("a", {href, text}); }

function mib(v) {
  if (v === null || v === undefined) return "—";
  return v >= 1024 ? (v / 1024).toFixed(1) + " GiB" : Math.round(v) + " MiB";
}
function pct(v) { return v === null || v === undefined ? "—" : (100 * v).toFixed(1) + " %"; }
function num(v) { return v === null || v === undefined ? "—" : String(Math.round(v * 10) / 10); }
function ago(ms) {
  if (!ms) return "never";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  return s < 90 ? s + " s ago" : Math.round(s / 60) + " min ago";
}
function status(text) { return el("span", {cls: "status " + text, text}); }

function bar(capacity, allocated, used) {
  const b = el("div", {cls: "bar"});
  const a = el("span", {cls: "alloc"});
  a.style.width = (capacity > 0 ? Math.min(100, 100 * allocated / capacity) : 0) + "%";
  b.appendChild(a);
  if (used !== null && used !== undefined) {
    const u = el("span", {cls: "used"});
    u.style.width = (capacity > 0 ? Math.min(100, 100 * used / capacity) : 0) + "%";
    b.appendChild(u);
  }
  return b;
}

function table(headers, rows, id) {
  const head = el("tr", {}, headers.map(h => el("th", {cls: h.num ? "num" : "", text: h.text || h})));
  const body = rows.length ? rows : [el("tr", {}, el("td", {colspan: headers.length, cls: "muted", text: "none"}))];
  return el("table", {id}, el("thead", {}, head), el("tbody", {}, body));
}

function td(v, cls, testid) { return el("td", {cls, "data-testid": testid}, v); }

function requestText(r) {
  if (!r || !r.gpus) return "—";
  const mem = r.memoryMiB ? mib(r.memoryMiB) : r.memoryPercent !== undefined ? r.memoryPercent + " %" : (r.memory || "");
  return r.gpus + " × (" + mem + ", " + r.cores + " % cores)";
}

// ---- fetching ------------------------------------------------------------

async function getJson(path) {
  const res = await fetch(path, {cache: "no-store"});
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  if (!res.ok) {
    const err = new Error((body && body.error) || ("HTTP " + res.status + " from " + path));
    err.status = res.status;
    throw err;
  }
  return body;
}

function setBanners(list) {
  const b = document.getElementById("banners");
  b.replaceChildren(...list.map(([kind, text, id]) => el("div", {cls: "banner " + kind, text, "data-testid": id})));
}

function statusBanners(o) {
  const list = [];
  const api = o.status.apiServer;
  if (!api.ok) {
    list.push(["bad", "API server unreachable (" + api.error + "): showing the cluster as last seen" +
               (api.okAt ? ", " + ago(api.okAt) : "") + ".", "api-down"]);
  }
  if (!o.status.ready) list.push(["warn", "tessera-scheduler is not ready: " + o.status.notReady, "not-ready"]);
  const u = o.status.usage;
  if (u.error) list.push(["warn", "Usage from Prometheus " + (u.url || "") + " failed: " + u.error, "usage-error"]);
  return list;
}

// ---- pages ---------------------------------------------------------------

function capacityCard(title, id, unit, capacity, allocated, used, extra) {
  const f = unit === "MiB" ? mib : v => num(v) + " %";
  return el("div", {cls: "card", id},
    el("h3", {text: title}),
    el("div", {cls: "big", "data-testid": id + "-allocated", text: f(allocated)}),
    el("div", {cls: "legend"}, "of ", el("span", {"data-testid": id + "-capacity", text: f(capacity)}),
       " allocated · ", el("span", {cls: "used", "data-testid": id + "-used", text: f(used)}), " in use"),
    bar(capacity, allocated, used),
    el("div", {cls: "legend"}, el("span", {cls: "alloc", text: "■ allocated " + pct(capacity ? allocated / capacity : 0)}),
       "  ", el("span", {cls: "used", text: "■ used " + (used === null ? "(no metrics)" : pct(capacity ? used / capacity : 0))})),
    extra || null);
}

async function overview(main) {
  const o = await getJson("/api/overview");
  setBanners(statusBanners(o));
  const f = o.fragmentation;
  const fragCard = el("div", {cls: "card", id: "fragmentation"},
    el("h3", {text: "Fragmentation"}),
    el("div", {cls: "big", "data-testid": "fragmentation-share", text: f.share === null ? "—" : pct(f.share)}),
    el("div", {cls: "legend", text: f.share === null ? f.reason :
      "of the free GPU capacity (" + num(f.freeMilliGpu / 1000) + " GPUs) cannot be used by the typical requests (" +
      (f.source === "learned" ? "learned by the tessera policy" : "of the GPU pods known") + ")"}),
    f.shapes ? el("div", {cls: "legend"}, f.shapes.slice(0, 5).map(s =>
      el("div", {text: Math.round(100 * s.weight) + " %: " + requestText(s)}))) : null);
  const n = o.nodes, g = o.gpus;
  const cards = el("div", {cls: "cards"},
    el("div", {cls: "card", id: "gpus"},
      el("h3", {text: "GPUs"}),
      el("div", {cls: "big", "data-testid": "gpus-total", text: g.total}),
      el("div", {cls: "legend", text: g.healthy + " healthy · " + g.withSlices + " with slices · " + g.idle +
                 " idle · " + g.slotsUsed + "/" + g.slotsTotal + " vGPU slots · " + g.reporting + " reporting usage"})),
    capacityCard("GPU memory", "memory", "MiB", o.memory.capacityMiB, o.memory.allocatedMiB, o.memory.usedMiB),
    capacityCard("GPU compute", "cores", "%", o.cores.capacity, o.cores.allocated, o.cores.used),
    fragCard,
    el("div", {cls: "card", id: "nodes-card"},
      el("h3", {text: "Nodes"}),
      el("div", {cls: "big", "data-testid": "nodes-total", text: n.total}),
      el("div", {cls: "legend", text: n.ok + " ok · " + n.stale + " stale · " + n.noInventory + " without inventory · " +
                 n.unreadable + " unreadable inventory"})),
    el("div", {cls: "card", id: "pods-card"},
      el("h3", {text: "GPU pods"}),
      el("div", {cls: "big", "data-testid": "pods-total", text: o.pods.total}),
      el("div", {cls: "legend", text: o.pods.bound + " bound · " + o.pods.pending + " pending · " + o.pods.problems +
                 " with problems"})));
  const pending = table(["Pod", "Request", "Waiting since", "Why"], o.pending.items.map(p =>
    el("tr", {}, td(p.namespace + "/" + p.name), td(requestText(p.request)), td(p.created || "—"),
       td(el("div", {cls: "message"}, el("b", {text: p.waiting.reason ? p.waiting.reason + ": " : ""}), p.waiting.message),
          "", "pending-reason"))), "pending");
  const problems = o.problems.nodes.map(x => el("tr", {}, td(link("#/node/" + encodeURIComponent(x.name), x.name)),
                                                  td(status(x.status)), td(x.message, "message")))
    .concat(o.problems.pods.map(x => el("tr", {}, td(x.namespace + "/" + x.name), td(status("bad")),
                                          td(x.message, "message problem"))));
  const usageErrors = (o.status.usage.errors || []).map(x =>
    el("tr", {}, td(link("#/node/" + encodeURIComponent(x.node), x.node)), td(x.error, "message")));
  main.replaceChildren(
    el("h1", {text: "Cluster overview"}), cards,
    el("h2", {}, "Pending GPU pods (", el("span", {"data-testid": "pending-count", text: o.pending.total}), ")"),
    pending,
    el("h2", {text: "Problems (" + (o.problems.nodesTotal + o.problems.podsTotal) + ")"}),
    table(["Object", "Status", "Message"], problems, "problems"),
    el("h2", {text: "Node metrics (" + o.status.usage.source + ")"}),
    el("p", {cls: "muted", text: o.status.usage.source === "nodes"
      ? o.status.usage.nodesOk + " endpoints answered, " + o.status.usage.nodesFailed + " did not; last round " +
        ago(o.status.usage.updatedAt)
      : "Prometheus " + o.status.usage.url + "; last round " + ago(o.status.usage.updatedAt)}),
    usageErrors.length ? table(["Node", "Error"], usageErrors, "usage-errors") : null,
    el("h2", {text: "GPU models"}),
    table(["Model", {text: "GPUs", num: true}, {text: "Memory", num: true}],
          o.models.map(m => el("tr", {}, td(m.model), td(m.gpus, "num"), td(mib(m.memoryMiB), "num"))), "models"));
}

function pager(total, offset, go) {
  const last = Math.max(0, total - 1);
  return el("span", {cls: "pager"},
    el("button", {text: "‹ prev", disabled: offset <= 0 ? "" : null, onclick: () => go(Math.max(0, offset - PAGE))}),
    " " + (total ? offset + 1 : 0) + "–" + Math.min(total, offset + PAGE) + " of " + total + " ",
    el("button", {text: "next ›", disabled: offset + PAGE > last ? "" : null, onclick: () => go(offset + PAGE)}));
}

function routeWith(base, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== undefined && v !== 0) q.set(k, v);
  const s = q.toString();
  return base + (s ? "?" + s : "");
}

async function nodes(main, params) {
  const offset = Number(params.get("offset") || 0), query = params.get("q") || "", sort = params.get("sort") || "name";
  const d = await getJson("/api/nodes?" + new URLSearchParams({offset, limit: PAGE, q: query, sort}));
  await bannersFromOverview();
  const go = (o, q = query, s = sort) => { location.hash = routeWith("#/nodes", {offset: o, q, sort: s === "name" ? "" : s}); };
  const search = el("input", {placeholder: "name contains…", value: query, id: "node-search"});
  search.addEventListener("change", () => go(0, search.value, sort));
  const sorter = el("select", {id: "node-sort", onchange: e => go(0, query, e.target.value)},
    ["name", "status", "allocated", "fragmentation"].map(s => {
      const o = el("option", {value: s, text: "sort by " + s});
      if (s === sort) o.selected = true;
      return o;
    }));
  const rows = d.items.map(n => el("tr", {},
    td(link("#/node/" + encodeURIComponent(n.name), n.name)),
    td(status(n.status)),
    td(n.gpus + (n.healthyGpus !== n.gpus ? " (" + n.healthyGpus + " healthy)" : ""), "num"),
    td(el("div", {}, mib(n.memory.allocatedMiB) + " / " + mib(n.memory.capacityMiB) + " · used " + mib(n.memory.usedMiB),
          bar(n.memory.capacityMiB, n.memory.allocatedMiB, n.memory.usedMiB))),
    td(num(n.cores.allocated) + " / " + num(n.cores.capacity) + " · used " + num(n.cores.used), "num"),
    td(n.slots.used + " / " + n.slots.total, "num"),
    td(n.pods, "num"),
    td(pct(n.fragmentation), "num"),
    td([n.message, n.metrics.error ? "metrics: " + n.metrics.error : ""].filter(Boolean).join("\n"),
       "message" + (n.message ? " problem" : ""))));
  main.replaceChildren(el("h1", {text: "Nodes"}),
    el("div", {cls: "toolbar"}, search, sorter, pager(d.total, offset, o => go(o))),
    table(["Node", "Status", {text: "GPUs", num: true}, "Memory allocated / capacity", {text: "Cores %", num: true},
           {text: "vGPU slots", num: true}, {text: "Pods", num: true}, {text: "Fragmentation", num: true}, "Message"],
          rows, "nodes"));
}

function podRows(items, withNode) {
  return items.map(p => el("tr", {},
    td(p.namespace + "/" + p.name, "", "pod-name"),
    td(status(p.state)),
    withNode ? td(p.node ? link("#/node/" + encodeURIComponent(p.node), p.node) : "—") : null,
    td(requestText(p.request)),
    td(p.slices.length ? el("div", {}, p.slices.map(s => el("div", {},
      link("#/gpu/" + encodeURIComponent(p.node) + "/" + encodeURIComponent(s.uuid), s.uuid.slice(0, 12) + "…"),
      " " + s.container + ": " + (s.mig ? "MIG " + s.mig.profile + " at " + s.mig.start + ", " + mib(s.memoryMiB)
                                         : mib(s.memoryMiB) + ", " + s.cores + " %") +
      (s.usage ? " · uses " + mib(s.usage.memoryUsedMiB) + ", " + num(s.usage.computeShare) + " %" : "")))) : "—"),
    td(mib(p.memoryUsedMiB), "num"),
    td(p.problem ? p.problem : p.waiting ? (p.waiting.reason + ": " + p.waiting.message) : "",
       "message" + (p.problem ? " problem" : ""))));
}

async function pods(main, params) {
  const offset = Number(params.get("offset") || 0), ns = params.get("ns") || "", state = params.get("state") || "";
  const d = await getJson("/api/pods?" + new URLSearchParams({offset, limit: PAGE, ns, state}));
  await bannersFromOverview();
  const go = (o, n = ns, s = state) => { location.hash = routeWith("#/pods", {offset: o, ns: n, state: s}); };
  const nsInput = el("input", {placeholder: "namespace", value: ns, id: "pod-ns"});
  nsInput.addEventListener("change", () => go(0, nsInput.value, state));
  const stateSel = el("select", {id: "pod-state", onchange: e => go(0, ns, e.target.value)},
    ["", "pending", "bound", "problem"].map(s => {
      const o = el("option", {value: s, text: s || "all states"});
      if (s === state) o.selected = true;
      return o;
    }));
  main.replaceChildren(el("h1", {text: "GPU pods"}),
    el("div", {cls: "toolbar"}, nsInput, stateSel, pager(d.total, offset, o => go(o))),
    table(["Pod", "State", "Node", "Request", "Slices (limit · use)", {text: "Memory used", num: true}, "Message"],
          podRows(d.items, true), "pods"));
}

async function namespaces(main) {
  const d = await getJson("/api/namespaces");
  await bannersFromOverview();
  main.replaceChildren(el("h1", {text: "Namespaces"}),
    table(["Namespace", {text: "Pods", num: true}, {text: "Pending", num: true}, {text: "vGPUs", num: true},
           {text: "MIG", num: true}, {text: "Memory allocated", num: true}, {text: "Memory used", num: true}, {text: "Cores %", num: true},
           {text: "Problems", num: true}],
      d.items.map(n => el("tr", {},
        td(link("#/pods?ns=" + encodeURIComponent(n.name), n.name)), td(n.pods, "num"), td(n.pending, "num"),
        td(n.slices, "num"), td(n.migInstances, "num"), td(mib(n.memoryMiB), "num", "ns-memory-" + n.name), td(mib(n.memoryUsedMiB), "num"),
        td(n.cores, "num"), td(n.problems, "num"))), "namespaces"));
}

// One MIG instance: created (the node lists it) or pending (the scheduler holds
// it for a pod; tessera-node creates it when the container starts).
const MIG_HEADER = ["GPU", "Profile", "Placement", {text: "Memory", num: true}, "MIG device", "Pod"];
function migRow(nodeName, g, m) {
  const holder = m.pod ? m.pod + (m.container ? "/" + m.container : "") : m.usedBy || "free";
  return el("tr", {},
    td(link("#/gpu/" + encodeURIComponent(nodeName) + "/" + encodeURIComponent(g.uuid), String(g.index))),
    td(m.profile, "", "mig-profile"), td(m.start + ":" + (m.size === null ? "?" : m.size)),
    td(mib(m.memoryMiB), "num"),
    td(m.uuid ? el("span", {}, m.uuid + " ", status(m.healthy ? "ok" : "bad")) : "not created yet", "", "mig-state"),
    td(holder, "", "mig-pod"));
}

async function node(main, name) {
  const n = await getJson("/api/nodes/" + encodeURIComponent(name));
  await bannersFromOverview();
  const gpus = n.gpuList.map(g => el("tr", {},
    td(link("#/gpu/" + encodeURIComponent(n.name) + "/" + encodeURIComponent(g.uuid), g.index + ": " + g.uuid)),
    td(g.model), td(status(g.healthy ? (g.heldBy ? "warn" : "ok") : "bad")),
    td(el("div", {}, mib(g.allocated.memoryMiB) + " / " + mib(g.memoryMiB) + " · used " + mib(g.memoryUsedMiB),
          bar(g.memoryMiB, g.allocated.memoryMiB, g.memoryUsedMiB))),
    td(g.migInstances ? "—" : g.allocated.cores + " / " + g.cores + " · util " + num(g.utilization), "num"),
    td(g.migInstances ? g.mode + " · " + g.migInstances.length + " MIG instance(s)"
       : g.replicas ? g.mode + " · " + g.replicas + " replicas (kube-scheduler)"
       : (g.mode === "vgpu" ? "" : g.mode + " · ") + g.allocated.slots + " / " + g.slots,
       "num", "gpu-mode")));
  const migRows = n.gpuList.flatMap(g => (g.migInstances || []).map(m => migRow(n.name, g, m)));
  // null children (absent parts) are dropped: replaceChildren would print them.
  main.replaceChildren(...[
    el("h1", {}, "Node ", el("span", {text: n.name}), " ", status(n.status)),
    n.message ? el("p", {cls: "problem message", "data-testid": "node-message", text: n.message}) : null,
    el("dl", {cls: "kv"},
      el("dt", {text: "heartbeat"}), el("dd", {text: n.heartbeat || "—"}),
      el("dt", {text: "memory"}), el("dd", {text: mib(n.memory.allocatedMiB) + " allocated of " + mib(n.memory.capacityMiB) +
                                          ", " + mib(n.memory.usedMiB) + " in use"}),
      el("dt", {text: "fragmentation"}), el("dd", {text: pct(n.fragmentation)}),
      el("dt", {text: "metrics"}), el("dd", {"data-testid": "node-metrics",
        text: n.metrics.source === "prometheus" ? "from Prometheus" :
              n.metrics.state === "ok" ? "ok, " + n.metrics.ageSeconds + " s old" :
              n.metrics.state + (n.metrics.error ? ": " + n.metrics.error : "")})),
    el("h2", {text: "GPUs (" + n.gpuList.length + ")"}),
    table(["GPU", "Model", "Health", "Memory allocated / capacity", {text: "Cores %", num: true},
           {text: "vGPU slots", num: true}], gpus, "gpus"),
    migRows.length ? el("h2", {text: "MIG instances (" + migRows.length + ")"}) : null,
    migRows.length ? table(MIG_HEADER, migRows, "node-mig") : null,
    el("h2", {text: "Pods (" + n.podList.length + ")"}),
    table(["Pod", "State", "Request", "Slices (limit · use)", {text: "Memory used", num: true}, "Message"],
          podRows(n.podList, false), "node-pods")].filter(c => c !== null));
}

function lineChart(series, width, height, maxY) {
  const pad = 30;
  const all = series.flatMap(s => s.points);
  const chart = svg("svg", {class: "chart", width, height, viewBox: "0 0 " + width + " " + height,
                            role: "img", "aria-label": "compute share over time"});
  chart.appendChild(svg("line", {class: "axis", x1: pad, y1: height - pad, x2: width - 10, y2: height - pad}));
  chart.appendChild(svg("line", {class: "axis", x1: pad, y1: 10, x2: pad, y2: height - pad}));
  chart.appendChild(svg("text", {x: 2, y: 14}, maxY + " %"));
  chart.appendChild(svg("text", {x: 2, y: height - pad}, "0"));
  if (!all.length) {
    chart.appendChild(svg("text", {x: width / 2 - 60, y: height / 2}, "no usage reported yet"));
    return chart;
  }
  const t0 = Math.min(...all.map(p => p[0])), t1 = Math.max(...all.map(p => p[0]));
  const x = t => pad + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (width - pad - 10);
  const y = v => height - pad - Math.min(1, v / maxY) * (height - pad - 10);
  series.forEach((s, i) => {
    const d = s.points.map((p, k) => (k ? "L" : "M") + x(p[0]).toFixed(1) + " " + y(p[1]).toFixed(1)).join(" ");
    chart.appendChild(svg("path", {d, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 2}));
    chart.appendChild(svg("text", {x: pad + 8, y: 14 + 13 * (i + 1), fill: COLORS[i % COLORS.length]}, s.name));
  });
  chart.appendChild(svg("text", {x: width - 120, y: height - 8}, Math.round((t1 - t0) / 1000) + " s shown"));
  return chart;
}

async function gpu(main, nodeName, uuid) {
  const g = await getJson("/api/nodes/" + encodeURIComponent(nodeName) + "/gpus/" + encodeURIComponent(uuid));
  await bannersFromOverview();
  const series = [{name: "GPU utilization", points: g.history}].concat(
    g.slices.filter(s => s.usage).map(s => ({name: s.namespace + "/" + s.pod + "/" + s.container, points: s.usage.history})));
  const rows = g.slices.map(s => el("tr", {},
    td(s.namespace + "/" + s.pod, "", "slice-pod"), td(s.container + (s.init ? " (init)" : "")),
    td(mib(s.memoryMiB), "num", "slice-limit"),
    td(s.usage ? mib(s.usage.memoryUsedMiB) : "—", "num", "slice-used"),
    td(s.cores + " %", "num"),
    td(s.usage ? num(s.usage.computeShare) + " %" : "—", "num", "slice-share")));
  const migRows = (g.migInstances || []).map(m => migRow(g.node, g, m));
  main.replaceChildren(...[
    el("h1", {}, "GPU ", el("span", {text: g.index + " · " + g.uuid})),
    el("p", {}, "on ", link("#/node/" + encodeURIComponent(g.node), g.node),
       " · " + g.model + " · mode " + g.mode + (g.replicas ? " (" + g.replicas + " replicas)" : "") + " · ",
       status(g.healthy ? "ok" : "bad"), g.heldBy ? " held whole by " + g.heldBy : "",
       g.overcommit ? el("span", {cls: "problem", text: " overcommitted: " + g.overcommit}) : null),
    el("div", {cls: "cards"},
      capacityCard("Memory", "gpu-memory", "MiB", g.memoryMiB, g.allocated.memoryMiB, g.memoryUsedMiB),
      g.migInstances ? null :
      capacityCard("Compute", "gpu-cores", "%", g.cores, g.allocated.cores, g.utilization,
                   el("div", {cls: "legend", text: g.allocated.slots + " of " + g.slots + " vGPU slots"}))),
    g.migInstances ? el("h2", {text: "MIG instances (" + migRows.length + ") · " + g.mode}) : null,
    g.migInstances ? table(MIG_HEADER, migRows, "gpu-mig") : null,
    g.migInstances ? null : el("h2", {text: "Slices (" + g.slices.length + ")"}),
    g.migInstances ? null :
    table(["Pod", "Container", {text: "Memory limit", num: true}, {text: "Memory used", num: true},
           {text: "Cores limit", num: true}, {text: "Compute share", num: true}], rows, "slices"),
    el("h2", {text: "Compute share over time"}),
    lineChart(series, 760, 220, 100)].filter(c => c !== null));
}

let lastOverview = null;
async function bannersFromOverview() {
  try {
    lastOverview = await getJson("/api/overview");
    setBanners(statusBanners(lastOverview));
  } catch (e) { /* the page's own request reports failures */ }
}

// ---- routing -------------------------------------------------------------

function parseRoute() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return {parts, params: new URLSearchParams(query || "")};
}

async function render(myGeneration) {
  const {parts, params} = parseRoute();
  const main = document.getElementById("main");
  const page = parts[0] || "overview";
  document.body.dataset.route = page;
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.route === page || (page === "node" && a.dataset.route === "nodes") ||
                                 (page === "gpu" && a.dataset.route === "nodes"));
  }
  const target = el("div");
  try {
    if (page === "overview") await overview(target);
    else if (page === "nodes") await nodes(target, params);
    else if (page === "node" && parts[1]) await node(target, parts[1]);
    else if (page === "gpu" && parts[1] && parts[2]) await gpu(target, parts[1], parts[2]);
    else if (page === "pods") await pods(target, params);
    else if (page === "namespaces") await namespaces(target);
    else target.replaceChildren(el("h1", {text: "No such page"}), el("p", {}, link("#/", "Back to the overview")));
    if (myGeneration !== generation) return;
    main.replaceChildren(...target.childNodes);
    document.body.dataset.state = "loaded";
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    return true;
  } catch (e) {
    if (myGeneration !== generation) return;
    if (e.status === 404 || e.status === 400) {
      main.replaceChildren(el("h1", {text: e.status === 404 ? "Not found" : "Bad request"}),
                           el("p", {cls: "problem", "data-testid": "error", text: e.message}));
      document.body.dataset.state = "loaded";
      return false;  // asking again will not change the answer
    } else {
      // Keep what was shown; say why it is not current.
      setBanners([["bad", "Cannot reach tessera-scheduler's dashboard API: " + e.message +
                   " — showing the last answer.", "dashboard-down"]]);
      document.body.dataset.state = "error";
    }
  }
  return true;
}

function navigate() {
  generation += 1;
  const mine = generation;
  if (timer) clearTimeout(timer);
  const loop = async () => {
    const again = await render(mine);
    if (again && mine === generation) timer = setTimeout(loop, POLL_MS);
  };
  loop();
}

window.addEventListener("hashchange", navigate);
navigate();
