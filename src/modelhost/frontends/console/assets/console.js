// modelhost's web console: takes over the page the server rendered and keeps it current through the server's
// own API only (health, repository index, statistics, model configuration, model control). Every URL is
// relative, so the console works behind a reverse proxy's path prefix. No build step: plain browser JavaScript,
// with uPlot (console/assets/uPlot.iife.min.js) for the charts.
"use strict";
(function () {
  const params = new URLSearchParams(location.search);
  // ?refresh=<ms>: how often the page asks the server (2 s unless told; tests ask more often).
  const REFRESH_MS = Math.max(250, Number(params.get("refresh")) || 2000);
  const HISTORY = 90; // points kept per chart
  const facts = JSON.parse(document.getElementById("console-facts").textContent);

  // Fields of inference.ModelConfig that are enums (written bare in config.pbtxt), and those that are maps
  // (written as repeated key/value entries). tests/e2e/test_console.py checks them against the protobuf.
  const ENUM_FIELDS = new Set(["data_type", "format", "kind", "priority", "timeout_action"]);
  const MAP_FIELDS = new Set([
    "cc_model_filenames", "input", "input_map", "inputs", "metric_tags", "output_map", "parameters",
    "priority_queue_policy",
  ]);
  // Maps keyed by a number (written bare, not quoted).
  const NUMBER_KEYED = new Set(["priority_queue_policy"]);
  // Refreshes between two fetches of every READY version's configuration (one refresh every 2 s: 30 s).
  const CONFIG_REFETCH = 15;

  const state = {
    index: [], // the repository index rows
    configs: new Map(), // "name/version" -> configuration JSON (of a READY version)
    polls: 0, // refreshes so far
    history: new Map(), // "name/version" -> {t, rps, fps, p50, p99, queue, compute}
    previous: new Map(), // "name/version" -> [time, statistics] of the last poll
    batches: new Map(), // "name/version" -> [[batch size, executions], ...]
    selected: null, // the model name shown in the detail panel
    sortKey: "name",
    sortUp: true,
    filter: "",
    ready: facts.ready,
    refreshes: 0,
    lastError: "",
  };

  // -- the API ----------------------------------------------------------------------------------------------

  async function api(method, path, body) {
    const init = { method, headers: {} };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers["Content-Type"] = "application/json";
    }
    const response = await fetch(path, init);
    const text = await response.text();
    let doc = null;
    try {
      doc = text ? JSON.parse(text) : null;
    } catch (e) {
      doc = null;
    }
    if (!response.ok) {
      const message = doc && doc.error ? doc.error : `${response.status} ${response.statusText}`;
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return doc;
  }

  const enc = encodeURIComponent;
  const key = (name, version) => `${name}/${version}`;

  // -- what the table shows -------------------------------------------------------------------------------------

  // Bytes as the server-rendered page writes them (human_size, repository/mirror.py).
  function sizeText(n) {
    for (const [unit, scale] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
      if (n >= scale) return `${(n / scale).toFixed(1)} ${unit}`;
    }
    return `${n} B`;
  }

  function describe(config) {
    const kinds = { KIND_GPU: "GPU", KIND_CPU: "CPU" };
    const instances = (config.instance_group || [])
      .map((g) => `${g.count} x ${g.name} (${kinds[g.kind] || "model"})`)
      .join(", ");
    let batching = "none";
    if (config.dynamic_batching) {
      const d = config.dynamic_batching;
      const preferred = (d.preferred_batch_size || []).join("/");
      batching = `dynamic, delay ${d.max_queue_delay_microseconds || 0} us` + (preferred ? `, preferred ${preferred}` : "");
    } else if (config.sequence_batching) {
      batching = "sequence";
    } else if (config.ensemble_scheduling) {
      batching = "ensemble";
    }
    return {
      backend: config.backend || config.platform || "",
      instances,
      max_batch_size: String(config.max_batch_size || 0),
      batching,
    };
  }

  function rowCells(row, stats) {
    const cells = {
      name: row.name,
      version: row.version || "",
      state: row.state || "",
      reason: row.reason || "",
      backend: "",
      instances: "",
      max_batch_size: "",
      batching: "",
      memory: row.memory_bytes !== undefined ? sizeText(row.memory_bytes) : "",
      requests: "",
      failures: "",
    };
    if (row.state === "READY") {
      const config = state.configs.get(key(row.name, row.version));
      if (config) Object.assign(cells, describe(config));
      const s = stats.get(key(row.name, row.version));
      cells.requests = String(s ? s.inference_stats.success.count : 0);
      cells.failures = String(s ? s.inference_stats.fail.count : 0);
    }
    return cells;
  }

  // -- config.pbtxt from the configuration's JSON -------------------------------------------------------------

  function isDefault(value) {
    return value === "" || value === 0 || value === false || (Array.isArray(value) && value.length === 0);
  }

  function scalar(field, value) {
    if (typeof value === "string") {
      return ENUM_FIELDS.has(field) && /^[A-Z][A-Z0-9_]*$/.test(value) ? value : JSON.stringify(value);
    }
    return String(value);
  }

  function pbtxtFields(obj, indent) {
    const pad = "  ".repeat(indent);
    const out = [];
    for (const [field, value] of Object.entries(obj)) {
      if (value === null || isDefault(value)) continue;
      if (MAP_FIELDS.has(field) && typeof value === "object" && !Array.isArray(value)) {
        for (const [k, v] of Object.entries(value)) {
          out.push(`${pad}${field} {`);
          out.push(`${pad}  key: ${NUMBER_KEYED.has(field) ? k : JSON.stringify(k)}`);
          if (v !== null && typeof v === "object") {
            out.push(`${pad}  value {`, ...pbtxtFields(v, indent + 2), `${pad}  }`);
          } else {
            out.push(`${pad}  value: ${scalar("", v)}`);
          }
          out.push(`${pad}}`);
        }
      } else if (Array.isArray(value)) {
        if (value.every((v) => v !== null && typeof v === "object")) {
          for (const v of value) out.push(`${pad}${field} {`, ...pbtxtFields(v, indent + 1), `${pad}}`);
        } else {
          out.push(`${pad}${field}: [${value.map((v) => scalar(field, v)).join(", ")}]`);
        }
      } else if (typeof value === "object") {
        out.push(`${pad}${field} {`, ...pbtxtFields(value, indent + 1), `${pad}}`);
      } else {
        out.push(`${pad}${field}: ${scalar(field, value)}`);
      }
    }
    return out;
  }

  function toPbtxt(config) {
    return pbtxtFields(config, 0).join("\n") + "\n";
  }

  // -- statistics over time ---------------------------------------------------------------------------------

  function bucketMap(stats) {
    const map = new Map();
    const histogram = stats.latency_histogram;
    for (const [upper, count] of histogram ? histogram.buckets : []) map.set(upper, count);
    return map;
  }

  // The latency (ms) under which a fraction q of the interval's requests were answered: the upper bound of the
  // quarter-octave bucket it falls in (at most 25% above the true value).
  function quantileMs(now, before, q) {
    const deltas = [];
    let total = 0;
    for (const [upper, count] of now) {
      const d = count - (before.get(upper) || 0);
      if (d > 0) {
        deltas.push([upper, d]);
        total += d;
      }
    }
    if (total === 0) return null;
    deltas.sort((a, b) => a[0] - b[0]);
    let seen = 0;
    for (const [upper, d] of deltas) {
      seen += d;
      if (seen >= q * total) return upper / 1e6;
    }
    return deltas[deltas.length - 1][0] / 1e6;
  }

  function record(statsList, now) {
    for (const s of statsList) {
      const k = key(s.name, s.version);
      const previous = state.previous.get(k);
      state.previous.set(k, [now, s]);
      state.batches.set(k, (s.batch_stats || []).map((b) => [b.batch_size, b.compute_infer.count]));
      if (!previous) continue;
      const [then, before] = previous;
      const dt = (now - then) / 1000;
      if (dt <= 0) continue;
      const inf = s.inference_stats;
      const old = before.inference_stats;
      const succeeded = inf.success.count - old.success.count;
      const failed = inf.fail.count - old.fail.count;
      if (succeeded < 0 || failed < 0) {
        state.configs.delete(k); // reloaded: the counts started again, and its configuration may have changed
        continue;
      }
      const queued = inf.queue.count - old.queue.count;
      const computeNs =
        inf.compute_input.ns + inf.compute_infer.ns + inf.compute_output.ns -
        (old.compute_input.ns + old.compute_infer.ns + old.compute_output.ns);
      const computed = inf.compute_infer.count - old.compute_infer.count;
      const h = state.history.get(k) || { t: [], rps: [], fps: [], p50: [], p99: [], queue: [], compute: [] };
      state.history.set(k, h);
      const latest = bucketMap(s);
      const earlier = bucketMap(before);
      h.t.push(now / 1000);
      h.rps.push(succeeded / dt);
      h.fps.push(failed / dt);
      h.p50.push(quantileMs(latest, earlier, 0.5));
      h.p99.push(quantileMs(latest, earlier, 0.99));
      h.queue.push(queued > 0 ? (inf.queue.ns - old.queue.ns) / queued / 1000 : null);
      h.compute.push(computed > 0 ? computeNs / computed / 1000 : null);
      for (const series of Object.values(h)) if (series.length > HISTORY) series.shift();
    }
  }

  // -- rendering ----------------------------------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  function say(message, isError) {
    const target = $("action-message");
    target.textContent = message;
    target.className = isError ? "error" : "ok";
  }

  function renderTable(stats) {
    const table = $("models-table");
    const headRow = table.tHead.rows[0];
    if (!headRow.querySelector("th[data-key=actions]")) {
      headRow.append(el("th", { "data-key": "actions", scope: "col" }, "Actions"));
      for (const th of headRow.querySelectorAll("th[data-key]")) {
        if (th.dataset.key === "actions") continue;
        th.classList.add("sortable");
        th.addEventListener("click", () => {
          state.sortUp = state.sortKey === th.dataset.key ? !state.sortUp : true;
          state.sortKey = th.dataset.key;
          renderTable(lastStats);
        });
      }
    }
    for (const th of headRow.querySelectorAll("th[data-key]")) {
      th.removeAttribute("aria-sort");
      if (th.dataset.key === state.sortKey) th.setAttribute("aria-sort", state.sortUp ? "ascending" : "descending");
    }
    const columns = [...headRow.querySelectorAll("th[data-key]")].map((th) => th.dataset.key);
    let rows = state.index.map((row) => [row, rowCells(row, stats)]);
    const filter = state.filter.toLowerCase();
    if (filter) {
      rows = rows.filter(([, c]) => [c.name, c.state, c.backend].some((v) => v.toLowerCase().includes(filter)));
    }
    const numeric = new Set(["requests", "failures", "max_batch_size", "version"]);
    rows.sort(([ra, a], [rb, b]) => {
      const x = a[state.sortKey] || "";
      const y = b[state.sortKey] || "";
      let order;
      if (state.sortKey === "memory") order = (ra.memory_bytes || 0) - (rb.memory_bytes || 0);
      else if (numeric.has(state.sortKey)) order = Number(x || 0) - Number(y || 0);
      else order = x.localeCompare(y);
      return state.sortUp ? order : -order;
    });
    const body = el("tbody");
    for (const [row, cells] of rows) {
      const tr = el("tr", { "data-model": row.name, "data-state": cells.state });
      if (row.name === state.selected) tr.classList.add("selected");
      for (const column of columns) {
        if (column === "actions") {
          const td = el("td", { "data-key": "actions" });
          const ready = row.state === "READY";
          td.append(
            el("button", { type: "button", class: "load", onclick: (e) => { e.stopPropagation(); load(row.name); } }, ready ? "Reload" : "Load"),
          );
          if (ready || row.state === "LOADING") {
            td.append(el("button", { type: "button", class: "unload", onclick: (e) => { e.stopPropagation(); unload(row.name); } }, "Unload"));
          }
          tr.append(td);
        } else {
          tr.append(el("td", { "data-key": column }, cells[column] || ""));
        }
      }
      tr.addEventListener("click", () => select(row.name));
      body.append(tr);
    }
    table.tBodies[0].replaceWith(body);
  }

  function renderServer() {
    // null: the health API is restricted for this browser (page.py's _readiness says the same).
    const text = state.ready === null ? "restricted" : state.ready ? "ready" : "not ready";
    const readiness = $("readiness");
    readiness.textContent = text;
    readiness.className = state.ready ? "ready" : "not-ready";
    const serverReadiness = $("server-readiness");
    if (serverReadiness) serverReadiness.textContent = text;
    const uptime = $("server-uptime");
    if (uptime) {
      let s = Math.max(0, Math.floor(Date.now() / 1000 - facts.started));
      const days = Math.floor(s / 86400);
      s -= days * 86400;
      const two = (n) => String(n).padStart(2, "0");
      uptime.textContent = `${days ? days + "d " : ""}${two(Math.floor(s / 3600))}:${two(Math.floor((s % 3600) / 60))}:${two(s % 60)}`;
    }
    if (facts.memory_budget !== null) {
      const used = state.index.reduce((sum, row) => sum + (row.memory_bytes || 0), 0);
      const budget = $("server-memory-budget");
      if (budget) budget.textContent = `${sizeText(used)} of ${sizeText(facts.memory_budget)} taken by the loaded models`;
    }
    // With or without a budget: --model-idle-unload-secs evicts too.
    const items = state.index.filter((row) => row.evicted).map((row) => el("li", {}, `${row.name}: ${row.evicted}`));
    $("evicted").replaceChildren(...(items.length ? items : [el("li", {}, "none")]));
  }

  // -- the detail panel and its charts --------------------------------------------------------------------------

  let charts = null; // the selected model's uPlot charts

  function chart(title, series, target, bars) {
    const options = {
      title,
      width: Math.min(560, Math.max(320, target.clientWidth || 480)),
      height: 180,
      scales: { x: { time: !bars } },
      series: [{}, ...series.map(([label, stroke]) => ({
        label,
        stroke,
        fill: bars ? stroke + "55" : undefined,
        spanGaps: false,
        paths: bars && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.6, 60] }) : undefined,
      }))],
      axes: [{}, { size: 60 }],
    };
    const data = [[], ...series.map(() => [])];
    return new uPlot(options, data, target);
  }

  function select(name) {
    state.selected = name;
    const detail = $("detail");
    detail.hidden = false;
    if (charts) for (const c of Object.values(charts)) c.destroy();
    charts = null;
    const rows = state.index.filter((row) => row.name === name);
    const row = rows.find((r) => r.state === "READY") || rows[0];
    const version = row ? row.version || "" : "";
    const config = state.configs.get(key(name, version));
    const host = location.host;
    const perf = `modelhost perf -m ${name} -u ${host} --concurrency-range 1:8:2`;
    const tune = `modelhost tune -m ${name} --url ${host} --latency-budget-ms 10`;
    const override = el("textarea", { id: "config-override", rows: "6", spellcheck: "false" });
    override.value = config ? JSON.stringify({ max_batch_size: config.max_batch_size, dynamic_batching: config.dynamic_batching }, null, 1) : "{}";
    const chartBox = el("div", { class: "charts" });
    detail.replaceChildren(
      el("h2", {}, `${name}${version ? " version " + version : ""}`),
      el("div", { class: "detail-grid" },
        el("div", {},
          el("h3", {}, "Live"),
          chartBox,
        ),
        el("div", {},
          el("h3", {}, "config.pbtxt (in force)"),
          el("pre", { id: "config-pbtxt" }, config ? toPbtxt(config) : "not loaded"),
          el("h3", {}, "Reload with a config override"),
          el("p", { class: "hint" }, "JSON, as the repository API's \"config\" parameter takes it; fields not given keep the repository's."),
          override,
          el("div", {}, el("button", { type: "button", id: "reload-override", onclick: () => load(name, override.value) }, "Reload with this config")),
          el("h3", {}, "Measure and tune"),
          el("pre", { id: "commands" }, `${perf}\n${tune}`),
          el("p", { class: "hint" }, "modelhost tune --url needs --model-control-mode=explicit; behind a path prefix, give the server's own address."),
        ),
      ),
    );
    const boxes = ["throughput", "latency", "time", "batches"].map((id) => {
      const box = el("div", { class: "chart", id: `chart-${id}` });
      chartBox.append(box);
      return box;
    });
    if (typeof uPlot === "function") {
      charts = {
        throughput: chart("Requests per second", [["succeeded/s", "#2a7ab0"], ["failed/s", "#c0392b"]], boxes[0]),
        latency: chart("Latency (ms)", [["p50", "#27ae60"], ["p99", "#8e44ad"]], boxes[1]),
        time: chart("Per request (us)", [["queue", "#e67e22"], ["compute", "#2c3e50"]], boxes[2]),
        batches: chart("Executions by batch size", [["executions", "#16a085"]], boxes[3], true),
      };
    }
    updateCharts();
    renderTable(lastStats);
  }

  function updateCharts() {
    if (!charts || !state.selected) return;
    const rows = state.index.filter((row) => row.name === state.selected && row.state === "READY");
    const k = rows.length ? key(rows[0].name, rows[0].version) : "";
    const h = state.history.get(k) || { t: [], rps: [], fps: [], p50: [], p99: [], queue: [], compute: [] };
    charts.throughput.setData([h.t, h.rps, h.fps]);
    charts.latency.setData([h.t, h.p50, h.p99]);
    charts.time.setData([h.t, h.queue, h.compute]);
    const batches = state.batches.get(k) || [];
    charts.batches.setData([batches.map((b) => b[0]), batches.map((b) => b[1])]);
  }

  // -- actions ------------------------------------------------------------------------------------------------

  async function load(name, configText) {
    let body = {};
    if (configText !== undefined) {
      try {
        JSON.parse(configText);
      } catch (e) {
        say(`The config override is not JSON: ${e.message}`, true);
        return;
      }
      body = { parameters: { config: configText } };
    }
    say(`loading '${name}'...`, false);
    try {
      await api("POST", `v2/repository/models/${enc(name)}/load`, body);
      for (const k of [...state.configs.keys()]) if (k.startsWith(name + "/")) state.configs.delete(k);
      say(`loaded '${name}'`, false);
    } catch (e) {
      say(e.message, true);
    }
    await refresh();
    if (state.selected === name) select(name);
  }

  async function unload(name) {
    say(`unloading '${name}'...`, false);
    try {
      await api("POST", `v2/repository/models/${enc(name)}/unload`, {});
      say(`unloaded '${name}'`, false);
    } catch (e) {
      say(e.message, true);
    }
    await refresh();
  }

  // -- the refresh loop -----------------------------------------------------------------------------------------

  let lastStats = new Map();

  async function refresh() {
    const now = Date.now();
    const errors = [];
    const [ready, index, stats] = await Promise.all([
      fetch("v2/health/ready").then((r) => (r.status === 403 ? null : r.ok), () => false),
      api("POST", "v2/repository/index", {}).catch((e) => { errors.push(`repository index: ${e.message}`); return null; }),
      api("GET", "v2/models/stats").catch((e) => { errors.push(`statistics: ${e.message}`); return null; }),
    ]);
    state.ready = ready;
    if (index) state.index = index;
    // A model reloaded elsewhere (another client, a poll of the repository) keeps its READY row, so nothing in
    // the index says its configuration changed: the configurations are fetched afresh every CONFIG_REFETCH polls.
    if (++state.polls % CONFIG_REFETCH === 0) state.configs.clear();
    const wanted = state.index.filter((row) => row.state === "READY" && !state.configs.has(key(row.name, row.version)));
    await Promise.all(wanted.map((row) =>
      api("GET", `v2/models/${enc(row.name)}/versions/${enc(row.version)}/config`)
        .then((config) => state.configs.set(key(row.name, row.version), config))
        .catch((e) => errors.push(`configuration of '${row.name}': ${e.message}`)),
    ));
    if (stats) {
      record(stats.model_stats, now);
      lastStats = new Map(stats.model_stats.map((s) => [key(s.name, s.version), s]));
    }
    state.lastError = errors.join("; ");
    const problems = $("refresh-problems");
    problems.textContent = state.lastError;
    problems.hidden = !state.lastError;
    renderServer();
    renderTable(lastStats);
    updateCharts();
    state.refreshes += 1;
  }

  async function loop() {
    try {
      await refresh();
    } catch (e) {
      state.lastError = String(e);
    }
    setTimeout(loop, REFRESH_MS);
  }

  // -- start --------------------------------------------------------------------------------------------------

  document.body.classList.add("live");
  $("model-tools").hidden = false;
  $("models").append(el("p", { id: "refresh-problems", class: "error", hidden: "" }));
  $("filter").addEventListener("input", (e) => {
    state.filter = e.target.value;
    renderTable(lastStats);
  });
  window.modelhostConsole = {
    state, toPbtxt, refresh, select, ENUM_FIELDS, MAP_FIELDS,
    get charts() { return charts; },
  };
  loop();
})();
