// Magnetar console: one page, hash routes, data from /console/api and /admin/v2.
// No framework and no network beyond this broker. Every action asks for confirmation first.
"use strict";

const TOKEN_KEY = "magnetar.token";  // session storage: this tab only, never in a URL
const REFRESH_MS = 2000;
const main = document.getElementById("main");
let refreshTimer = null;
let renderSeq = 0;

// --- HTTP -------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, reason) { super(reason); this.status = status; }
}

async function api(method, path, body) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const reply = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  const text = await reply.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = text; }
  if (reply.status === 401) { showLogin(data && data.reason); throw new ApiError(401, "authentication required"); }
  if (!reply.ok) throw new ApiError(reply.status, (data && data.reason) || reply.statusText || String(reply.status));
  return data;
}
const get = (path) => api("GET", path);
const enc = encodeURIComponent;

function topicPath(name) {  // persistent://t/ns/local -> t/ns/<encoded local>
  const rest = name.replace(/^persistent:\/\//, "");
  const [tenant, ns, ...local] = rest.split("/");
  return `${enc(tenant)}/${enc(ns)}/${enc(local.join("/"))}`;
}

// --- small helpers ----------------------------------------------------------------------------

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function fmtNum(n, digits = 0) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US", {maximumFractionDigits: digits, minimumFractionDigits: 0});
}
function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0; let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}
function fmtTime(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "–"; }
function badge(text, kind) { return `<span class="badge ${kind || ""}">${esc(text)}</span>`; }
function toast(text, bad) {
  const el = document.getElementById("toast");
  el.textContent = text; el.className = "show" + (bad ? " bad" : "");
  clearTimeout(toast.timer); toast.timer = setTimeout(() => { el.className = ""; }, 3500);
}
function setStatus(text) { document.getElementById("status").textContent = text; }

// --- confirmation and login dialogs -----------------------------------------------------------

function confirmAction(title, text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), {once: true});
    dialog.returnValue = "cancel";
    dialog.showModal();
  });
}

async function act(title, text, run, done) {
  if (!(await confirmAction(title, text))) return;
  try {
    const result = await run();
    toast(done || "Done");
    await render();
    return result;
  } catch (error) {
    toast(`${title} failed: ${error.message}`, true);
  }
}

function showLogin(reason) {
  const dialog = document.getElementById("login");
  document.getElementById("login-error").textContent = sessionStorage.getItem(TOKEN_KEY)
    ? (reason || "This token was refused.") : "";
  if (!dialog.open) dialog.showModal();
}
document.getElementById("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = document.getElementById("login-token").value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  document.getElementById("login-token").value = "";
  document.getElementById("login").close();
  updateLogout();
  render();
});
document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY); updateLogout(); render();
});
function updateLogout() {
  document.getElementById("logout").hidden = !sessionStorage.getItem(TOKEN_KEY);
  get("/console/api/whoami").then((me) => {
    document.getElementById("who").textContent = me && me.role ? `signed in as ${me.role}` : "";
  }).catch(() => { document.getElementById("who").textContent = ""; });
}

// --- graphs (SVG, drawn here) -----------------------------------------------------------------

