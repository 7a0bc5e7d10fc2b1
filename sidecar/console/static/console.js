// memevo console: plain DOM and hand-drawn SVG, no build step, no network beyond this console's own API.
"use strict";

const STATES = ["ACTIVE", "ARCHIVED", "CONSOLIDATED", "OBSOLETE", "EVICTED"];
const KINDS = ["FACT", "PREFERENCE", "EPISODE", "STRATEGY", "ABSTRACTION"];
const COLORS = ["#2f6fde", "#12b76a", "#7a5af8", "#f04438", "#475467", "#f79009", "#0ba5ec"];
const SVG_NS = "http://www.w3.org/2000/svg";

// ---- small helpers ------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else if (k === "style") el.style.cssText = v; // through the CSSOM: the page's CSP forbids style attributes
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "style") el.style.cssText = v;
    else el.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const short = (name, prefix) => String(name || "").replace(prefix, "");
const stateOf = (v) => short(v, "MEMORY_STATE_");
const kindOf = (v) => short(v, "MEMORY_KIND_");
const fmt = (x, d = 3) => (x === undefined || x === null || Number.isNaN(Number(x)) ? "" : Number(x).toFixed(d));
const when = (t) => (t ? new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "");
const stateTag = (st) => h("span", { class: `tag state-${stateOf(st)}` }, stateOf(st));
const memLink = (id) => h("a", { href: `/life?id=${id}`, "data-memory": id }, `#${id}`);
// The fact a memory states: its key, or the slot perception read in its text (prose written without a key).
function factLine(m) {
  if (m.fact && m.fact.attribute) return h("div", { class: "muted" }, `${m.entity} · ${m.fact.attribute} = ${m.fact.value}`);
  const slot = m.inferred;
  if (!slot || !slot.attribute) return null;
  const value = slot.value ? ` = ${slot.value}` : "";
  return h("div", { class: "muted", "data-inferred": slot.attribute },
    `read from the text: ${slot.entity} · ${slot.attribute}${value} (${slot.method}, ${fmt(slot.confidence, 2)})`);
}

function token() { return sessionStorage.getItem("memevo-token") || ""; }

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (token()) headers.Authorization = `Bearer ${token()}`;
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (!response.ok) {
    let message = response.statusText, code = "";
    try { const body = await response.json(); message = body.error || message; code = body.code || ""; } catch (e) { /* not JSON */ }
    const err = new Error(`${response.status}: ${message}`);
    err.status = response.status;
    err.code = code;
    throw err;
  }
  return response;
}

async function getJSON(path) { return (await api(path)).json(); }

function errorBox(err) {
  // The console's own token (a sidecar without tokens) is not the sidecar's: its message already says what to do.
  const own = String(err.code || "").startsWith("CONSOLE_TOKEN");
  const hint = own ? " Or enter the console's token above." : err.status === 401 ? " Enter a token above." : err.status === 403 ? " This token may not do that." : "";
  return h("p", { class: "error", role: "alert" }, `${err.message}.${hint}`);
}

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false));
}

// ---- charts (hand-drawn SVG) --------------------------------------------------------------------

