// The fleet page: reads the aggregator's own API with the person's bearer token (same authentication and
// roles as the API) and polls it, so what it shows is never older than one interval. No build step: plain
// browser JavaScript, shipped in the Python package.
"use strict";

const TOKEN_KEY = "gpuhealth-token";
const POLL_MS = Number(new URLSearchParams(location.search).get("interval") || 3) * 1000;
const STATES = ["healthy", "degraded", "unhealthy", "unknown", "quarantined", "testing", "stale"];
const OPERATOR_ROLES = new Set(["operator", "admin"]);
const EXPANDED_INCIDENTS = 10; // timelines fetched for the newest open incidents only
const ZONE_KEY = "gpuhealth-times"; // "utc" (the default) or "local", chosen in the header
const GROUP_ABOVE = 64; // more nodes than this: the grid is grouped (by pool, else zone, else name range)
const OPEN_GROUPS_UP_TO = 200; // a fleet this small opens every group; a larger one only those with trouble
const RANGE = 100; // nodes per group when they carry no pool or zone
const CLUSTER_MS = 5000; // one transition's lines: within this of the first (aggregator/timeline.py)
const MARKS = new Set(["condition", "label", "annotate", "event", "taint", "device-taint", "cordon"]);
const UNMARKS = new Set(["untaint", "device-untaint", "uncordon"]);

const $ = (id) => document.getElementById(id);
const state = { role: null, who: null, grid: new Map(), groups: new Map(), suffix: "", timer: null,
                filters: { state: "", pool: "", zone: "", name: "" } };
window.gpuhealth = { lastRefreshMs: null, refreshes: 0 }; // read by the browser tests and benchmarks