function chart(samples, series, opts = {}) {
  const W = 600, H = 170, L = 46, R = 8, T = 10, B = 22;
  const values = series.flatMap((s) => samples.map((p) => p[s.key] || 0));
  const max = Math.max(1, ...values);
  const top = niceMax(max);
  const n = samples.length;
  const x = (i) => L + (n <= 1 ? 0 : (i * (W - L - R)) / (n - 1));
  const y = (v) => T + (H - T - B) * (1 - v / top);
  let svg = `<svg class="chart" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" role="img"`;
  for (const s of series) {
    const vals = samples.map((p) => p[s.key] || 0);
    svg += ` data-max-${s.key}="${Math.max(0, ...vals)}" data-last-${s.key}="${vals.length ? vals[vals.length - 1] : 0}"`;
  }
  svg += ` data-samples="${n}">`;
  for (let k = 0; k <= 4; k++) {
    const v = (top * k) / 4;
    svg += `<line class="grid-line" x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}"/>`;
    svg += `<text class="axis" x="${L - 6}" y="${y(v) + 3}" text-anchor="end">${esc(shortNum(v))}</text>`;
  }
  if (n) {
    svg += `<text class="axis" x="${L}" y="${H - 6}">${esc(clock(samples[0].t))}</text>`;
    svg += `<text class="axis" x="${W - R}" y="${H - 6}" text-anchor="end">${esc(clock(samples[n - 1].t))}</text>`;
  } else {
    svg += `<text class="axis" x="${W / 2}" y="${H / 2}" text-anchor="middle">waiting for the first samples…</text>`;
  }
  for (const s of series) {
    const pts = samples.map((p, i) => `${x(i).toFixed(1)},${y(p[s.key] || 0).toFixed(1)}`).join(" ");
    if (n) svg += `<polyline class="${s.cls}" points="${pts}"/>`;
  }
  svg += "</svg>";
  const legend = series.map((s) => `<span class="${s.cls}"><i></i>${esc(s.label)}</span>`).join("");
  return svg + `<div class="legend">${legend}${opts.note ? `<span>${esc(opts.note)}</span>` : ""}</div>`;
}
function niceMax(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 4, 8, 10]) if (m * p >= v) return m * p;  // quarters stay round
  return 10 * p;
}
function shortNum(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}
function clock(ms) { return new Date(ms).toISOString().slice(11, 19); }

const RATE_SERIES = [{key: "in", cls: "in", label: "msg/s in"}, {key: "out", cls: "out", label: "msg/s out"}];
const BACKLOG_SERIES = [{key: "backlog", cls: "backlog", label: "backlog (entries)"}];

// --- pages ------------------------------------------------------------------------------------

async function overviewPage() {
  const o = await get("/console/api/overview");
  const t = o.totals;
  const last = o.history.length ? o.history[o.history.length - 1] : {in: 0, out: 0};
  const window = Math.round((o.history.length * o.sampleIntervalMs) / 60000 * 10) / 10;
  const bookies = o.bookies.map((b) => `<tr data-bookie="${esc(b.id)}">
      <td class="mono">${esc(b.id)}</td>
      <td>${b.state === "writable" ? badge("writable", "ok") : badge("read-only", "warn")}</td>
      <td class="num">${b.freeBytes !== undefined ? fmtBytes(b.freeBytes) : "–"}</td>
      <td class="num">${b.ledgers !== undefined ? fmtNum(b.ledgers) : "–"}</td>
      <td>${b.error ? `<span class="error">${esc(b.error)}</span>` : ""}</td></tr>`).join("");
  const brokers = o.brokers.map((b) => `<tr><td class="mono">${esc(b.serviceUrl)}</td>
      <td class="mono">${b.httpUrl ? `<a href="${esc(b.httpUrl)}/">${esc(b.httpUrl)}</a>` : "–"}</td>
      <td class="num">${fmtNum(b.topics)}</td><td class="num">${fmtNum(b.connections)}</td>
      <td>${b.bundles.map((x) => `<span class="badge">${esc(x)}</span>`).join(" ")}</td></tr>`).join("");
  const under = o.underReplicatedLedgers.length
    ? o.underReplicatedLedgers.map((id) => badge(`ledger ${id}`, "bad")).join(" ")
    : badge("none", "ok");
  return `<h1>Overview <span class="muted">· cluster ${esc(o.cluster)} · Magnetar ${esc(o.version)}</span></h1>
    <div class="cards" id="totals">
      ${card("Topics", fmtNum(t.topics), "topics")}
      ${card("Msg/s in", fmtNum(last.in, 1), "rate-in")}
      ${card("Msg/s out", fmtNum(last.out, 1), "rate-out")}
      ${card("Backlog", fmtNum(t.backlog), "backlog")}
      ${card("Storage", fmtBytes(t.storageSize), "storage")}
      ${card("Producers", fmtNum(t.producers), "producers")}
      ${card("Consumers", fmtNum(t.consumers), "consumers")}
      ${card("Under-replicated", fmtNum(o.underReplicatedLedgers.length), "under-replicated")}
    </div>
    <div class="grid">
      <div class="panel"><h2>Message rates · last ${window} min</h2>${chart(o.history, RATE_SERIES)}</div>
      <div class="panel"><h2>Total backlog</h2>${chart(o.history, BACKLOG_SERIES)}</div>
    </div>
    <div class="panel"><h2>Brokers</h2><table><thead><tr><th>service URL</th><th>HTTP</th><th class="num">topics</th>
      <th class="num">connections</th><th>bundles owned</th></tr></thead><tbody>${brokers}</tbody></table></div>
    <div class="panel"><h2>Bookies</h2><table id="bookies"><thead><tr><th>bookie</th><th>state</th>
      <th class="num">free disk</th><th class="num">ledgers</th><th></th></tr></thead><tbody>${bookies ||
      `<tr><td colspan="5" class="muted">no bookie registered</td></tr>`}</tbody></table></div>
    <div class="grid">
      <div class="panel"><h2>Metadata store</h2><dl class="kv"><dt>URL</dt><dd class="mono">${esc(o.metadata.url || "–")}</dd>
        <dt>state</dt><dd>${o.metadata.healthy ? badge("reachable", "ok") : badge("unreachable", "bad")}
        ${o.metadata.latencyMs !== undefined ? `<span class="muted">${o.metadata.latencyMs} ms</span>` : esc(o.metadata.error || "")}</dd></dl></div>
      <div class="panel"><h2>Under-replicated ledgers</h2><p>${under}</p>
        <p class="muted">Ledgers AutoRecovery marked as having lost a copy; it re-replicates them.</p></div>
    </div>`;
}
function card(label, value, id) {
  return `<div class="card" data-card="${id}"><div class="label">${esc(label)}</div><div class="value">${value}</div></div>`;
}