function lineChart(times, series, { width = 560, height = 200, label = "" } = {}) {
  const pad = { l: 52, r: 10, t: 10, b: 24 };
  const names = Object.keys(series);
  const all = names.flatMap((n) => series[n]);
  const top = Math.max(1, ...all);
  const n = times.length;
  const x = (i) => pad.l + (n <= 1 ? 0 : (i / (n - 1)) * (width - pad.l - pad.r));
  const y = (v) => height - pad.b - (v / top) * (height - pad.t - pad.b);
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label });
  for (let k = 0; k <= 4; k++) {
    const v = (top * k) / 4;
    svg.append(s("line", { class: "grid", x1: pad.l, x2: width - pad.r, y1: y(v), y2: y(v) }));
    svg.append(s("text", { x: pad.l - 6, y: y(v) + 4, "text-anchor": "end" }, Math.round(v).toLocaleString()));
  }
  svg.append(s("line", { class: "axis", x1: pad.l, x2: width - pad.r, y1: height - pad.b, y2: height - pad.b }));
  if (n) {
    const fmtT = (t) => new Date(t * 1000).toISOString().slice(5, 16).replace("T", " ");
    svg.append(s("text", { x: pad.l, y: height - 6 }, fmtT(times[0])));
    svg.append(s("text", { x: width - pad.r, y: height - 6, "text-anchor": "end" }, fmtT(times[n - 1])));
  }
  names.forEach((name, i) => {
    const pts = series[name].map((v, j) => `${x(j).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    svg.append(s("polyline", { points: pts, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 2 },
      s("title", {}, name)));
  });
  const legend = h("div", { class: "legend" }, names.map((name, i) =>
    h("span", {}, h("i", { style: `background:${COLORS[i % COLORS.length]}` }), name)));
  return h("div", {}, svg, legend);
}

function histogram(entry, { width = 270, height = 150, title = "" } = {}) {
  const pad = { l: 36, r: 8, t: 16, b: 22 };
  const { edges, counts } = entry;
  const lo = edges[0], hi = edges[edges.length - 1];
  const top = Math.max(1, ...counts);
  const x = (v) => pad.l + ((v - lo) / (hi - lo || 1)) * (width - pad.l - pad.r);
  const y = (c) => height - pad.b - (c / top) * (height - pad.t - pad.b);
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
  svg.append(s("text", { x: pad.l, y: 11 }, `${title} (${entry.sampled} sampled)`));
  counts.forEach((c, i) => {
    svg.append(s("rect", { x: x(edges[i]) + 0.5, y: y(c), width: Math.max(1, x(edges[i + 1]) - x(edges[i]) - 1),
      height: height - pad.b - y(c), fill: "#84adff" }, s("title", {}, `${fmt(edges[i], 2)}–${fmt(edges[i + 1], 2)}: ${c}`)));
  });
  svg.append(s("line", { class: "axis", x1: pad.l, x2: width - pad.r, y1: height - pad.b, y2: height - pad.b }));
  svg.append(s("text", { x: pad.l, y: height - 6 }, fmt(lo, 2)));
  svg.append(s("text", { x: width - pad.r, y: height - 6, "text-anchor": "end" }, fmt(hi, 2)));
  svg.append(s("text", { x: pad.l - 4, y: pad.t + 4, "text-anchor": "end" }, top));
  for (const [name, v, color] of [["archive", entry.archive_below, "#f79009"], ["evict", entry.evict_below, "#d92d20"]]) {
    const xv = x(v);
    svg.append(s("line", { x1: xv, x2: xv, y1: pad.t, y2: height - pad.b, stroke: color, "stroke-dasharray": "4 3",
      "stroke-width": 1.5, "data-threshold": name }));
    svg.append(s("text", { x: xv + 3, y: pad.t + 10 + (name === "evict" ? 12 : 0), style: `fill:${color}` }, `${name} ${v}`));
  }
  return svg;
}

function bars(labels, values, { width = 560, height = 160, unit = "" } = {}) {
  const pad = { l: 52, r: 10, t: 10, b: 20 };
  const top = Math.max(1e-9, ...values);
  const n = Math.max(1, values.length);
  const bw = (width - pad.l - pad.r) / n;
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  values.forEach((v, i) => {
    const bh = (v / top) * (height - pad.t - pad.b);
    svg.append(s("rect", { x: pad.l + i * bw + 1, y: height - pad.b - bh, width: Math.max(1, bw - 2), height: bh,
      fill: "#7a5af8" }, s("title", {}, `${labels[i]}: ${fmt(v, 1)} ${unit}`)));
  });
  svg.append(s("line", { class: "axis", x1: pad.l, x2: width - pad.r, y1: height - pad.b, y2: height - pad.b }));
  svg.append(s("text", { x: pad.l - 6, y: pad.t + 8, "text-anchor": "end" }, `${fmt(top, 1)}`));
  svg.append(s("text", { x: pad.l, y: height - 5 }, unit));
  return svg;
}

// ---- corrections --------------------------------------------------------------------------------

// A person's corrections, each one sidecar call with this page's token; the change log names the console.
const ACTIONS = {
  forget: { path: "/api/forget", button: "Forget", title: (m) => `Forget memory #${m.id}?`,
    explain: () => "The agent stops using it; it stays in the history as OBSOLETE, with your note in the change log." },
  restore: { path: "/api/restore", button: "Restore", title: (m) => `Restore memory #${m.id}?`,
    explain: () => "It becomes current again; the memory that replaced it stays as it is." },
  accept: { path: "/api/doubt", button: "Accept", title: (m, x) => `Does memory #${x.send.by} replace #${m.id}?`,
    explain: (m, x) => `Yes: #${x.send.by} supersedes #${m.id}, which becomes OBSOLETE (history).` },
  reject: { path: "/api/doubt", button: "Reject", title: (m, x) => `Do #${m.id} and #${x.send.by} both hold?`,
    explain: () => "Yes: the doubt is cleared and both stay current." },
  correct: { path: "/api/correct", button: "Correct", title: (m, x) => `Correct ${x.what}?`,
    explain: () => "A new statement with the right value is written and supersedes this one, which stays in the history." },
};

let doneNote = null; // the outcome of the last correction, shown once by the page that reloads after it

function takeDone() { const node = doneNote; doneNote = null; return node; }

function doneLine(r) {
  const states = r.memories.map((m) => [memLink(m.id), " ", stateTag(m.state), m.current ? h("span", { class: "tag current" }, "current") : null, " "]);
  const logged = r.events.map((e) => h("li", { "data-seq": e.sequence },
    `change log #${e.sequence}: memory ${e.memory_id} ${short(e.type, "CHANGE_EVENT_TYPE_")}, `, h("span", { class: "tag reason" }, e.reason_class), ` “${e.reason}”`));
  return h("div", { class: "done", id: "correction-done", role: "status", "data-done": r.action },
    h("b", {}, `${r.action}: done.`), " Now: ", states, h("ul", {}, logged));
}

const correctionArea = () => h("div", { id: "correction" });

// Asks in the page before anything changes; on success the page reloads and shows the new state.
function ask(kind, m, extra, reload) {
  const area = document.getElementById("correction");
  const a = ACTIONS[kind];
  const title = a.title(m, extra);
  const value = kind === "correct" ? h("input", { name: "value", required: true, "aria-label": "the right value", placeholder: "the right value" }) : null;
  const note = h("input", { name: "note", "aria-label": "why", placeholder: "why (kept in the change log)" });
  const failed = h("div", { id: "correction-error" });
  const confirm = h("button", { type: "submit", "data-confirm": kind }, a.button);
  const cancel = h("button", { type: "button", class: "secondary", "data-cancel": "", onclick: () => area.replaceChildren() }, "Cancel");
  const form = h("form", { class: "confirm", role: "dialog", "aria-label": title, "data-asking": kind },
    h("b", {}, title), h("div", { class: "muted" }, `#${m.id}: ${m.content}`), h("p", {}, a.explain(m, extra)),
    h("div", { class: "fields" }, value ? h("label", {}, "right value", value) : null, h("label", {}, "note", note)),
    h("div", { class: "actions" }, confirm, cancel), failed);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    confirm.disabled = cancel.disabled = true;
    try {
      const body = Object.assign({ id: m.id, note: note.value }, extra.send || {}, value ? { value: value.value } : {});
      const r = await (await api(a.path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })).json();
      doneNote = doneLine(r);
      await reload();
    } catch (err) {
      failed.replaceChildren(errorBox(err));
      confirm.disabled = cancel.disabled = false;
    }
  });
  area.replaceChildren(form);
  form.scrollIntoView({ block: "nearest" });
  (value || confirm).focus();
}