function token() { return sessionStorage.getItem(TOKEN_KEY); }

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const headers = { Accept: "application/json", Authorization: `Bearer ${token()}` };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const answer = await fetch(path, { ...options, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  if (answer.status === 401) throw new Unauthorized();
  const data = answer.headers.get("content-type")?.includes("json") ? await answer.json() : await answer.text();
  if (!answer.ok) throw new Error(typeof data === "object" && data.detail ? detailText(data.detail) : `HTTP ${answer.status}`);
  return data;
}

function detailText(detail) { return typeof detail === "string" ? detail : JSON.stringify(detail); }

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value; else if (key === "text") node.textContent = value; else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function age(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}

// an unknown reading with its age ("unknown for 14 min"): a stale verdict is never taken for a fresh one
function findingStatus(finding) {
  return finding.status === "unknown" && finding.since ? `unknown for ${age(finding.since)}` : finding.status;
}

function localTimes() { return sessionStorage.getItem(ZONE_KEY) === "local"; }

// A time to the second, in one zone everywhere on the page: UTC ("18:24:43Z"), or this browser's on request.
function clock(iso) {
  const moment = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  if (localTimes()) {
    const day = `${pad(moment.getMonth() + 1)}-${pad(moment.getDate())}`;
    return `${day} ${pad(moment.getHours())}:${pad(moment.getMinutes())}:${pad(moment.getSeconds())}`;
  }
  return moment.toISOString().slice(5, 19).replace("T", " ") + "Z";
}

function ago(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 90) return `${Math.round(seconds)} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

function when(iso) { return iso ? `${clock(iso)} (${ago(iso)})` : ""; }

// --- sign-in and the caller's role ---------------------------------------------------------------------

function showLogin(message) {
  clearInterval(state.timer);
  $("login").hidden = false;
  $("fleet-view").hidden = true;
  $("node-view").hidden = true;
  $("login-error").textContent = message || "";
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  start();
});

async function whoAmI() {
  try {
    const me = await api("/v1/whoami");
    state.role = me.role;
    state.who = me.name;
  } catch (error) {
    if (error instanceof Unauthorized) throw error;
    state.role = "operator"; // an aggregator without roles: one token opens everything
    state.who = null;
  }
  $("who").textContent = state.who ? `${state.who} (${state.role})` : "";
}

// --- the fleet -----------------------------------------------------------------------------------------

function renderSummary(fleet) {
  const parts = [el("span", { text: `${fleet.nodes} nodes, ${fleet.gpus} GPUs` })];
  for (const name of STATES) {
    const count = fleet.by_state[name];
    if (count) parts.push(el("span", { class: `count-${name}`, "data-state": name, text: `${name} ${count}` }));
  }
  parts.push(el("span", { text: `open incidents ${fleet.open_incidents}` }));
  const profiles = Object.entries(fleet.profiles || {}).sort(([a], [b]) => (a < b ? -1 : 1));
  if (profiles.length) {
    parts.push(el("span", { id: "profiles", text: `profiles: ${profiles.map(([name, count]) => `${name} ${count}`).join(", ")}` }));
  }
  $("summary").replaceChildren(...parts);
  const breaker = fleet.breaker;
  const tripped = breaker.state === "tripped";
  $("breaker").className = tripped ? "breaker tripped" : "breaker";
  $("breaker").dataset.state = breaker.state;
  $("breaker").textContent = tripped
    ? `Circuit breaker TRIPPED ${when(breaker.tripped_at)}: ${breaker.reason || ""}`
    : `Circuit breaker closed (${breaker.recent_unhealthy} of ${breaker.gpu_nodes} nodes turned unhealthy in the window)`;
  const budget = fleet.budget;
  $("budget").textContent = `Remediation budget: ${budget.in_use} of ${budget.limit} in use`;
}

function nodeSignature(node) { return `${node.state}|${node.gpus}|${node.zone}|${node.pool}|${state.suffix}`; }

// The end every node name shares from a dot on (".us-west-2.compute.internal"): said once above the grid,
// so that each tile shows the part that tells the nodes apart, whole — wrapped if long, never cut.
function commonSuffix(names) {
  if (names.length < 2) return "";
  let suffix = names[0];
  for (const name of names) {
    while (suffix && !name.endsWith(suffix)) suffix = suffix.slice(1);
  }
  const dot = suffix.indexOf(".");
  suffix = dot < 0 ? "" : suffix.slice(dot);
  return names.every((name) => name.length > suffix.length) ? suffix : "";
}

function shortName(name) { return state.suffix ? name.slice(0, name.length - state.suffix.length) : name; }

// Groups make a large fleet readable: by pool, else by zone, else by ranges of names; only groups with a
// node in trouble open by themselves.
function groupOf(node, keyed, ranges) {
  if (keyed === "pool" || keyed === "zone") return `${keyed} ${node[keyed] || "(none)"}`;
  return ranges.get(node.name);
}

function groupsFor(nodes) {
  if (nodes.length <= GROUP_ABOVE) return { keyed: null, ranges: null };
  const keyed = nodes.some((node) => node.pool) ? "pool" : nodes.some((node) => node.zone) ? "zone" : "range";
  const ranges = new Map();
  if (keyed === "range") {
    const names = nodes.map((node) => node.name).sort();
    for (let first = 0; first < names.length; first += RANGE) {
      const chunk = names.slice(first, first + RANGE);
      const label = `${shortName(chunk[0])} … ${shortName(chunk[chunk.length - 1])}`;
      for (const name of chunk) ranges.set(name, label);
    }
  }
  return { keyed, ranges };
}

function groupBox(label) {
  let group = state.groups.get(label);
  if (!group) {
    const summary = el("summary", {});
    const tiles = el("div", { class: "grid" });
    const box = el("details", { class: "group", "data-group": label }, summary, tiles);
    box.addEventListener("toggle", () => { group.chosen = true; });
    group = { box, summary, tiles, chosen: false };
    state.groups.set(label, group);
  }
  return group;
}

function renderGrid(nodes) {
  const grid = $("grid");
  const suffix = commonSuffix(nodes.map((node) => node.name));
  if (suffix !== state.suffix) { state.suffix = suffix; }
  $("grid-suffix").textContent = suffix ? `every name ends in ${suffix}` : "";
  const seen = new Set();
  for (const node of nodes) {
    seen.add(node.name);
    const known = state.grid.get(node.name);
    if (known && known.signature === nodeSignature(node)) { known.node = node; continue; }
    const tile = el("a", { class: `node s-${node.state}`, href: `#/node/${encodeURIComponent(node.name)}`, "data-node": node.name,
                           "data-state": node.state, "data-zone": node.zone || "", "data-pool": node.pool || "",
                           title: `${node.name}: ${node.state}${node.incident_id ? ", " + node.incident_id : ""}` },
                    el("span", { class: "n", text: shortName(node.name) }));
    const bars = el("span", { class: "bars" });
    for (const letter of node.gpus) bars.append(el("i", { class: `g ${letter}` }));
    tile.append(bars);
    if (known) known.tile.replaceWith(tile);
    state.grid.set(node.name, { tile, signature: nodeSignature(node), node });
  }
  for (const [name, known] of state.grid) {
    if (!seen.has(name)) { known.tile.remove(); state.grid.delete(name); }
  }
  const { keyed, ranges } = groupsFor(nodes);
  const ordered = [...nodes].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  if (!keyed) {
    grid.replaceChildren(...ordered.map((node) => state.grid.get(node.name).tile));
    state.groups.clear();
  } else {
    const members = new Map();
    for (const node of ordered) {
      const label = groupOf(node, keyed, ranges);
      if (!members.has(label)) members.set(label, []);
      members.get(label).push(node);
    }
    const boxes = [];
    for (const [label, group] of [...members].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
      const box = groupBox(label);
      const trouble = group.filter((node) => node.state !== "healthy");
      const counts = {};
      for (const node of trouble) counts[node.state] = (counts[node.state] || 0) + 1;
      box.summary.textContent = `${label}: ${group.length} nodes` +
        (trouble.length ? ` — ${Object.entries(counts).map(([s, n]) => `${n} ${s}`).join(", ")}` : ", all healthy");
      box.box.dataset.trouble = String(trouble.length);
      if (!box.chosen) box.box.open = trouble.length > 0 || nodes.length <= OPEN_GROUPS_UP_TO;
      box.tiles.replaceChildren(...group.map((node) => state.grid.get(node.name).tile));
      boxes.push(box.box);
    }
    for (const label of [...state.groups.keys()]) if (!members.has(label)) state.groups.delete(label);
    grid.replaceChildren(...boxes);
  }
  grid.classList.toggle("grouped", Boolean(keyed));
  refreshFilterChoices(nodes);
  applyFilters();
}

