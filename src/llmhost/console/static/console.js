// llmhost console: polls /console/api/overview and /console/api/series every sampling period, draws the
// series with uPlot, and calls the admin API and the inference routes the user asks for. The API key, when
// one is needed, lives in this tab's sessionStorage and travels only in the Authorization header.
"use strict";
(function () {
  const KEY_STORE = "llmhost-console-key";
  const $ = (id) => document.getElementById(id);
  const state = { key: sessionStorage.getItem(KEY_STORE) || "", overview: null, period: 5, retention: 900,
    now: Date.now() / 1000,
    data: {}, lastT: -Infinity, charts: {}, chartComps: "", timer: null, units: {}, stats: {} };

  // ---- calls ------------------------------------------------------------------------------------
  class NeedKey extends Error {}
  async function call(path, opts = {}) {
    const headers = Object.assign({}, opts.headers || {});
    if (state.key) headers["Authorization"] = "Bearer " + state.key;
    const resp = await fetch(path, Object.assign({}, opts, { headers, cache: "no-store" }));
    if (resp.status === 401) throw new NeedKey(await errorText(resp));
    return resp;
  }
  async function errorText(resp) {
    try { const body = await resp.json(); return (body.error && body.error.message) || JSON.stringify(body); }
    catch (e) { return resp.status + " " + resp.statusText; }
  }
  async function json(path, opts) {
    const resp = await call(path, opts);
    if (!resp.ok) throw new Error(await errorText(resp));
    return resp.json();
  }
  function say(text, error) {
    const div = document.createElement("div");
    div.className = "msg" + (error ? " error" : "");
    div.textContent = text;
    $("messages").prepend(div);
    while ($("messages").children.length > 4) $("messages").lastChild.remove();
  }
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
    return e;
  }
  const fmt = (v, d = 1) => (v === null || v === undefined) ? "–" : Number(v).toFixed(d).replace(/\.0+$/, "");
  const ago = (s) => s === null || s === undefined ? "–" : s < 120 ? fmt(s, 0) + " s" : s < 7200 ?
    fmt(s / 60, 0) + " min" : fmt(s / 3600, 1) + " h";

  // ---- key --------------------------------------------------------------------------------------
  function askKey(why) {
    stop();
    $("main").hidden = true;
    $("keybox").hidden = false;
    $("conn").textContent = "API key needed";
    $("conn").className = "pill bad";
    if (why) $("key-why").textContent = "This server requires an API key (" + why + "). Enter one to open the " +
      "console; it is kept in this tab only (session storage) and sent as a header with each call.";
    $("key").focus();
  }
  $("keyform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.key = $("key").value.trim();
    $("key").value = "";
    sessionStorage.setItem(KEY_STORE, state.key);
    start();
  });
  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORE); state.key = ""; askKey("");
  });

  // ---- confirmation -----------------------------------------------------------------------------
  function confirmAction(text) {
    return new Promise((resolve) => {
      const dlg = $("confirm");
      $("confirm-text").textContent = text;
      dlg.returnValue = "";
      dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), { once: true });
      dlg.showModal();
    });
  }
  async function act(text, path, opts, done) {
    const ok = await confirmAction(text);
    if (document.activeElement) document.activeElement.blur();
    if (!ok) return;
    try {
      const resp = await call(path, opts);
      if (!resp.ok) { say(text.replace(/\?$/, "") + ": " + await errorText(resp), true); return; }
      say(done);
      refresh();
    } catch (e) { if (e instanceof NeedKey) askKey(e.message); else say(String(e), true); }
  }

  // ---- overview ---------------------------------------------------------------------------------
  function copyState(r) {
    if (r.state === "failed" || (r.state === "starting" && r.restarts > 0)) return "restarting";
    return r.state;
  }
  function hostFacts(o) {
    const h = o.host;
    if (o.backend === "ray") {  // a Ray cluster: logical CPUs and Ray's memory resource, nothing pinned
      return [["backend", "Ray Serve" + (o.status ? " (" + o.status + ")" : "")],
        ["nodes", (h.nodes || []).map((n) => n.ip + " (" + fmt(n.cpus, 2) + " CPUs)").join(", ")],
        ["cluster CPUs", h.cpus], ["router CPUs", fmt(h.router_num_cpus, 2) + " reserved"],
        ["Ray memory", fmt(h.memory_mb, 0) + " MB (" + fmt(h.memory_available_mb, 0) + " unreserved)"]];
    }
    return [["host CPUs", h.cpus], ["copies' CPUs", (h.copy_cpus || []).join(",")],
      ["router CPUs", (h.router_cpus || []).length ? h.router_cpus.join(",") : "shared"],
      ["host memory", fmt(h.memory_mb, 0) + " MB (" + fmt(h.memory_available_mb, 0) + " available)"]];
  }
  function renderFacts(o) {
    const h = o.host, facts = [["uptime", ago(o.uptime_s)], ["version", o.version], ...hostFacts(o)];
    if (h.memory_reservable_mb !== undefined) {
      facts.push(["reserved", fmt(h.cpus_reserved, 2) + " CPUs, " + h.memory_reserved_mb + " of " +
        h.memory_reservable_mb + " MB"], ["free", fmt(h.cpus_free, 2) + " CPUs, " + h.memory_free_mb + " MB"]);
    }
    if (o.on_demand) {  // models loaded when first asked for, unloaded when idle or to make room
      const d = o.on_demand;
      facts.push(["on demand", "at most " + (d.max_loaded ?? "any number of") + " loaded, memory budget " +
        (d.memory_budget_mb != null ? d.memory_budget_mb + " MB" : "the host's") +
        (d.models_dir ? ", models from " + d.models_dir : "")]);
    }
    facts.push(["auth", o.auth ? "API keys on" : "off"], ["admin", o.admin.allowed ? "allowed here" : o.admin.why_not]);
    const shown = facts.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v)));
    if (o.unknown && o.unknown.length) {  // what this backend cannot tell
      shown.push(el("div", { class: "unknown" }, el("dt", {}, "not known here"),
        el("dd", {}, el("ul", {}, ...o.unknown.map((u) => el("li", {}, u))))));
    }
    $("facts").replaceChildren(...shown);
  }
  function copyRow(r) {
    const shown = copyState(r);
    const mem = fmt(r.rss_mb, 0) + " / " + (r.memory_mb ?? "–") + " / " + (r.max_memory_mb ?? "–") +
      (r.memory_limit ? " (" + r.memory_limit + ")" : "");
    const cpus = (r.cpus || []).join(",") + (r.cpu_share < 1 ? " (" + r.cpu_share + ")" : "");
    return el("tr", { "data-copy": r.copy, "data-state": shown },
      el("td", { title: r.node_id || "" }, r.copy + (r.node_ip ? " on " + r.node_ip : "")),  // Ray: its node
      el("td", { class: "state state-" + shown, title: r.last_reason || "" }, shown),
      el("td", {}, r.pid ?? "–"), el("td", {}, cpus), el("td", {}, r.threads ?? "–"), el("td", {}, mem),
      el("td", {}, r.outstanding ?? "–"), el("td", {}, r.served ?? "–"), el("td", {}, r.restarts ?? "–"),
      el("td", {}, r.last_reason || ""), el("td", {}, ago(r.ready_for_s)));
  }
  function componentBlock(c, o) {
    const a = c.autoscaling;
    const policy = a ? "autoscaling " + a.min_copies + "–" + a.max_copies + " copies, target " +
      a.target_concurrent_per_copy + " concurrent per copy" : "no autoscaling";
    const head = el("div", { class: "comp-head" }, el("h3", {}, c.name), el("span", { class: "muted" }, c.model),
      ...(c.modalities ? [el("span", { class: "modalities" }, "takes " + c.modalities.join(", "))] : []),
      el("span", {}, c.ready + " ready of " + c.copies + " copies"),
      el("span", { class: "muted" }, (c.num_cpus ?? "–") + " CPU, " + (c.memory_mb ?? "–") + " MB per copy"),
      el("span", { class: "muted" }, policy), el("span", {}, "in flight " + c.in_flight + ", waiting " + c.waiting));
    const table = el("table", {}, el("thead", {}, el("tr", {}, ...["copy", "state", "pid", "CPUs", "threads",
      "memory MB (RSS / reserved / max)", "load", "served", "restarts", "last reason", "up"].map((t) => el("th", {}, t)))),
      el("tbody", {}, ...c.replicas.map(copyRow)));
    if (c.message) head.append(el("span", { class: "muted", title: c.status || "" }, c.message));
    const block = el("div", { class: "comp", "data-component": c.name }, head, table);
    if (c.stopped && c.stopped.length) {  // copies Ray stopped lately (it replaces a failed copy)
      block.append(el("p", { class: "muted stopped" }, "stopped lately: " + c.stopped.map((r) =>
        r.copy + " (pid " + (r.pid ?? "–") + ")").join(", ")));
    }
    if (c.on_demand) block.append(onDemandLine(c.on_demand));
    if (c.variants) block.append(variantsLine(c.variants));
    if (c.variant_of) head.append(el("span", { class: "muted" }, "a variant of " + c.variant_of));
    if (c.capture !== undefined) block.append(captureLine(c.capture));
    if (c.adapters && c.adapters.length) {  // LoRA adapters its copies load; adapter components by name
      block.append(el("p", { class: "adapters muted" }, "LoRA adapters: " + c.adapters.map((a) => a.name +
        " (" + (a.inference_component ? "adapter component, " : "") + "scale " + a.scale + ")").join(", ")));
    }
    if (c.decisions && c.decisions.length) {
      block.append(el("ul", { class: "decisions" }, ...c.decisions.slice(-5).reverse().map((d) =>
        el("li", {}, new Date(d.at * 1000).toLocaleTimeString() + ": " + d.copies + " → " + d.desired +
          " copies (" + d.reason + ")"))));
    }
    if (o.kind === "endpoint" && o.admin.allowed) block.append(componentActions(c, o));
    return block;
  }
  const counts = (m) => Object.entries(m || {}).map(([k, n]) => k + " " + n).join(", ") || "none";
  function onDemandLine(d) {
    const keep = d.request_keep_alive ?? d.keep_alive;
    const idle = d.state === "loaded" ? ", idle " + ago(d.idle_s) + (d.pinned ? "" : keep < 0 ?
      " (never unloaded)" : " (keep-alive " + fmt(keep, 0) + " s)") : "";
    return el("p", { class: "on-demand", "data-state": d.state }, "on demand: ",
      el("strong", {}, d.state + (d.pinned ? ", pinned" : "")), idle + "; loads " + d.loads +
      (d.last_load_s != null ? " (last " + fmt(d.last_load_s, 1) + " s)" : "") + "; unloads " + counts(d.unloads) +
      "; evictions " + counts(d.evictions) + (d.last_refusal ? "; last refusal: " + d.last_refusal : ""));
  }
  function variantsLine(vs) {  // production variants with their weights; shadows with what they did
    const pct = (x) => x == null ? "–" : fmt(100 * x, 1) + "%";
    const shown = vs.map((v) => {
      const s = v.shadow;
      if (!s) return v.name + ": weight " + v.weight + " (" + pct(v.share) + "), " + v.routed + " requests";
      return v.name + ": shadow " + s.percent + "%, " + s.answered + " answered, " + s.dropped + " dropped, agreement " +
        pct(s.agreement) + " of " + s.compared + ", mean " + (s.mean_latency_s == null ? "–" : fmt(s.mean_latency_s, 3) + " s");
    });
    return el("p", { class: "variants" }, "variants: " + shown.join("; "));
  }
  function captureLine(k) {  // data capture: where, how much of what, lines written and dropped
    if (!k) return el("p", { class: "capture muted", "data-capture": "off" }, "data capture: off");
    return el("p", { class: "capture", "data-capture": "on", "data-written": k.lines_written },
      "data capture: ", el("strong", {}, "on"), ", " + k.percent + "% of requests (" + k.modes.join(", ") +
      ") to " + k.location + "; " + k.lines_written + " lines written, " + k.lines_dropped + " dropped" +
      (k.lines_dropped ? " (" + counts(k.dropped_by_reason) + ")" : ""));
  }
  function componentActions(c, o) {
    const row = el("div", { class: "actions" });
    if (!c.variants) {  // a component with variants has no copies: its variants have (and scale) them
      const input = el("input", { type: "number", min: o.admin.scale_to_zero ? 0 : 1, value: c.copies,
        class: "scale-input", "data-component": c.name });
      const scale = el("button", { type: "button", class: "scale-btn", "data-component": c.name }, "Scale…");
      scale.addEventListener("click", () => {
        const n = parseInt(input.value, 10);
        act("Scale " + c.name + " from " + c.copies + " to " + n + " copies?", "/admin/scale",
          { method: "POST", headers: { "Content-Type": "application/json" },
            body: JSON.stringify({ component: c.name, copies: n, wait: false }) }, "scaling " + c.name + " to " + n);
      });
      row.append(el("label", {}, "copies ", input), scale);
    }
    if (o.admin.add_remove && !c.variant_of) {  // a variant goes with its component
      const remove = el("button", { type: "button", class: "danger remove-btn" }, "Remove…");
      remove.addEventListener("click", () => act("Remove " + c.name + "? Its copies drain and stop.",
        "/admin/components/" + encodeURIComponent(c.name), { method: "DELETE" }, "removed " + c.name));
      row.append(remove);
    }
    return row;
  }
  function renderOverview(o) {
    state.overview = o;
    $("kind").textContent = o.kind === "endpoint" ? "endpoint" : "server";
    $("name").textContent = o.name;
    $("version").textContent = o.version;
    $("auth").textContent = o.auth ? "API keys on" : "no API keys";
    $("forget-key").hidden = !state.key;
    renderFacts(o);
    // keep what the user is typing: the list is rebuilt only while none of its inputs has focus
    const focused = document.activeElement;
    if (!($("comp-list").contains(focused) && focused.tagName === "INPUT")) {
      $("comp-list").replaceChildren(...o.components.map((c) => componentBlock(c, o)));
    }
    const admin = o.kind === "endpoint" && o.admin.allowed;
    $("add-box").hidden = !(admin && o.admin.add_remove);
    if (admin && o.admin.down && !$("endpoint-actions").childElementCount) {
      const down = el("button", { type: "button", class: "danger", id: "down-btn" }, "Drain and stop endpoint…");
      down.addEventListener("click", () => act("Drain and stop endpoint " + o.name + "? Requests in flight " +
        "finish, every copy stops, the endpoint exits.", "/admin/down", { method: "POST" }, "endpoint stopping"));
      $("endpoint-actions").append(down);
    }
    const sel = $("pg-component"), names = o.components.filter((c) => !c.variant_of).map((c) => c.name);
    if ([...sel.options].map((x) => x.value).join() !== names.join()) {
      const keep = sel.value;
      sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
      if (names.includes(keep)) sel.value = keep;
    }
  }
  $("add-btn").addEventListener("click", () => {
    const text = $("add-yaml").value;
    act("Add the components of this YAML to the endpoint?", "/admin/components",
      { method: "POST", headers: { "Content-Type": "application/yaml" }, body: text }, "components added");
  });

  // ---- charts -----------------------------------------------------------------------------------
  // [series name, label]; count series (statistic Sum) are drawn per second
  const CHARTS = [
    ["invocations", "Invocations per second", [["Invocations", ""]]],
    ["ttft", "Time to first token (ms)", [["TimeToFirstTokenP50", "p50"], ["TimeToFirstTokenP99", "p99"]]],
    ["itl", "Inter-token latency (ms)", [["InterTokenLatencyP50", "p50"], ["InterTokenLatencyP99", "p99"]]],
    ["tokens", "Output tokens per second", [["OutputTokensPerSecond", ""]]],
    ["load", "Requests running / waiting", [["RequestsRunning", "running"], ["RequestsWaiting", "waiting"]]],
    ["errors", "Errors and refusals per second", [["Invocation4XXErrors", "4XX"], ["Invocation5XXErrors", "5XX"],
      ["NoCapacityInvocationFailures", "no capacity"]]],
    ["latency", "ModelLatency / OverheadLatency (ms)", [["ModelLatency", "model"], ["OverheadLatency", "overhead"]]],
    ["percopy", "Per copy", [["ConcurrentRequestsPerCopy", "concurrent"], ["InvocationsPerCopy", "invocations/s"]]],
    ["cpu", "CPUUtilizationNormalized (%)", [["CPUUtilizationNormalized", ""]]],
    ["mem", "MemoryUtilizationNormalized (%)", [["MemoryUtilizationNormalized", ""]]],
  ];
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];
  function mergeSeries(body) {
    for (const [name, comp] of Object.entries(body.components)) {
      const d = state.data[name] || (state.data[name] = { t: [], period: [], series: {} });
      comp.t.forEach((t, i) => {
        d.t.push(t); d.period.push(comp.period_s[i]);
        for (const [m, values] of Object.entries(comp.series)) (d.series[m] || (d.series[m] = [])).push(values[i]);
        state.lastT = Math.max(state.lastT, t);
      });
    }
    state.now = body.now;
    const oldest = body.now - state.retention;
    for (const d of Object.values(state.data)) {
      let cut = 0;
      while (cut < d.t.length && d.t[cut] <= oldest) cut++;
      if (cut) { d.t.splice(0, cut); d.period.splice(0, cut); for (const v of Object.values(d.series)) v.splice(0, cut); }
    }
  }
  function chartData(metrics) {
    const comps = Object.keys(state.data).sort();
    const xs = [...new Set(comps.flatMap((c) => state.data[c].t))].sort((a, b) => a - b);
    const cols = [xs];
    for (const c of comps) {
      const d = state.data[c], at = new Map(d.t.map((t, i) => [t, i]));
      for (const [m] of metrics) {
        const perSecond = state.stats[m] === "Sum";
        cols.push(xs.map((t) => {
          const i = at.get(t); if (i === undefined) return null;
          const v = (d.series[m] || [])[i];
          return v === null || v === undefined ? null : perSecond ? v / d.period[i] : v;
        }));
      }
    }
    return { comps, cols };
  }
  function drawCharts() {
    const comps = Object.keys(state.data).sort().join("|");
    if (comps !== state.chartComps) {
      for (const ch of Object.values(state.charts)) ch.plot.destroy();
      state.charts = {};
      $("charts").replaceChildren();
      state.chartComps = comps;
    }
    for (const [id, title, metrics] of CHARTS) {
      const { comps: names, cols } = chartData(metrics);
      let ch = state.charts[id];
      if (!ch) {
        const box = el("div", { class: "chart", id: "chart-" + id, "data-points": "0" }, el("h3", {}, title));
        $("charts").append(box);
        const width = chartWidth(box);
        const series = [{}];
        names.forEach((c, ci) => metrics.forEach(([m, label], mi) => series.push({
          label: c + (label ? " " + label : ""), stroke: COLORS[ci % COLORS.length], width: 1.5,
          dash: mi ? [4, 3] : undefined, spanGaps: false, value: (u, v) => fmt(v, 2) })));
        const plot = new uPlot({ width, height: 180, series, legend: { live: true },
          // the retention window ending now: uPlot's own range around one point spans years
          scales: { x: { time: true, range: () => [state.now - state.retention, state.now] } },
          // the span the axis shows, for the tests
          hooks: { setScale: [(u, key) => key === "x" && box.setAttribute("data-x-span", String(u.scales.x.max - u.scales.x.min))] },
          axes: [{}, { size: 50 }] }, cols, box);
        ch = state.charts[id] = { plot, box };
      } else {
        ch.plot.setData(cols);
      }
      const last = cols.slice(1).map((col) => col[col.length - 1]).filter((v) => v !== null && v !== undefined);
      ch.box.setAttribute("data-points", String(cols[0].length));
      ch.box.setAttribute("data-last", last.length ? String(Math.max(...last)) : "");
    }
  }

  // a chart fills its grid cell, and follows it when the window is resized
  const chartWidth = (box) => Math.max(280, box.clientWidth - 4);
  window.addEventListener("resize", () => {
    for (const ch of Object.values(state.charts)) ch.plot.setSize({ width: chartWidth(ch.box), height: 180 });
  });

  // ---- polling ----------------------------------------------------------------------------------
  async function refresh() {
    try {
      const [o, s] = await Promise.all([json("/console/api/overview"),
        json("/console/api/series" + (isFinite(state.lastT) ? "?since=" + state.lastT : ""))]);
      state.period = o.console.period_s; state.retention = o.console.retention_s;
      for (const m of o.console.metrics) { state.units[m.name] = m.unit; state.stats[m.name] = m.stat; }
      $("keybox").hidden = true; $("main").hidden = false;
      $("conn").textContent = "live"; $("conn").className = "pill ok";
      $("period").textContent = "(a point every " + fmt(state.period, 2) + " s, kept in the server)";
      renderOverview(o);
      mergeSeries(s);
      drawCharts();
      if (o.console.reports && $("reports").hidden) { $("reports").hidden = false; loadReports(); }
      loadBatches();
      return true;
    } catch (e) {
      if (e instanceof NeedKey) { askKey(e.message); return false; }
      $("conn").textContent = "unreachable: " + e.message; $("conn").className = "pill bad";
      return true;
    }
  }
  function stop() { if (state.timer) clearTimeout(state.timer); state.timer = null; }
  async function loop() {
    const go = await refresh();
    if (go) state.timer = setTimeout(loop, state.period * 1000);
  }
  function start() { stop(); state.data = {}; state.lastT = -Infinity; loop(); }

  // ---- playground -------------------------------------------------------------------------------
  let running = null;
  $("pg-stop").addEventListener("click", () => running && running.abort());
  $("pg-send").addEventListener("click", async () => {
    const comp = $("pg-component").value, chat = $("pg-api").value === "chat";
    const prompt = $("pg-prompt").value, max = parseInt($("pg-max").value, 10), temp = parseFloat($("pg-temp").value);
    const body = { model: comp, max_tokens: max, temperature: temp, stream: true, stream_options: { include_usage: true } };
    if (chat) body.messages = [{ role: "user", content: prompt }]; else body.prompt = prompt;
    const out = $("pg-output"), timings = $("pg-timings");
    out.textContent = ""; timings.textContent = "sending…"; out.setAttribute("data-done", "false");
    running = new AbortController();
    $("pg-send").disabled = true; $("pg-stop").disabled = false;
    const t0 = performance.now();
    let first = null, chunks = 0, usage = null, copy = "";
    try {
      const resp = await call(chat ? "/v1/chat/completions" : "/v1/completions", { method: "POST",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal: running.signal });
      if (!resp.ok) throw new Error(await errorText(resp));
      copy = resp.headers.get("x-llmhost-copy") || "";
      const reader = resp.body.getReader(), dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const event = buf.slice(0, cut); buf = buf.slice(cut + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
            const msg = JSON.parse(line.slice(6));
            if (msg.error) throw new Error(msg.error.message || JSON.stringify(msg.error));
            if (msg.usage) usage = msg.usage;
            const ch = msg.choices && msg.choices[0];
            const text = ch ? (chat ? (ch.delta && ch.delta.content) : ch.text) : "";
            if (text) { if (first === null) first = performance.now(); chunks++; out.textContent += text; }
          }
        }
        const el_ms = performance.now() - t0;
        timings.textContent = "streaming… " + chunks + " chunks, " + fmt(el_ms, 0) + " ms";
      }
      const total = performance.now() - t0, n = usage ? usage.completion_tokens : chunks;
      const ttft = first === null ? null : first - t0;
      const rate = first !== null && n > 1 ? (n - 1) / ((total - ttft) / 1000) : null;
      timings.textContent = "time to first token " + fmt(ttft, 0) + " ms · " + n + " tokens in " + fmt(total, 0) +
        " ms · " + fmt(rate, 1) + " tokens/s after the first" + (usage ? " · prompt " + usage.prompt_tokens +
        " tokens" : "") + (copy ? " · copy " + copy : "");
      timings.setAttribute("data-tokens", String(n));
      out.setAttribute("data-done", "true");
    } catch (e) {
      if (e instanceof NeedKey) askKey(e.message);
      else timings.textContent = (e.name === "AbortError" ? "stopped" : "failed: " + e.message);
    } finally {
      running = null; $("pg-send").disabled = false; $("pg-stop").disabled = true;
    }
  });

  // ---- batches (OpenAI's Batches API of this server or endpoint) --------------------------------
  async function loadBatches() {
    let body;
    try { body = await json("/v1/batches?limit=20"); }
    catch (e) { return; }  // a server whose jobs folder another process holds: no section
    $("batches").hidden = body.data.length === 0;
    $("batch-rows").replaceChildren(...body.data.map((b) => {
      const c = b.request_counts || { total: 0, completed: 0, failed: 0 };
      const done = c.completed + c.failed;
      const bar = el("progress", { max: Math.max(c.total, 1), value: done });
      const counts = done + " / " + c.total + (c.failed ? " (" + c.failed + " refused)" : "");
      return el("tr", { "data-batch": b.id }, el("td", {}, b.id), el("td", {}, b.endpoint),
        el("td", { class: "batch-status" }, b.status), el("td", {}, bar, " ", counts),
        el("td", {}, new Date(b.created_at * 1000).toLocaleString()));
    }));
  }

  // ---- reports ----------------------------------------------------------------------------------
  async function loadReports() {
    try {
      const body = await json("/console/api/reports");
      $("reports-dir").textContent = body.dir + ": " + body.reports.length + " result folder(s)";
      $("report-list").replaceChildren(...body.reports.map((r) => {
        const li = el("li", {}, el("strong", {}, r.name), " (" + r.kind + ", " +
          new Date(r.modified * 1000).toLocaleString() + ") ");
        for (const f of r.files) {
          const b = el("button", { type: "button", class: "report-file", "data-path": f }, f.split("/").pop());
          b.addEventListener("click", () => openReport(f));
          li.append(b, " ");
        }
        return li;
      }));
    } catch (e) { say("reports: " + e.message, true); }
  }
  async function openReport(path) {
    try {
      if (path.endsWith(".html")) {
        // a one-time ticket: the frame cannot send the key, and the key never goes in a URL
        const t = await json("/console/api/reports/open", { method: "POST",
          headers: { "Content-Type": "application/json" }, body: JSON.stringify({ path }) });
        $("report-text").hidden = true; $("report-frame").hidden = false; $("report-frame").src = t.url;
      } else {
        const resp = await call("/console/api/reports/" + path.split("/").map(encodeURIComponent).join("/"));
        if (!resp.ok) throw new Error(await errorText(resp));
        $("report-frame").hidden = true; $("report-text").hidden = false;
        $("report-text").textContent = await resp.text();
      }
    } catch (e) { if (e instanceof NeedKey) askKey(e.message); else say("report: " + e.message, true); }
  }

  // a server with keys and none given yet: ask first rather than be refused (each 401 is a browser error)
  if (document.body.dataset.keyRequired === "1" && !state.key) askKey("none given yet"); else start();
})();