function actButton(kind, m, extra, reload) {
  return h("button", { type: "button", class: "secondary small", "data-act": kind, "data-memory-id": m.id, onclick: () => ask(kind, m, extra, reload) },
    kind === "accept" || kind === "reject" ? ACTIONS[kind].button : `${ACTIONS[kind].button}…`);
}

const doubtButtons = (m, by, reload) => [actButton("accept", m, { send: { verdict: "accept", by } }, reload), " ",
  actButton("reject", m, { send: { verdict: "reject", by } }, reload)];

// ---- pages --------------------------------------------------------------------------------------

// The first page: what the agent believes. Entities (search, counts, last change) -> an entity's beliefs -> a
// fact's life (the Life page, by fact key).

const nsOf = (q) => q.get("ns") || "default";
const beliefsHref = (ns, entity) => `/beliefs?${new URLSearchParams({ ns, entity })}`;
const lifeHref = (key) => `/life?${new URLSearchParams({ ns: key.namespace, entity: key.entity, attribute: key.attribute })}`;
const sourceOf = (v) => short(v, "MEMORY_SOURCE_").toLowerCase().replace("_", " ");
// One wrapper a cell, so that on a phone (table.stack) a cell is its label beside its content.
const cell = (label, attrs, ...children) => h("td", Object.assign({ "data-label": label }, attrs || {}), h("div", {}, ...children));

function entitiesPage() {
  const q = new URLSearchParams(location.search);
  const form = h("form", { class: "query", id: "entities-form" },
    h("label", {}, "namespace", h("input", { name: "ns", value: q.get("ns") || "", placeholder: "default" })),
    h("label", {}, "entity contains", h("input", { name: "q", value: q.get("q") || "", placeholder: "e.g. alice", type: "search" })),
    h("button", { type: "submit" }, "Find"));
  const out = h("div", { id: "entities-out" });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const params = new URLSearchParams([...new FormData(form)].filter(([, v]) => v));
    history.replaceState(null, "", `/?${params}`);
    runEntities(params, out);
  });
  show(h("h1", {}, "What the agent believes"), form, out);
  runEntities(q, out);
}

async function runEntities(params, out) {
  out.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  let data;
  try { data = await getJSON(`/api/entities?${params}`); } catch (err) { out.replaceChildren(errorBox(err)); return; }
  const ns = nsOf(params);
  const total = Number(data.total_count);
  if (!data.entities.length) {
    out.replaceChildren(h("p", { class: "muted", id: "entities-status" },
      params.get("q") ? `No entity of namespace ${ns} contains “${params.get("q")}”.` : `Namespace ${ns} has no entities yet.`));
    return;
  }
  const status = h("p", { class: "muted", id: "entities-status" },
    `${data.entities.length === total ? total : `${data.entities.length} of ${total}`} entit${total === 1 ? "y" : "ies"} of namespace ${ns}, most recently changed first.`);
  const table = h("table", { id: "entities", class: "stack" },
    h("thead", {}, h("tr", {}, ["entity", "beliefs", "current", "memories", "doubted", "last change (system)"]
      .map((x, i) => h("th", { class: i && i < 5 ? "num" : "" }, x)))),
    h("tbody", {}, data.entities.map((e) => h("tr", { "data-entity": e.entity },
      cell("entity", {}, h("a", { href: beliefsHref(ns, e.entity) }, e.entity)),
      cell("beliefs", { class: "num" }, e.belief_count),
      cell("current", { class: "num" }, e.current_count),
      cell("memories", { class: "num" }, e.memory_count),
      cell("doubted", { class: "num" }, Number(e.doubted_count) ? h("span", { class: "tag doubt" }, e.doubted_count) : "0"),
      cell("last change", {}, when(e.last_changed_at))))));
  out.replaceChildren(status, h("div", { class: "panel" }, table));
}