function refreshFilterChoices(nodes) {
  for (const [key, select] of [["pool", $("filter-pool")], ["zone", $("filter-zone")]]) {
    const values = [...new Set(nodes.map((node) => node[key]).filter(Boolean))].sort();
    const current = [...select.options].slice(1).map((option) => option.value);
    if (values.join("\n") === current.join("\n")) continue;
    select.replaceChildren(el("option", { value: "", text: "all" }), ...values.map((value) => el("option", { value, text: value })));
    select.value = values.includes(state.filters[key]) ? state.filters[key] : "";
  }
}

function applyFilters() {
  const { state: wanted, pool, zone, name } = state.filters;
  let shown = 0;
  for (const { tile, node } of state.grid.values()) {
    const visible = (!wanted || node.state === wanted) && (!pool || node.pool === pool) && (!zone || node.zone === zone)
      && (!name || node.name.includes(name));
    tile.hidden = !visible;
    if (visible) shown += 1;
  }
  $("grid-count").textContent = `${shown} of ${state.grid.size} nodes`;
}

for (const [key, id, event] of [["state", "filter-state", "change"], ["pool", "filter-pool", "change"],
                                 ["zone", "filter-zone", "change"], ["name", "filter-name", "input"]]) {
  $(id).addEventListener(event, () => { state.filters[key] = $(id).value.trim(); applyFilters(); });
}
$("filter-state").append(...STATES.map((name) => el("option", { value: name, text: name })));

// One transition's node writes as one line ("marked: condition, label, taint, event"), as the CLI shows them;
// the API keeps every line, in the order of cause.
function groupedTimeline(events) {
  const rows = [];
  let writes = null;
  for (const event of events) {
    const action = event.details && event.details.action;
    const isWrite = event.kind === "action" && event.details.result === "ok" && (MARKS.has(action) || UNMARKS.has(action));
    if (isWrite && writes && Date.parse(event.at) - Date.parse(writes.at) <= CLUSTER_MS) {
      if (!writes.details.actions.includes(action)) writes.details.actions.push(action);
      writes.release = writes.release || UNMARKS.has(action);
      writes.count = Math.max(writes.count, event.count || 1);
      continue;
    }
    if (isWrite) {
      writes = { ...event, kind: "node_writes", details: { actions: [action] }, release: UNMARKS.has(action), count: event.count || 1 };
      rows.push(writes);
      continue;
    }
    writes = null;
    rows.push(event);
  }
  for (const row of rows) {
    if (row.kind === "node_writes") {
      row.message = row.details.actions.length > 1
        ? `${row.release ? "released" : "marked"}: ${row.details.actions.join(", ")}`
        : `${row.details.actions[0]} ok`;
      if (row.details.actions.length === 1) row.kind = "action";
    }
  }
  return rows;
}