async function topicsPage() {
  const tree = await get("/console/api/tree");
  const query = (sessionStorage.getItem("magnetar.search") || "").toLowerCase();
  const match = (s) => !query || s.toLowerCase().includes(query);
  let html = "";
  for (const tenant of tree.tenants) {
    let nsHtml = "";
    for (const ns of tenant.namespaces) {
      const topics = ns.topics.filter((t) => match(t.name));
      if (!topics.length && query && !match(ns.name)) continue;
      const items = topics.map((t) => `<li><a href="#/topic/${topicPath(t.name)}" data-topic="${esc(t.name)}">${esc(t.local)}</a>
        ${t.partitions ? badge(`${t.partitions} partitions`, "info") : ""}</li>`).join("");
      nsHtml += `<li><a class="ns" href="#/namespace/${enc(ns.name.split("/")[0])}/${enc(ns.name.split("/")[1])}">${esc(ns.name)}</a>
        <span class="muted">${ns.topics.length} topics</span><ul>${items || `<li class="muted">no topic</li>`}</ul></li>`;
    }
    if (!nsHtml && query && !match(tenant.name)) continue;
    html += `<li><span class="tenant">${esc(tenant.name)}</span><ul>${nsHtml || `<li class="muted">no namespace</li>`}</ul></li>`;
  }
  return `<h1>Tenants, namespaces and topics</h1>
    <div class="row"><input id="search" class="search" placeholder="Search topics and namespaces" value="${esc(query)}"></div>
    <div class="panel tree"><ul>${html || `<li class="muted">nothing matches</li>`}</ul></div>
    <div class="panel"><h2>Create a namespace</h2>
      <form id="create-namespace" class="row"><input name="namespace" placeholder="tenant/namespace" required>
      <button class="primary">Create namespace</button></form></div>`;
}