async function beliefsPage() {
  const q = new URLSearchParams(location.search);
  const ns = nsOf(q), entity = q.get("entity") || "", asOf = q.get("as_of") || "";
  const back = h("p", {}, h("a", { href: `/?${new URLSearchParams({ ns })}` }, `← entities of ${ns}`));
  // World time: what the agent held true then (the versions valid then, superseded since or not). A past view
  // offers no corrections: they act on what holds now.
  const asOfForm = h("form", { class: "query", id: "as-of-form" },
    h("label", {}, "as of (UTC, world time)", h("input", { name: "as_of", type: "datetime-local", step: 1, value: asOf })),
    h("button", { type: "submit" }, "Show"),
    asOf ? h("a", { href: `/beliefs?${new URLSearchParams({ ns, entity })}`, id: "as-of-now" }, "now") : null);
  asOfForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const at = new FormData(asOfForm).get("as_of");
    history.replaceState(null, "", `/beliefs?${new URLSearchParams(Object.assign({ ns, entity }, at ? { as_of: at } : {}))}`);
    beliefsPage();
  });
  const done = takeDone();
  let data;
  try { data = await getJSON(`/api/beliefs?${q}`); } catch (err) { show(back, h("h1", {}, entity || "Beliefs"), asOfForm, done, errorBox(err)); return; }
  const others = Number(data.unattributed_count);
  const current = asOf ? "held then" : "current";
  const summary = h("p", { class: "muted", id: "beliefs-status" },
    `${data.beliefs.length} attribute${data.beliefs.length === 1 ? "" : "s"} with ${asOf ? `a value held at ${when(data.as_of)} (world time)` : "a current value"}`,
    data.last_changed_at ? `, last change ${when(data.last_changed_at)}` : "",
    others ? [". ", h("a", { href: `/search?${new URLSearchParams(Object.assign({ ns, entity, q: entity }, asOf ? { as_of: asOf } : {}))}` },
      `${others} other ${current} memor${others === 1 ? "y" : "ies"}`), " about it state no attribute (episodes, notes)."] : ".");
  if (!data.beliefs.length) { show(back, h("h1", {}, entity), asOfForm, done, summary); return; }
  const doubtLinks = (m, ids) => ids.filter((i) => Number(i)).map((i) => h("div", { class: "doubt-note", "data-doubt": i },
    h("span", { class: "tag doubt" }, "doubt"), " may be outdated by ", memLink(i), " ", asOf ? null : doubtButtons(m, i, beliefsPage)));
  const heads = ["attribute", "value", "since (world)", "source", "confidence", "open doubts", "life"].concat(asOf ? [] : ["correct"]);
  const table = h("table", { id: "beliefs", class: "stack" },
    h("thead", {}, h("tr", {}, heads.map((x) => h("th", {}, x)))),
    h("tbody", {}, data.beliefs.map((b) => {
      const m = b.memory;
      const how = b.read_from_text
        ? h("span", { class: "tag read", title: `read ${m.inferred ? `by ${m.inferred.method}, ${fmt(m.inferred.confidence, 2)} sure` : ""}` }, "read from text")
        : h("span", { class: "tag keyed" }, "keyed");
      // An as-of answer's records are as they are now: their own doubts may have come later, so none is shown.
      const also = (b.also_current || []).map((o) => h("div", { class: "muted also" }, `also ${current}: `, memLink(o.id), ` ${o.content}`,
        Number(o.possibly_outdated_by) && !asOf ? [" (may be outdated by ", memLink(o.possibly_outdated_by), ") ", doubtButtons(o, o.possibly_outdated_by, beliefsPage)] : ""));
      const what = `${entity} · ${b.attribute}${b.value ? ` = ${b.value}` : ""}`;
      return h("tr", { "data-belief": b.attribute, "data-read": b.read_from_text ? "1" : null, "data-memory-id": m.id },
        cell("attribute", {}, h("b", {}, b.attribute)),
        cell("value", {}, b.value ? h("span", { class: "value" }, b.value) : h("span", { class: "muted" }, "(said in the statement)"), " ", how, " ", memLink(m.id),
          asOf && stateOf(m.state) !== "ACTIVE" ? [" ", stateTag(m.state)] : null, h("div", { class: "muted" }, m.content), also),
        cell("since", {}, when(m.valid_from)),
        cell("source", {}, sourceOf(m.source)),
        cell("confidence", { class: "num" }, fmt(m.confidence, 2)),
        cell("open doubts", {}, doubtLinks(m, b.possibly_outdated_by || []).length ? doubtLinks(m, b.possibly_outdated_by) : h("span", { class: "muted" }, "none")),
        cell("life", {}, h("a", { href: lifeHref(b.history_key), "data-life": b.attribute },
          `${b.version_count} version${Number(b.version_count) === 1 ? "" : "s"} →`)),
        asOf ? null : cell("correct", { class: "acts" }, actButton("correct", m, { what }, beliefsPage), " ", actButton("forget", m, {}, beliefsPage)));
    })));
  show(back, h("h1", {}, entity), asOfForm, done, summary, asOf ? null : correctionArea(), h("div", { class: "panel" }, table));
}