function timelineList(events) {
  return el("ol", { class: "timeline" }, ...groupedTimeline(events).map((event) => el("li", { "data-kind": event.kind },
    el("time", { datetime: event.at, title: event.at, text: clock(event.at) }),
    el("span", { text: `${event.kind}: ${event.message}` }),
    event.count > 1 && event.last_at
      ? el("span", { class: "repeat", text: ` (x${event.count}, ${clock(event.at)} to ${clock(event.last_at)})` }) : "",
    event.details && event.details.by ? el("span", { class: "by", text: ` (${event.details.by})` }) : "")));
}

function gpuText(gpu) {
  return [gpu.index === null || gpu.index === undefined ? "GPU" : `GPU ${gpu.index}`, gpu.name,
          gpu.serial ? `SN ${gpu.serial}` : null, gpu.pci_bus_id, gpu.uuid].filter(Boolean).join(" ");
}

async function renderIncidents() {
  const open = await api("/v1/incidents?open=true");
  $("incident-count").textContent = `(${open.length})`;
  const details = await Promise.all(open.slice(0, EXPANDED_INCIDENTS).map((incident) =>
    api(`/v1/incidents/${encodeURIComponent(incident.id)}`).catch(() => ({ ...incident, timeline: [] }))));
  $("incidents").replaceChildren(...open.map((incident, position) => {
    const detail = details[position];
    return el("div", { class: "incident", "data-incident": incident.id, "data-node": incident.node },
      el("div", {}, el("a", { href: `#/node/${encodeURIComponent(incident.node)}`, text: incident.node }),
        el("span", { text: ` ${incident.action}: ${incident.reasons.join(", ")} (since ${when(incident.started_at)})` })),
      ...(incident.gpus || []).map((gpu) => el("div", { class: "incident-gpu", text: gpuText(gpu) })),
      detail ? timelineList(detail.timeline) : el("span", { class: "hint", text: "timeline on the node's page" }));
  }));
}

// What profiles in shadow mode would have done, and why ("would have drained node-7 at 12:03: XID_79").
async function renderShadow() {
  const shadow = await api("/v1/events?kind=shadow&since=7d&limit=50");
  $("shadow-count").textContent = `(${shadow.length})`;
  $("shadow").replaceChildren(...[...shadow].reverse().map((event) => el("li", { "data-kind": "shadow", "data-node": event.node || "" },
    el("time", { datetime: event.at, title: event.at, text: clock(event.at) }),
    el("span", { text: ` ${event.message}` }),
    event.count > 1 ? el("span", { class: "repeat", text: ` (x${event.count})` }) : "")));
}

async function renderAlerts() {
  const [alerts, silences] = await Promise.all([api("/v1/alerts?limit=20"), api("/v1/silences")]);
  $("alerts").replaceChildren(...alerts.map((alert) => el("tr", {},
    el("td", { text: when(alert.created_at) }), el("td", { text: `${alert.severity} ${alert.status}` }),
    el("td", { text: alert.summary }))));
  $("silences").replaceChildren(...silences.map((silence) => el("tr", {},
    el("td", { text: silence.node || JSON.stringify(silence.selector) }), el("td", { text: silence.reason }),
    el("td", { text: `ends ${clock(silence.ends_at)}` }), el("td", { text: silence.created_by }))));
}

async function renderPeers() {
  const report = await api("/v1/peers");
  $("peer-count").textContent = `(${report.outliers.length})`;
  $("peers").replaceChildren(...(report.outliers.length ? report.outliers.map((outlier) => el("tr", { "data-code": outlier.code, "data-node": outlier.node },
    el("td", {}, el("a", { href: `#/node/${encodeURIComponent(outlier.node)}`, text: outlier.node })),
    el("td", { text: `GPU ${outlier.gpu_index}` }), el("td", { text: outlier.code }), el("td", { text: outlier.evidence })))
    : [el("tr", {}, el("td", { class: "hint", text: `none among ${report.groups.map((g) => `${g.gpus} ${g.model}`).join(", ") || "no GPUs"}` }))]));
}

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  for (const child of children) node.append(child);
  return node;
}

// Drawn in the page (inline SVG): no chart library, no outside service.
function barChart(title, entries) {
  const width = 360, row = 18, max = Math.max(1, ...entries.map(([, value]) => value));
  const chart = svg("svg", { width, height: row * Math.max(1, entries.length) + 4, role: "img", "aria-label": title });
  entries.forEach(([name, value], position) => {
    const y = position * row;
    chart.append(svg("text", { x: 0, y: y + 13, "font-size": 12 }, name),
      svg("rect", { x: 110, y: y + 3, width: Math.max(1, (200 * value) / max), height: row - 6, fill: "#c0392b" }),
      svg("text", { x: 115 + (200 * value) / max, y: y + 13, "font-size": 12 }, value.toFixed(1)));
  });
  return el("figure", { class: "plot" }, el("figcaption", { text: title }), chart);
}