async function namespacePage(tenant, ns) {
  const name = `${tenant}/${ns}`;
  const [policies, topics] = await Promise.all([get(`/admin/v2/namespaces/${enc(tenant)}/${enc(ns)}`),
    get(`/admin/v2/persistent/${enc(tenant)}/${enc(ns)}`)]);
  const retention = policies.retention_policies || {};
  const quota = (policies.backlog_quota_map || {}).destination_storage || {};
  const rows = topics.map((t) => `<li><a href="#/topic/${topicPath(t)}">${esc(t)}</a></li>`).join("");
  return `<h1>Namespace ${esc(name)}</h1>
    <div class="panel"><h2>Policies</h2><dl class="kv">
      <dt>retention</dt><dd>${esc(retention.retentionTimeInMinutes ?? 0)} min, ${esc(retention.retentionSizeInMB ?? 0)} MB</dd>
      <dt>message TTL</dt><dd>${policies.message_ttl_in_seconds ? `${esc(policies.message_ttl_in_seconds)} s` : "–"}</dd>
      <dt>backlog quota</dt><dd>${quota.limitSize !== undefined ? `${fmtBytes(quota.limitSize)} (${esc(quota.policy)})` : "–"}</dd>
      <dt>deduplication</dt><dd>${policies.deduplicationEnabled ? "on" : "off"}</dd></dl>
      <div class="forms">
        <form data-policy="retention"><h3>Retention</h3><div class="row">
          <input type="number" name="minutes" placeholder="minutes" required> <input type="number" name="mb" placeholder="MB" required>
          <button>Set</button></div><p class="muted">-1 keeps without limit; 0 keeps only what subscriptions hold.</p></form>
        <form data-policy="ttl"><h3>Message TTL</h3><div class="row">
          <input type="number" name="seconds" placeholder="seconds" min="0" required><button>Set</button></div></form>
        <form data-policy="quota"><h3>Backlog quota</h3><div class="row">
          <input type="number" name="bytes" placeholder="bytes" required>
          <select name="policy"><option>producer_request_hold</option><option>producer_exception</option>
          <option>consumer_backlog_eviction</option></select><button>Set</button></div></form>
        <form data-policy="dedup"><h3>Deduplication</h3><div class="row">
          <select name="enabled"><option value="true">on</option><option value="false">off</option></select><button>Set</button></div></form>
      </div></div>
    <div class="panel"><h2>Topics</h2><ul>${rows || `<li class="muted">no topic</li>`}</ul>
      <form id="create-topic" class="row"><input name="topic" placeholder="topic name" required>
      <input type="number" name="partitions" min="0" value="0" title="0: not partitioned"> partitions
      <button class="primary">Create topic</button></form></div>
    <div class="panel"><button class="danger" id="delete-namespace">Delete namespace ${esc(name)}</button></div>`;
}