async function overviewPage() {
  let data;
  try { data = await getJSON("/api/overview"); } catch (err) { show(h("h1", {}, "Overview"), errorBox(err)); return; }
  const st = data.stats;
  const index = st.index || {};
  const review = st.review || {};
  const cards = h("div", { class: "cards" },
    h("div", { class: "card" }, h("div", { class: "muted" }, "memories (not evicted)"),
      h("div", { class: "big", id: "total-count" }, st.total_count)),
    h("div", { class: "card" }, h("div", { class: "muted" }, "last change"), h("div", { class: "big" }, st.last_sequence)),
    h("div", { class: "card", id: "index-state" }, h("div", { class: "muted" }, "index"),
      h("div", { class: "big" }, short(index.state, "INDEX_STATE_")),
      h("div", {}, `${index.indexed_count} in graph, ${index.fresh_tail_count} in fresh tail`),
      index.rebuild_total > 0 ? h("div", {}, `rebuild ${index.rebuild_remaining} of ${index.rebuild_total} left`) : null),
    h("div", { class: "card" }, h("div", { class: "muted" }, "open proposals"),
      h("div", { class: "big" }, Number(review.open_consolidations) + Number(review.open_evictions) +
        Number(review.open_reinterpretations) + Number(review.open_supersessions)),
      h("div", {}, `${review.reviewers} reviewer(s) attached`)),
    h("div", { class: "card" }, h("div", { class: "muted" }, "embedder / framework"),
      h("div", {}, `${st.embedder} (${st.dimension}-d)`), h("div", {}, st.framework_version || "—")));

  // State x kind counts straight from GetStats.
  const cell = {};
  for (const c of st.counts) cell[`${stateOf(c.state)}/${kindOf(c.kind)}`] = Number(c.count);
  const table = h("table", { id: "counts" },
    h("thead", {}, h("tr", {}, h("th", {}, "state \\ kind"), KINDS.map((k) => h("th", { class: "num" }, k)),
      h("th", { class: "num" }, "all"))),
    h("tbody", {}, STATES.filter((x) => x !== "EVICTED").map((state) => h("tr", {}, h("th", {}, stateTag(state)),
      KINDS.map((k) => h("td", { class: "num", "data-count": `${state}/${k}` }, cell[`${state}/${k}`] || 0)),
      h("td", { class: "num", "data-count": `${state}/*` },
        KINDS.reduce((a, k) => a + (cell[`${state}/${k}`] || 0), 0))))));

  const log = data.log;
  const progress = log.target ? Math.min(100, (100 * log.cursor) / log.target) : 100;
  const logNote = h("p", { class: "muted", id: "log-progress" },
    `change log read to sequence ${log.cursor}` + (log.target ? ` (${progress.toFixed(0)} % of the ${log.target} there were at start)` : "") +
    (log.error ? ` — reader: ${log.error}` : ""));

  const series = data.series;
  const panels = [];
  if (series.times.length) {
    const states = {};
    for (const [k, v] of Object.entries(series.states)) if (k !== "MEMORY_STATE_EVICTED") states[stateOf(k)] = v;
    panels.push(h("div", { class: "panel" }, h("h2", {}, "Memories by state over time (change log)"),
      lineChart(series.times, states, { label: "memories by state" })));
    const kinds = {};
    for (const [k, v] of Object.entries(series.kinds)) kinds[kindOf(k)] = v;
    panels.push(h("div", { class: "panel" }, h("h2", {}, "Memories by kind over time (not evicted)"),
      lineChart(series.times, kinds, { label: "memories by kind" })));
    const perMin = series.created.map((c) => (c * 60) / Math.max(series.bucket_s, 1e-9));
    panels.push(h("div", { class: "panel" }, h("h2", {}, "Writes per minute (change log)"),
      lineChart(series.times, { writes: perMin }, { label: "writes per minute" })));
  }
  if (data.rates && data.rates.times.length) {
    panels.push(h("div", { class: "panel" }, h("h2", {}, "Calls per minute (sidecar metrics, last 10 min)"),
      lineChart(data.rates.times, { writes: data.rates.writes_per_min, recalls: data.rates.recalls_per_min },
        { label: "call rates" })));
  }
  const sweeps = (st.recent_sweeps || []).slice().reverse();
  if (sweeps.length) {
    panels.push(h("div", { class: "panel" }, h("h2", {}, `Recent sweeps: duration (ms), oldest first`),
      bars(sweeps.map((x) => `${x.trigger} ${x.evaluated_count} evaluated`), sweeps.map((x) => Number(x.total_ms)), { unit: "ms" })));
  }
  const values = h("div", { class: "cards", id: "values" }, Object.entries(data.values).map(([k, entry]) =>
    h("div", { class: "panel" }, histogram(entry, { title: kindOf(k) }))));
  show(h("h1", {}, "Overview"), cards, h("h2", {}, "Memories by state and kind (GetStats)"),
    h("div", { class: "panel" }, table), logNote, experimentPanel(st.experiment), h("div", { class: "grid" }, panels),
    h("h2", {}, "Value distribution per kind (ACTIVE and ARCHIVED; dashed: archive and evict thresholds)"), values);
}

// The running experiment from GetStats: per-arm outcomes and posteriors, then its automatic decisions with
// their evidence (each one is also a change-log event; UpdatePolicy with its previous policy reverses it).
function experimentPanel(exp) {
  if (!exp) return null;
  const pct = (x) => `${(100 * Number(x || 0)).toFixed(1)} %`;
  const head = ["arm", "share", "outcomes", "success", "95 % interval", "P(best)", "P(beats control)"];
  const rows = (exp.arms || []).map((a) => h("tr", {},
    h("td", {}, a.name + (a.name === exp.control_arm ? " (control)" : "") + (a.name === exp.promoted_arm ? " (promoted)" : "")),
    h("td", { class: "num" }, pct(a.share)), h("td", { class: "num" }, a.outcome_count),
    h("td", { class: "num" }, pct(a.success_rate)), h("td", { class: "num" }, `${pct(a.success_low)} – ${pct(a.success_high)}`),
    h("td", { class: "num" }, pct(a.probability_best)), h("td", { class: "num" }, pct(a.probability_beats_control))));
  const decisions = (exp.decisions || []).map((d) => h("li", {},
    `${new Date(Number(d.decided_at_s) * 1000).toISOString()} ${short(d.kind, "EXPERIMENT_DECISION_KIND_")} ${d.arm}: ${d.reason}`));
  return h("div", { class: "panel", id: "experiment" },
    h("h2", {}, `Experiment ${exp.name}: ${short(exp.allocation, "ALLOCATION_MODE_")} allocation, ` +
      `${short(exp.phase, "EXPERIMENT_PHASE_")}, snapshot ${exp.snapshot}`),
    h("table", {}, h("thead", {}, h("tr", {}, head.map((x) => h("th", {}, x)))), h("tbody", {}, rows)),
    decisions.length ? h("ul", { id: "experiment-decisions" }, decisions) : h("p", { class: "muted" }, "no automatic decision yet"));
}