function seriesChart(title, points) {
  const width = 360, height = 80, max = Math.max(1, ...points.map((point) => point.incidents));
  const step = points.length > 1 ? width / (points.length - 1) : width;
  const path = points.map((point, position) => `${position ? "L" : "M"}${(position * step).toFixed(1)},${(height - 4 - ((height - 8) * point.incidents) / max).toFixed(1)}`).join(" ");
  const chart = svg("svg", { width, height, role: "img", "aria-label": title },
    svg("path", { d: path || "M0,0", fill: "none", stroke: "#2c3e50", "stroke-width": 2 }));
  return el("figure", { class: "plot" }, el("figcaption", { text: `${title} (peak ${max} a day)` }), chart);
}

async function renderReliability() {
  const report = await api("/v1/reliability?since=30d&by=model");
  const classes = new Map();
  for (const group of report.groups) {
    for (const [name, hours] of Object.entries(group.gpu_hours_out_by_class)) classes.set(name, (classes.get(name) || 0) + hours);
  }
  const ratio = report.fleet_health_ratio === null ? "-" : `${(100 * report.fleet_health_ratio).toFixed(3)} %`;
  $("reliability").replaceChildren(
    el("div", { id: "fleet-health", text: `fleet health ${ratio}: ${report.incidents} incidents, ${report.gpu_hours_out.toFixed(1)} GPU-hours out of service` }),
    el("table", { class: "table" }, el("tr", {}, ...["model", "incidents", "MTBI h", "MTTR h", "GPU-h out"].map((text) => el("th", { text }))),
      ...report.groups.map((group) => el("tr", {}, el("td", { text: group.key }), el("td", { text: String(group.incidents) }),
        el("td", { text: group.mtbi_hours === null ? "-" : String(group.mtbi_hours) }),
        el("td", { text: group.mttr_hours === null ? "-" : String(group.mttr_hours) }),
        el("td", { text: group.gpu_hours_out.toFixed(1) })))),
    seriesChart("Incidents per day", report.incidents_per_day),
    barChart("GPU-hours out of service by fault class", [...classes.entries()].sort((a, b) => b[1] - a[1])));
}

async function refreshFleet() {
  const started = performance.now();
  const [fleet, grid] = await Promise.all([api("/v1/fleet"), api("/v1/fleet/grid")]);
  renderSummary(fleet);
  renderGrid(grid);
  await Promise.all([renderIncidents(), renderAlerts().catch(() => undefined), renderShadow().catch(() => undefined),
    renderPeers().catch(() => undefined), renderReliability().catch(() => undefined)]);
  $("updated").textContent = `updated ${clock(new Date().toISOString())}`;
  window.gpuhealth.lastRefreshMs = performance.now() - started;
  window.gpuhealth.refreshes += 1;
}

// --- one node ------------------------------------------------------------------------------------------