async function topicPage(tenant, ns, local) {
  const path = `${enc(tenant)}/${enc(ns)}/${enc(local)}`;
  const t = await get(`/console/api/topic/${path}`);
  const last = t.history.length ? t.history[t.history.length - 1] : {in: 0, out: 0, backlog: 0};
  const producers = t.publishers.map((p) => `<tr><td>${esc(p.producerName)}</td><td>${esc(p.accessMode)}</td>
      <td class="mono">${esc(p.address || "–")}</td></tr>`).join("");
  const subs = t.subscriptions.map((s) => {
    const consumers = s.consumers.map((c) => `<div class="mono">${esc(c.consumerName)} · ${esc(c.address || "–")}
      · ${fmtNum(c.unackedMessages)} unacked</div>`).join("");
    return `<tr data-subscription="${esc(s.name)}"><td><b>${esc(s.name)}</b></td><td>${esc(s.type)}</td>
      <td class="num" data-field="backlog">${fmtNum(s.msgBacklog)}</td><td class="num">${fmtNum(s.unackedMessages)}</td>
      <td class="num">${fmtNum(s.msgRateOut, 1)}</td><td>${consumers || `<span class="muted">none</span>`}</td>
      <td><div class="row">
        <button class="small" data-action="peek">Peek</button>
        <button class="small" data-action="skip">Skip…</button>
        <button class="small" data-action="clear">Clear backlog</button>
        <button class="small" data-action="reset">Reset by time…</button></div></td></tr>`;
  }).join("");
  const parts = t.partitions ? `<div class="panel"><h2>Partitions</h2><table><thead><tr><th>partition</th>
      <th class="num">msg/s in</th><th class="num">msg/s out</th><th class="num">backlog</th><th class="num">storage</th>
      <th class="num">producers</th><th class="num">subscriptions</th></tr></thead><tbody>${t.partitionRows.map((p) => `
      <tr><td class="mono">${esc(p.name)}</td><td class="num">${fmtNum(p.msgRateIn, 1)}</td><td class="num">${fmtNum(p.msgRateOut, 1)}</td>
      <td class="num">${fmtNum(p.backlog)}</td><td class="num">${fmtBytes(p.storageSize)}</td>
      <td class="num">${p.producers}</td><td class="num">${p.subscriptions}</td></tr>`).join("")}</tbody></table></div>` : "";
  return `<h1>${esc(t.name)} ${t.partitions ? badge(`${t.partitions} partitions`, "info") : ""}</h1>
    <div class="row"><a href="#/durability/${path}">Durability view →</a>
      <span class="spacer"></span><button class="danger small" id="delete-topic">Delete topic</button></div>
    <div class="cards">
      ${card("Msg/s in", fmtNum(last.in, 1), "rate-in")}${card("Msg/s out", fmtNum(last.out, 1), "rate-out")}
      ${card("Backlog", fmtNum(last.backlog), "backlog")}${card("Storage", fmtBytes(t.storageSize), "storage")}
      ${card("Messages in", fmtNum(t.msgInCounter), "msg-in")}${card("Producers", fmtNum(t.publishers.length), "producers")}
    </div>
    <div class="grid">
      <div class="panel" id="rate-chart"><h2>Message rates</h2>${chart(t.history, RATE_SERIES)}</div>
      <div class="panel" id="backlog-chart"><h2>Backlog</h2>${chart(t.history, BACKLOG_SERIES)}</div>
    </div>
    <div class="panel"><h2>Subscriptions</h2><table id="subscriptions"><thead><tr><th>name</th><th>type</th>
      <th class="num">backlog</th><th class="num">unacked</th><th class="num">msg/s out</th><th>consumers (address)</th><th></th></tr></thead>
      <tbody>${subs || `<tr><td colspan="7" class="muted">no subscription</td></tr>`}</tbody></table>
      <div id="peek-output" class="messages"></div></div>
    <div class="panel"><h2>Producers</h2><table><thead><tr><th>name</th><th>access mode</th><th>address</th></tr></thead>
      <tbody>${producers || `<tr><td colspan="3" class="muted">no producer</td></tr>`}</tbody></table></div>
    ${parts}`;
}