function searchPage() {
  const q = new URLSearchParams(location.search);
  const field = (name, label, attrs = {}) => h("label", {}, label, h("input", Object.assign({ name, value: q.get(name) || "" }, attrs)));
  const kindBoxes = h("label", {}, "kinds", h("select", { name: "kind", multiple: true, size: 3 },
    KINDS.map((k) => h("option", { value: `MEMORY_KIND_${k}`, selected: q.getAll("kind").includes(`MEMORY_KIND_${k}`) }, k))));
  const form = h("form", { class: "query", id: "search-form" },
    field("q", "query", { size: 40, required: true, placeholder: "what do you want to recall?" }),
    field("ns", "namespace", { placeholder: "default" }), field("entity", "entity"), field("tags", "tags (a,b)"),
    kindBoxes, field("as_of", "as of (UTC)", { type: "datetime-local", step: 1 }),
    h("label", {}, "mode", h("select", { name: "mode" }, h("option", { value: "current" }, "current"),
      h("option", { value: "history", selected: q.get("mode") === "history" }, "history"))),
    h("label", {}, "archived", h("input", { type: "checkbox", name: "archived", value: "1", checked: q.get("archived") === "1" })),
    field("k", "k", { type: "number", min: 1, max: 100, value: q.get("k") || "10" }),
    h("button", { type: "submit" }, "Recall"));
  const out = h("div", { id: "results" });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const params = new URLSearchParams(new FormData(form));
    history.replaceState(null, "", `/search?${params}`);
    runSearch(params, out);
  });
  const notice = h("div", { id: "search-notice" });
  show(h("h1", {}, "Search"), form,
    h("p", { class: "muted" }, "A search is a real Recall that only looks (peek): the numbers are the ones recall ranked with (score = match × factor), and it changes nothing, not even access counts."),
    notice, out);
  getJSON("/api/about").catch(() => ({})).then((about) => {
    if (about.text_search !== false) {
      if (q.get("q")) runSearch(q, out);
      return;
    }
    form.querySelector("button[type=submit]").disabled = true;
    notice.replaceChildren(h("p", { class: "error", role: "alert", "data-no-embedder": "" },
      "Search by text cannot work here: this sidecar runs with --embedder none, so it stores only the vectors its "
      + "clients send and has no vector for a query typed on this page. Find memories by id or fact key on the "
      + "Life page, or follow the Live page; serve with an embedder (--embedder local) to search by text."));
  });
}

async function runSearch(params, out) {
  out.replaceChildren(h("p", { class: "muted" }, "Recalling…"));
  let data;
  try { data = await getJSON(`/api/search?${params}`); } catch (err) { out.replaceChildren(errorBox(err)); return; }
  if (!data.memories.length) { out.replaceChildren(h("p", { class: "muted" }, "No memory matched.")); return; }
  const head = ["#", "memory", "kind / state", "similarity", "words", "fields", "match", "trust", "factor", "score",
    "accuracy", "relevance", "utility", "cost", "value"];
  out.replaceChildren(h("p", { class: "muted" }, `retrieval ${data.retrieval_id}${data.arm ? `, arm ${data.arm}` : ""}`),
    h("div", { class: "panel" }, h("table", { id: "hits" },
      h("thead", {}, h("tr", {}, head.map((x, i) => h("th", { class: i >= 3 ? "num" : "" }, x)))),
      h("tbody", {}, data.memories.map((hit, i) => {
        const m = hit.memory, b = hit.breakdown || {}, v = m.scores || {};
        return [h("tr", { "data-hit": m.id },
          h("td", {}, i + 1), h("td", {}, memLink(m.id), " ", m.content, factLine(m)),
          h("td", {}, kindOf(m.kind), " ", stateTag(m.state)),
          [hit.similarity, b.words, b.fields, b.match, b.trust, b.factor, hit.score, v.accuracy, v.relevance, v.utility, v.cost, v.value]
            .map((x) => h("td", { class: "num" }, fmt(x)))),
        h("tr", {}, h("td", {}), h("td", { colspan: head.length - 1, class: "hint" }, hit.hint))];
      })))));
}

function lifePage() {
  const q = new URLSearchParams(location.search);
  const field = (name, label, attrs = {}) => h("label", {}, label, h("input", Object.assign({ name, value: q.get(name) || "" }, attrs)));
  const form = h("form", { class: "query", id: "life-form" }, field("id", "memory id", { size: 8 }), h("span", { class: "muted" }, "or fact key"),
    field("ns", "namespace", { placeholder: "default" }), field("entity", "entity"), field("attribute", "attribute"),
    h("button", { type: "submit" }, "Show"));
  const out = h("div", { id: "life" });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const params = new URLSearchParams([...new FormData(form)].filter(([, v]) => v));
    history.pushState(null, "", `/life?${params}`);
    runLife(params, out);
  });
  show(h("h1", {}, "A fact's or a memory's life"), form, out);
  if (q.get("id") || q.get("entity")) runLife(q, out);
}

function timeline(versions, events) {
  const width = 900, rowH = 26, pad = { l: 70, r: 20, t: 24 };
  const toS = (t) => (t ? Date.parse(t) / 1000 : null);
  const stamps = [];
  for (const v of versions) stamps.push(toS(v.valid_from), toS(v.valid_to), toS(v.recorded_at));
  for (const e of events) stamps.push(toS(e.recorded_at));
  const known = stamps.filter((x) => x !== null);
  const now = Date.now() / 1000;
  const lo = Math.min(...known), hi = Math.max(now, ...known);
  const x = (t) => pad.l + ((t - lo) / (hi - lo || 1)) * (width - pad.l - pad.r);
  const height = pad.t + versions.length * rowH * 2 + 30;
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "timeline" });
  svg.append(s("text", { x: pad.l, y: 12 }, new Date(lo * 1000).toISOString().slice(0, 19) + "Z"));
  svg.append(s("text", { x: width - pad.r, y: 12, "text-anchor": "end" }, "now"));
  versions.forEach((v, i) => {
    const y = pad.t + i * rowH * 2;
    const from = toS(v.valid_from), to = toS(v.valid_to) || now;
    const color = COLORS[i % COLORS.length];
    svg.append(s("text", { x: 4, y: y + 14 }, `#${v.id} world`));
    svg.append(s("rect", { x: x(from), y: y + 4, width: Math.max(2, x(to) - x(from)), height: 14, fill: color, opacity: 0.75 },
      s("title", {}, `memory ${v.id} valid ${when(v.valid_from)} – ${v.valid_to ? when(v.valid_to) : "now"}`)));
    svg.append(s("text", { x: 4, y: y + rowH + 12 }, "system"));
    svg.append(s("line", { class: "grid", x1: pad.l, x2: width - pad.r, y1: y + rowH + 8, y2: y + rowH + 8 }));
    for (const e of events.filter((e) => String(e.memory_id) === String(v.id))) {
      svg.append(s("circle", { cx: x(toS(e.recorded_at)), cy: y + rowH + 8, r: 5, fill: color },
        s("title", {}, `${when(e.recorded_at)} ${short(e.type, "CHANGE_EVENT_TYPE_")}: ${e.reason}`)));
    }
  });
  return svg;
}