async function refreshNode(name) {
  const node = await api(`/v1/nodes/${encodeURIComponent(name)}`);
  const incident = node.incident && node.incident.open ? node.incident : null;
  const action = incident ? incident.action : node.action;
  $("node-title").textContent = `${node.name}${node.profile ? ` (profile ${node.profile})` : ""}: ${node.state}, action ${action}`;
  $("node-title").dataset.state = node.state;
  const inIncident = new Set(incident ? incident.gpus.map((gpu) => gpu.uuid) : []);
  $("node-gpus").replaceChildren(el("tr", {}, ...["#", "model", "serial", "PCI", "UUID", "status"].map((text) => el("th", { text }))),
    ...node.gpus.map((gpu) => el("tr", { "data-gpu": gpu.uuid, "data-status": gpu.status, class: inIncident.has(gpu.uuid) ? "in-incident" : null },
      el("td", { text: String(gpu.index) }), el("td", { text: gpu.name || "" }), el("td", { text: gpu.serial || "" }),
      el("td", { text: gpu.pci_bus_id || "" }), el("td", { text: gpu.uuid }),
      el("td", { text: inIncident.has(gpu.uuid) ? `${gpu.status}, in the open incident` : gpu.status }))));
  const index = new Map(node.gpus.map((gpu) => [gpu.uuid, gpu.index]));
  const shownFindings = [...node.findings, ...(node.peer_findings || [])];
  $("node-findings").replaceChildren(...(shownFindings.length ? shownFindings.map((finding) => el("tr", { "data-code": finding.code },
    el("td", { text: finding.gpu ? `GPU ${index.has(finding.gpu) ? index.get(finding.gpu) : finding.gpu}` : "node" }),
    el("td", { text: findingStatus(finding) }), el("td", { text: finding.check === "peers" ? `${finding.code} (against its peers)` : finding.code }),
    el("td", { text: finding.message })))
    : [el("tr", {}, el("td", { class: "hint", text: incident ? "none now; the incident stays open until the node is validated and released" : "none" }))]));
  if (node.incident) {
    const head = `${node.incident.id}: ${node.incident.action} (${node.incident.reasons.join(", ")}), since ${when(node.incident.started_at)}`;
    $("node-incident").replaceChildren(el("div", { text: head }),
      ...node.incident.gpus.map((gpu) => el("div", { class: "incident-gpu", "data-gpu": gpu.uuid, text: gpuText(gpu) })),
      ...node.incident.opened_by.map((finding) => el("div", { class: "opened-by",
        text: `opened by ${finding.code} on ${finding.gpu ? `GPU ${index.has(finding.gpu) ? index.get(finding.gpu) : finding.gpu}` : "the node"}: ${finding.message} (${finding.action})` })));
  } else {
    $("node-incident").textContent = "none";
  }
  $("node-timeline").replaceChildren(...timelineList(node.timeline).children);
  renderNodeActions(node);
  window.gpuhealth.refreshes += 1;
}

function renderNodeActions(node) {
  const box = $("node-actions");
  if (!OPERATOR_ROLES.has(state.role)) {
    box.replaceChildren(el("span", { class: "hint", text: "Viewers cannot quarantine, release or run diagnostics." }));
    return;
  }
  const act = (kind, body) => async () => {
    try {
      await api(`/v1/nodes/${encodeURIComponent(node.name)}/${kind}`, { method: "POST", body });
      $("action-result").textContent = `${kind} requested; the node's agent applies it on its next pass`;
    } catch (error) {
      $("action-result").textContent = `${kind} refused: ${error.message}`;
    }
  };
  const reason = (verb) => window.prompt(`Why ${verb} ${node.name}?`, "") || `${verb} from the fleet page`;
  const quarantine = el("button", { id: "action-quarantine", type: "button", text: "Quarantine" });
  quarantine.addEventListener("click", () => act("quarantine", { reason: reason("quarantine") })());
  const release = el("button", { id: "action-release", type: "button", text: "Release" });
  release.addEventListener("click", () => act("release", { reason: reason("release") })());
  const diag = el("button", { id: "action-diag", type: "button", text: "Run diagnostics (level 2)" });
  diag.addEventListener("click", () => act("diag", { level: 2, force: false, reason: "from the fleet page" })());
  box.replaceChildren(quarantine, release, diag);
}

// --- routing and polling -------------------------------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/node\/(.+)$/);
  return match ? { view: "node", node: decodeURIComponent(match[1]) } : { view: "fleet" };
}

async function tick() {
  const where = route();
  try {
    if (where.view === "node") await refreshNode(where.node); else await refreshFleet();
  } catch (error) {
    if (error instanceof Unauthorized) { sessionStorage.removeItem(TOKEN_KEY); showLogin("That token was refused."); return; }
    $("updated").textContent = `update failed: ${error.message}`;
  }
}

function show() {
  const where = route();
  $("login").hidden = true;
  $("fleet-view").hidden = where.view !== "fleet";
  $("node-view").hidden = where.view !== "node";
}

function takeTokenFromFragment() {
  // `gpuhealth demo` links to the page with its throw-away token in the fragment (never sent to a server):
  // keep it for this tab and take it out of the address bar.
  const match = location.hash.match(/^#token=([^&]+)$/);
  if (!match) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
  history.replaceState(null, "", `${location.pathname}${location.search}#/`);
}

async function start() {
  takeTokenFromFragment();
  if (!token()) { showLogin(); return; }
  try {
    await whoAmI();
  } catch (error) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("That token was refused.");
    return;
  }
  show();
  await tick();
  clearInterval(state.timer);
  state.timer = setInterval(tick, POLL_MS);
}

window.addEventListener("hashchange", () => { show(); tick(); });
$("times").value = localTimes() ? "local" : "utc";
$("times").addEventListener("change", () => { sessionStorage.setItem(ZONE_KEY, $("times").value); tick(); });
start();