async function durabilityPage(tenant, ns, local) {
  const path = `${enc(tenant)}/${enc(ns)}/${enc(local)}`;
  const d = await get(`/console/api/topic/${path}/ledgers`);
  const stateBadge = (s) => badge(s, {open: "info", closed: "ok", recovering: "warn", fenced: "bad"}[s] || "");
  const sections = d.topics.map((t) => {
    const rows = t.ledgers.slice().reverse().map((l) => {
      const fragments = (l.fragments || []).map((f) => `<div class="row"><span class="muted mono">${f.firstEntry}..${f.lastEntry}</span>
        <span class="ensemble">${f.bookies.map((b) => `<span class="bookie${b.missing ? " missing" : ""}${b.readOnly ? " ro" : ""}"
          title="${b.missing ? "missing: not registered or lost" : b.readOnly ? "read-only" : "writable"}">${esc(b.id)}</span>`).join("")}</span>
        ${f.underReplicatedEntries ? badge(`${fmtNum(f.underReplicatedEntries)} short`, "bad") : ""}</div>`).join("");
      return `<tr data-ledger="${l.ledgerId}"><td class="mono"><b>${l.ledgerId}</b></td><td>${stateBadge(l.state)}</td>
        <td class="num">${l.ensembleSize ?? "–"} / ${l.writeQuorum ?? "–"} / ${l.ackQuorum ?? "–"}</td>
        <td class="num">${l.lac ?? "–"}</td><td class="num">${fmtNum(l.entries)}</td><td class="num">${fmtBytes(l.size)}</td>
        <td>${esc(l.storedOn)}</td><td>${fragments || esc(l.note || "")}</td>
        <td class="num">${l.underReplicatedEntries ? badge(fmtNum(l.underReplicatedEntries), "bad") : badge("0", "ok")}</td></tr>`;
    }).join("");
    return `<div class="panel"><h2 class="mono">${esc(t.name)} <span class="muted">· log ${esc(t.state)} ·
      ${t.ledgersCount} ledgers${t.ledgersShown < t.ledgersCount ? ` (newest ${t.ledgersShown} shown)` : ""}</span></h2>
      <table class="ledgers"><thead><tr><th>ledger</th><th>state</th><th class="num">E / Qw / Qa</th><th class="num">LAC</th>
      <th class="num">entries</th><th class="num">size</th><th>stored on</th><th>fragments: entries → ensemble</th>
      <th class="num">not at full replication</th></tr></thead><tbody>${rows || `<tr><td colspan="9" class="muted">no ledger yet</td></tr>`}</tbody></table></div>`;
  }).join("");
  return `<h1>Durability · ${esc(d.name)}</h1>
    <p class="muted">Each ledger of the topic's log: the bookies each range of entries was written to (E bookies, each
      entry on Qw of them, acknowledged after Qa), the last entry known confirmed (LAC), and entries whose copies are
      not all on live bookies. <a href="#/topic/${path}">← topic</a></p>
    <div class="row">Bookies: ${d.bookies.writable.map((b) => badge(b, "ok")).join(" ")}
      ${d.bookies.readOnly.map((b) => badge(b + " (read-only)", "warn")).join(" ")}</div>
    ${sections}`;
}

async function clusterPage() {
  const c = await get("/console/api/cluster");
  const rows = c.brokers.flatMap((b) => b.bundles.map((x) => `<tr><td class="mono">${esc(x)}</td>
    <td class="mono">${esc(b.serviceUrl)}</td><td class="mono">${esc(b.httpUrl || "–")}</td></tr>`)).join("");
  return `<h1>Cluster ${esc(c.cluster)} · bundle ownership</h1>
    <div class="panel"><table><thead><tr><th>bundle (namespace/range)</th><th>owner broker</th><th>HTTP</th></tr></thead>
    <tbody>${rows || `<tr><td colspan="3" class="muted">no bundle owned yet</td></tr>`}</tbody></table>
    <p class="muted">Owners come from each broker's load report in the metadata store.</p></div>`;
}

// --- routing and refresh ----------------------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  const [page, ...args] = parts;
  // live pages refresh themselves; the tree and namespace pages (forms) only on demand
  if (!page) return {name: "overview", run: () => overviewPage(), live: true};
  if (page === "topics") return {name: "topics", run: () => topicsPage()};
  if (page === "cluster") return {name: "cluster", run: () => clusterPage(), live: true};
  if (page === "namespace" && args.length === 2) return {name: "topics", run: () => namespacePage(...args), args};
  if (page === "topic" && args.length >= 3) {
    const a = [args[0], args[1], args.slice(2).join("/")];
    return {name: "topics", run: () => topicPage(...a), args: a, page: "topic", live: true};
  }
  if (page === "durability" && args.length >= 3) {
    const a = [args[0], args[1], args.slice(2).join("/")];
    return {name: "topics", run: () => durabilityPage(...a), args: a, live: true};
  }
  return {name: "", run: async () => `<h1>Not found</h1><p><a href="#/">Overview</a></p>`};
}

async function render() {
  const seq = ++renderSeq;
  const current = route();
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.nav === current.name);
  const keep = document.getElementById("peek-output");
  const peekHtml = keep ? keep.innerHTML : "";
  const focused = document.activeElement && document.activeElement.id === "search";
  try {
    const html = await current.run();
    if (seq !== renderSeq) return;
    main.innerHTML = html;
    const peek = document.getElementById("peek-output");
    if (peek && current.page === "topic") peek.innerHTML = peekHtml;
    bind(current);
    if (focused) { const s = document.getElementById("search"); s.focus(); s.setSelectionRange(s.value.length, s.value.length); }
    setStatus(`updated ${clock(Date.now())}`);
  } catch (error) {
    if (seq !== renderSeq) return;
    if (error.status === 401) { main.innerHTML = `<p class="muted">Sign in to see this broker.</p>`; return; }
    main.innerHTML = `<h1>Cannot show this page</h1><p class="error">${esc(error.message)}</p>`;
  }
}