async function runLife(params, out) {
  out.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  const done = takeDone();
  let data;
  try { data = await getJSON(`/api/life?${params}`); } catch (err) { out.replaceChildren(...[done, errorBox(err)].filter(Boolean)); return; }
  if (!data.versions.length) { out.replaceChildren(...[done, h("p", { class: "muted" }, "No such fact key or memory.")].filter(Boolean)); return; }
  const reload = () => runLife(params, out);
  const acts = (v) => {
    const slot = v.fact && v.fact.attribute ? v.fact : v.inferred && v.inferred.attribute ? v.inferred : null;
    const what = slot ? `${v.entity || slot.entity} · ${slot.attribute}${slot.value ? ` = ${slot.value}` : ""}` : "";
    const state = stateOf(v.state);
    return [
      v.current && slot ? [actButton("correct", v, { what }, reload), " "] : null,
      state !== "OBSOLETE" && state !== "EVICTED" ? [actButton("forget", v, {}, reload), " "] : null,
      state === "OBSOLETE" && Number(v.superseded_by) ? actButton("restore", v, {}, reload) : null,
      v.current && Number(v.possibly_outdated_by) ? doubtButtons(v, v.possibly_outdated_by, reload) : null,
    ];
  };
  const links = (label, ids) => (ids && ids.length && ids.some((i) => Number(i)) ? h("div", {}, `${label} `, ids.filter((i) => Number(i)).map((i) => [memLink(i), " "])) : null);
  // Stacked on a phone (a card a version), so that the corrections at the row's end are in sight.
  const versions = h("table", { id: "versions", class: "stack" },
    h("thead", {}, h("tr", {}, ["memory", "content", "state", "world: valid from", "valid to", "system: recorded", "links", "correct"].map((x) => h("th", {}, x)))),
    h("tbody", {}, data.versions.map((v) => h("tr", { "data-version": v.id, "data-current": v.current ? "1" : null },
      cell("memory", {}, memLink(v.id)), cell("content", {}, v.content, factLine(v)),
      cell("state", {}, stateTag(v.state), v.current ? h("span", { class: "tag current" }, "current") : null),
      cell("valid from", {}, when(v.valid_from)), cell("valid to", {}, when(v.valid_to)), cell("recorded", {}, when(v.recorded_at)),
      cell("links", {}, links("superseded by", [v.superseded_by]), links("supersedes", v.supersedes), links("consolidated into", [v.consolidated_into]),
        links("members", v.members), links("may be outdated by", [v.possibly_outdated_by])),
      cell("correct", { class: "acts" }, acts(v))))));
  const events = h("table", { id: "transitions" },
    h("thead", {}, h("tr", {}, ["seq", "system time", "memory", "event", "from → to", "why", "other memory"].map((x) => h("th", {}, x)))),
    h("tbody", {}, data.events.map((e) => h("tr", { "data-seq": e.sequence },
      h("td", {}, e.sequence), h("td", {}, when(e.recorded_at)), h("td", {}, memLink(e.memory_id)),
      h("td", {}, short(e.type, "CHANGE_EVENT_TYPE_")),
      h("td", {}, e.from_state !== "MEMORY_STATE_UNSPECIFIED" ? [stateTag(e.from_state), " → "] : "", stateTag(e.to_state)),
      h("td", {}, h("span", { class: "tag reason" }, e.reason_class), " ", e.reason, e.detail ? h("div", { class: "muted" }, e.detail) : null),
      h("td", {}, (e.related_ids || []).map((i) => [memLink(i), " "]))))));
  out.replaceChildren(...[done, correctionArea()].filter(Boolean), h("div", { class: "panel" }, timeline(data.versions, data.events)),
    h("h2", {}, data.versions_total > data.versions.length ? `Versions (the newest ${data.versions.length} of ${data.versions_total})` : `Versions (${data.versions.length})`), h("div", { class: "panel" }, versions),
    h("h2", {}, "Transitions"), h("div", { class: "panel" }, events));
}