function schedule() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(async () => {
    const busy = document.querySelector("dialog[open]") || (document.activeElement && document.activeElement.closest("form"));
    if (!busy && !document.hidden && route().live) await render();
    schedule();
  }, REFRESH_MS);
}

// --- actions ----------------------------------------------------------------------------------

function bind(current) {
  const search = document.getElementById("search");
  if (search) search.addEventListener("input", () => { sessionStorage.setItem("magnetar.search", search.value); render(); });
  const createNs = document.getElementById("create-namespace");
  if (createNs) createNs.addEventListener("submit", (e) => {
    e.preventDefault();
    const name = new FormData(createNs).get("namespace").trim();
    const [tenant, ns] = name.split("/");
    if (!tenant || !ns) { toast("give tenant/namespace", true); return; }
    act("Create namespace", `Create namespace ${name}?`, () => api("PUT", `/admin/v2/namespaces/${enc(tenant)}/${enc(ns)}`),
      `Created namespace ${name}`);
  });
  if (current.args && location.hash.startsWith("#/namespace/")) bindNamespace(...current.args);
  if (current.page === "topic") bindTopic(...current.args);
}

function bindNamespace(tenant, ns) {
  const base = `/admin/v2/namespaces/${enc(tenant)}/${enc(ns)}`;
  const name = `${tenant}/${ns}`;
  document.getElementById("delete-namespace").addEventListener("click", () =>
    act("Delete namespace", `Delete namespace ${name}? It must have no topics.`, async () => {
      await api("DELETE", base); location.hash = "#/topics";
    }, `Deleted namespace ${name}`));
  const createTopic = document.getElementById("create-topic");
  createTopic.addEventListener("submit", (e) => {
    e.preventDefault();
    const form = new FormData(createTopic);
    const topic = form.get("topic").trim();
    const partitions = Number(form.get("partitions") || 0);
    const path = `/admin/v2/persistent/${enc(tenant)}/${enc(ns)}/${enc(topic)}`;
    act("Create topic", `Create persistent://${name}/${topic}${partitions ? ` with ${partitions} partitions` : ""}?`,
      () => partitions ? api("PUT", `${path}/partitions`, partitions) : api("PUT", path), `Created ${topic}`);
  });
  for (const form of document.querySelectorAll("form[data-policy]")) {
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const f = new FormData(form);
      const kind = form.dataset.policy;
      const calls = {
        retention: () => ["retention", {retentionTimeInMinutes: Number(f.get("minutes")), retentionSizeInMB: Number(f.get("mb"))},
          `retention ${f.get("minutes")} min / ${f.get("mb")} MB`],
        ttl: () => ["messageTTL", Number(f.get("seconds")), `message TTL ${f.get("seconds")} s`],
        quota: () => ["backlogQuota", {limitSize: Number(f.get("bytes")), policy: f.get("policy")},
          `backlog quota ${f.get("bytes")} bytes (${f.get("policy")})`],
        dedup: () => ["deduplication", f.get("enabled") === "true", `deduplication ${f.get("enabled") === "true" ? "on" : "off"}`],
      };
      const [segment, body, text] = calls[kind]();
      act("Set policy", `Set ${text} on ${name}?`, () => api("POST", `${base}/${segment}`, body), `Set ${text}`);
    });
  }
}