async function reviewPage() {
  let data;
  try { data = await getJSON("/api/review"); } catch (err) { show(h("h1", {}, "Review queue"), errorBox(err)); return; }
  const status = h("p", { id: "review-status", class: "muted" });
  const decide = async (proposal, verdict, box) => {
    for (const b of box.querySelectorAll("button")) b.disabled = true;
    try {
      const r = await (await api("/api/review/decide", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ proposal_id: proposal.id, verdict }) })).json();
      status.textContent = r.settled ? `${proposal.id}: ${verdict}ed` : `${proposal.id} was no longer open`;
      box.remove();
      setTimeout(reviewPage, 300);
    } catch (err) {
      status.replaceChildren(errorBox(err));
      for (const b of box.querySelectorAll("button")) b.disabled = false;
    }
  };
  const proposals = data.proposals.map((p) => {
    const box = h("div", { class: "proposal", "data-proposal": p.id },
      h("div", {}, h("span", { class: "tag" }, short(p.kind, "PROPOSAL_KIND_")), h("b", {}, p.id), " ",
        h("span", { class: "muted" }, `deadline ${when(p.deadline)}`)),
      h("div", {}, p.reason), p.suggested_text ? h("div", { class: "hint" }, `suggested: ${p.suggested_text}`) : null,
      h("table", {}, h("tbody", {}, p.memories.map((m) => h("tr", {}, h("td", {}, memLink(m.id)), h("td", {}, m.content),
        h("td", {}, kindOf(m.kind), " ", stateTag(m.state)), h("td", { class: "num" }, `value ${fmt((m.scores || {}).value)}`))))));
    box.append(h("div", { class: "actions" },
      h("button", { onclick: () => decide(p, "accept", box), "data-action": "accept" }, "Accept"),
      h("button", { class: "secondary", onclick: () => decide(p, "reject", box), "data-action": "reject" }, "Reject")));
    return box;
  });
  const history = h("table", { id: "decisions" }, h("thead", {}, h("tr", {}, ["seq", "time", "memory", "change", "why"].map((x) => h("th", {}, x)))),
    h("tbody", {}, data.decisions.slice(0, 100).map((e) => h("tr", {}, h("td", {}, e.sequence), h("td", {}, when(e.recorded_at)),
      h("td", {}, memLink(e.memory_id)), h("td", {}, stateTag(e.from_state), " → ", stateTag(e.to_state)), h("td", {}, e.reason)))));
  show(h("h1", {}, "Review queue"), status,
    proposals.length ? proposals : h("p", { class: "muted", id: "no-proposals" }, "No open proposals."),
    h("h2", {}, "Decision history (change log, newest first)"), h("div", { class: "panel" }, history));
}

let liveAbort = null;

function livePage() {
  const q = new URLSearchParams(location.search);
  const form = h("form", { class: "query", id: "live-form" },
    h("label", {}, "namespace", h("input", { name: "ns", value: q.get("ns") || "", placeholder: "all" })),
    h("label", {}, "memory kind", h("select", { name: "kind" }, h("option", { value: "" }, "all"),
      KINDS.map((k) => h("option", { value: `MEMORY_KIND_${k}`, selected: q.get("kind") === `MEMORY_KIND_${k}` }, k)))),
    h("button", { type: "submit" }, "Follow"));
  const body = h("tbody", { id: "live-list" });
  const status = h("p", { class: "muted", id: "live-status" }, "Connecting…");
  const table = h("table", {}, h("thead", {}, h("tr", {}, ["seq", "system time", "namespace", "memory", "kind", "event", "from → to", "why"].map((x) => h("th", {}, x)))), body);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const params = new URLSearchParams([...new FormData(form)].filter(([, v]) => v));
    history.replaceState(null, "", `/live?${params}`);
    follow(params, body, status);
  });
  show(h("h1", {}, "Live changes"), form, status, h("div", { class: "panel" }, table));
  follow(q, body, status);
}

async function follow(params, body, status) {
  if (liveAbort) liveAbort.abort();
  const controller = new AbortController();
  liveAbort = controller;
  body.replaceChildren();
  let count = 0;
  try {
    const response = await api(`/api/live?${params}`, { signal: controller.signal });
    status.textContent = "Following the change log.";
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, cut).trim();
        buffer = buffer.slice(cut + 1);
        if (!line) continue;
        const e = JSON.parse(line);
        if (e.error) { status.replaceChildren(errorBox(new Error(e.error))); continue; }
        count += 1;
        body.prepend(h("tr", { class: "fresh", "data-seq": e.sequence }, h("td", {}, e.sequence), h("td", {}, when(e.recorded_at)),
          h("td", {}, e.namespace), h("td", {}, Number(e.memory_id) ? memLink(e.memory_id) : ""), h("td", {}, kindOf(e.kind)),
          h("td", {}, short(e.type, "CHANGE_EVENT_TYPE_")),
          h("td", {}, e.from_state !== "MEMORY_STATE_UNSPECIFIED" ? [stateTag(e.from_state), " → "] : "", stateTag(e.to_state)),
          h("td", {}, h("span", { class: "tag reason" }, e.reason_class), " ", e.reason)));
        while (body.children.length > 500) body.lastChild.remove();
        status.textContent = `Following the change log: ${count} event(s) shown.`;
      }
    }
    status.textContent = "The stream ended.";
  } catch (err) {
    if (err.name !== "AbortError") status.replaceChildren(errorBox(err));
  }
}

// ---- routing and the token ----------------------------------------------------------------------

const ROUTES = { "/": entitiesPage, "/beliefs": beliefsPage, "/overview": overviewPage, "/search": searchPage, "/life": lifePage, "/review": reviewPage, "/live": livePage };

function route() {
  if (liveAbort && location.pathname !== "/live") { liveAbort.abort(); liveAbort = null; }
  const page = ROUTES[location.pathname] || entitiesPage;
  const tab = location.pathname === "/beliefs" ? "/" : location.pathname; // an entity's beliefs belong to the first tab
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("current", a.getAttribute("href") === tab);
  page();
}

function init() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem("memevo-token", fromHash);
    history.replaceState(null, "", location.pathname + location.search);
  }
  const state = document.getElementById("token-state");
  state.textContent = token() ? "token set" : "no token";
  document.getElementById("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = document.getElementById("token-input");
    if (input.value) sessionStorage.setItem("memevo-token", input.value.trim());
    else sessionStorage.removeItem("memevo-token");
    input.value = "";
    state.textContent = token() ? "token set" : "no token";
    route();
  });
  document.addEventListener("click", (e) => {
    const a = e.target.closest("a");
    if (!a || a.origin !== location.origin || e.ctrlKey || e.metaKey) return;
    e.preventDefault();
    history.pushState(null, "", a.getAttribute("href"));
    route();
  });
  window.addEventListener("popstate", route);
  route();
}

init();