function bindTopic(tenant, ns, local) {
  const topicBase = `/admin/v2/persistent/${enc(tenant)}/${enc(ns)}/${enc(local)}`;
  const full = `persistent://${tenant}/${ns}/${local}`;
  document.getElementById("delete-topic").addEventListener("click", async () => {
    const partitioned = document.querySelector("h1 .badge.info");
    act("Delete topic", `Delete ${full}? Its messages and subscriptions go with it.`, async () => {
      await api("DELETE", partitioned ? `${topicBase}/partitions` : topicBase); location.hash = "#/topics";
    }, `Deleted ${full}`);
  });
  for (const row of document.querySelectorAll("#subscriptions tr[data-subscription]")) {
    const sub = row.dataset.subscription;
    const subBase = `${topicBase}/subscription/${enc(sub)}`;
    row.querySelector('[data-action="clear"]').addEventListener("click", () =>
      act("Clear backlog", `Acknowledge every message of subscription ${sub} on ${full}?`,
        () => api("POST", `${subBase}/skip_all`), `Cleared the backlog of ${sub}`));
    row.querySelector('[data-action="skip"]').addEventListener("click", () => {
      const n = Number(prompt(`Skip how many messages of ${sub}?`, "1"));
      if (!n || n < 1) return;
      act("Skip messages", `Skip the next ${n} messages of ${sub}?`, () => api("POST", `${subBase}/skip/${n}`),
        `Skipped ${n} messages of ${sub}`);
    });
    row.querySelector('[data-action="reset"]').addEventListener("click", () => {
      const minutes = Number(prompt(`Reset ${sub} to messages published how many minutes ago?`, "10"));
      if (!(minutes >= 0)) return;
      const ts = Date.now() - minutes * 60000;
      act("Reset cursor", `Move ${sub} back to messages published since ${fmtTime(ts)}? Its consumers reconnect.`,
        () => api("POST", `${subBase}/resetcursor/${Math.floor(ts)}`), `Reset ${sub}`);
    });
    row.querySelector('[data-action="peek"]').addEventListener("click", () => peek(tenant, ns, local, sub));
  }
}

async function peek(tenant, ns, local, sub) {
  const out = document.getElementById("peek-output");
  try {
    const data = await get(`/console/api/topic/${enc(tenant)}/${enc(ns)}/${enc(local)}/peek?subscription=${enc(sub)}&count=10`);
    const format = sessionStorage.getItem("magnetar.peekFormat") || "text";
    const body = data.messages.map((m) => `<div class="peeked"><div class="row"><b class="mono">${esc(m.messageId)}</b>
      <span class="muted">${fmtTime(m.publishTime)} · ${fmtNum(m.size)} B${m.key ? ` · key ${esc(m.key)}` : ""}
      ${Object.keys(m.properties).length ? ` · ${esc(JSON.stringify(m.properties))}` : ""}</span></div>
      <pre>${esc(showPayload(m.payload, format))}</pre></div>`).join("");
    out.innerHTML = `<h2>Next messages of ${esc(sub)} <select id="peek-format">
      ${["text", "json", "hex"].map((f) => `<option${f === format ? " selected" : ""}>${f}</option>`).join("")}</select>
      <button class="small" id="peek-close">Close</button></h2>${body || `<p class="muted">no message waiting</p>`}`;
    document.getElementById("peek-format").addEventListener("change", (e) => {
      sessionStorage.setItem("magnetar.peekFormat", e.target.value); peek(tenant, ns, local, sub);
    });
    document.getElementById("peek-close").addEventListener("click", () => { out.innerHTML = ""; });
  } catch (error) {
    toast(`Peek failed: ${error.message}`, true);
  }
}

function showPayload(b64, format) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  if (format === "hex") {
    const lines = [];
    for (let i = 0; i < bytes.length; i += 16) {
      const chunk = Array.from(bytes.slice(i, i + 16));
      lines.push(i.toString(16).padStart(6, "0") + "  " + chunk.map((b) => b.toString(16).padStart(2, "0")).join(" "));
    }
    return lines.join("\n");
  }
  const text = new TextDecoder("utf-8", {fatal: false}).decode(bytes);
  if (format === "json") {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return "(not JSON) " + text; }
  }
  return text;
}

window.addEventListener("hashchange", () => { render(); });
updateLogout();
render().then(schedule);
