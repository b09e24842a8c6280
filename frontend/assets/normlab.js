/* normlab dashboard: ONE EventSource per tab (the multiplexed /api/events stream) and the clientside
 * callbacks that feed it into the figures. Training points are queued as they arrive and appended to
 * the curves on the next animation frame, at most every 100 ms (so the graphs redraw at most ~10 times
 * a second however fast the runs report), here in the page: no Dash callback runs per append. The
 * slower dcc.Interval (frontend/app.py TICK) hands statuses, probe snapshots and log lines to Dash.
 * The cursor (last seq per run) is kept here: a reconnect resumes exactly after it (no gap, no repeat).
 */
(function () {
  "use strict";
  var KINDS = ["scalars", "hidden", "fisher", "status", "log", "message", "intervention"];
  var TERMINAL = {};  // statuses that end a run: from the watch store (frontend/status.py), not typed here
  var MAX_QUEUE = 100000;

  var S = window.normlabStream = {
    es: null, runs: [], cursor: {}, scalars: [], probes: {}, probeVersion: 0, probeSent: 0,
    probeSentAt: 0, status: {}, statusVersion: 0, statusSent: 0, maps: {}, reopenTimer: null,
    lines: {}, lineVersion: 0, lineSent: 0, lineSentAt: 0,
    received: 0, opened: 0, appended: 0, extends: 0, apiBase: "", map: null, drainAt: 0, drainTimer: null
  };

  function cursorString(runs) {
    return runs.map(function (r) { return r + ":" + (S.cursor[r] || 0); }).join(",");
  }
  function liveRuns() { return S.runs.filter(function (r) { return !TERMINAL[S.status[r]]; }); }

  function close() {
    if (S.reopenTimer) { clearTimeout(S.reopenTimer); S.reopenTimer = null; }
    if (S.es) { S.es.close(); S.es = null; }
  }

  function onEvent(e) {
    var ev;
    try { ev = JSON.parse(e.data); } catch (err) { return; }
    var rid = ev.run_id;
    if (!rid || !(rid in S.cursor)) { return; }
    if (ev.seq <= S.cursor[rid]) { return; }  // already seen (overlapping replay)
    S.cursor[rid] = ev.seq;
    S.received += 1;
    if (ev.kind === "scalars") {
      if (S.scalars.length < MAX_QUEUE) { S.scalars.push(ev); }
      scheduleDrain();
      if (ev.payload && ev.payload.val_loss !== null && ev.payload.val_loss !== undefined) {
        keepLine(rid, {step: ev.step, seq: ev.seq, kind: "eval", payload: ev.payload});
      }
    } else if (ev.kind === "hidden" || ev.kind === "fisher") {
      var p = S.probes[rid] || (S.probes[rid] = {hidden: [], fisher: []});
      p[ev.kind].push({step: ev.step, kind: ev.kind, payload: ev.payload});
      S.probeVersion += 1;
    } else if (ev.kind === "log") {
      keepLog(rid, ev);
      keepLine(rid, {step: ev.step, seq: ev.seq, kind: "log", payload: ev.payload});
    } else if (ev.kind === "intervention" && window.normlabFork) {
      window.normlabFork.intervention(ev);  // a marker on the curves (assets/fork.js)
    } else if (ev.kind === "status" && ev.payload) {
      keepLine(rid, {step: ev.step, seq: ev.seq, kind: "status", payload: ev.payload});
      S.status[rid] = ev.payload.status;
      S.statusVersion += 1;
      if (TERMINAL[ev.payload.status]) { S.probeVersion += 1; }  // panels then say "none recorded"
      if (liveRuns().length === 0) { close(); noteEnded(0); }  // every run ended: no reconnect loop
    }
  }

  /* A run's log lines (the Run page's log panel and its Fisher warning), kept beside its probe snapshots. */
  function keepLog(rid, ev) {
    var p = S.probes[rid] || (S.probes[rid] = {hidden: [], fisher: []});
    (p.log || (p.log = [])).push({step: ev.step, seq: ev.seq, kind: "log", payload: ev.payload});
    S.probeVersion += 1;
  }

  /* The Run page's log panel: the run's log lines, its status changes and its evaluations as they come. */
  function keepLine(rid, line) {
    (S.lines[rid] || (S.lines[rid] = [])).push(line);
    S.lineVersion += 1;
  }

  function open() {
    close();
    var live = liveRuns();
    if (!live.length) { return; }
    var url = S.apiBase + "/api/events?runs=" + encodeURIComponent(live.join(",")) +
      "&after=" + encodeURIComponent(cursorString(live));
    var token = null;  // the token box's dcc.Store (localStorage): EventSource cannot send headers
    try { token = JSON.parse(window.localStorage.getItem("auth-token") || "null"); } catch (err) { token = null; }
    if (token) { url += "&token=" + encodeURIComponent(token); }
    var es = new EventSource(url);
    KINDS.forEach(function (k) { es.addEventListener(k, onEvent); });
    es.onerror = function () {
      // The browser retries by itself (with Last-Event-ID) while CONNECTING; once CLOSED (an HTTP
      // error, a restarted server) we reopen from our own cursor.
      if (es.readyState === 2 && S.es === es && liveRuns().length) {
        S.reopenTimer = setTimeout(open, 1000);
      }
    };
    S.es = es;
    S.opened += 1;
  }

  S.reconnect = open;  // drop the connection and resume from the cursor (used by tests and on errors)

  /* Follow these runs from these cursors (replaces whatever the tab followed before). */
  S.watch = function (watch) {
    var cursor = (watch && watch.cursor) || {};
    S.apiBase = (watch && watch.api_base) || "";
    ((watch && watch.terminal) || []).forEach(function (s) { TERMINAL[s] = 1; });
    S.runs = Object.keys(cursor);
    S.cursor = {}; S.status = {}; S.scalars = []; S.probes = {}; S.lines = {};
    S.runs.forEach(function (r) { S.cursor[r] = cursor[r] || 0; });
    S.probeVersion = 0; S.probeSent = 0; S.statusVersion = 0; S.statusSent = 0;
    S.lineVersion = 0; S.lineSent = 0; S.lineReader = false;
    open();
  };

  function ns() { return window.dash_clientside.no_update; }

  /* Adaptive throttle: at most one redraw in flight, and the main thread spends at most about half
   * its time redrawing (a slow redraw spaces the next one out; the points just batch up). */
  S.adaptive = true; S.pendingSince = 0; S.lastRedrawMs = 0; S.lastDone = 0;
  function hookGraph() {
    var gd = document.querySelector("#nl-curves .js-plotly-plot");
    if (gd && !gd.__normlabHooked && gd.on) {
      gd.__normlabHooked = true;
      gd.on("plotly_afterplot", function () {
        if (S.pendingSince) {
          S.lastDone = performance.now();
          S.lastRedrawMs = S.lastDone - S.pendingSince;
          S.pendingSince = 0;
        }
      });
    }
  }
  function redrawBudgetLeft() {
    if (!S.adaptive) { return true; }
    var now = performance.now();
    if (S.pendingSince && now - S.pendingSince < 2000) { return false; }  // the last one is still drawing
    return now - S.lastDone >= S.lastRedrawMs;
  }

  /* The first live points replace the figure's "Waiting for the first training points…" note. */
  function dropWaitingNote() {
    var gd = document.querySelector("#nl-curves .js-plotly-plot");
    var notes = gd && gd.layout && gd.layout.annotations;
    if (!notes || !window.Plotly) { return; }
    var kept = notes.filter(function (a) { return a.name !== "waiting"; });
    if (kept.length !== notes.length) { window.Plotly.relayout(gd, {annotations: kept}); }
  }

  /* Smoothing, continued from the server's history (frontend/smoothing.py `ema`, the same definition):
   * TensorBoard's debiased EMA; the entry carries the accumulator and the count of values so far. */
  function emaStep(en, s, v) {
    if (!(s > 0) || !isFinite(v)) { return v; }
    en.acc = en.acc * s + (1 - s) * v; en.n += 1;
    return en.acc / (1 - Math.pow(s, en.n));
  }
  /* Wall time for a hover, as frontend/smoothing.py `format_elapsed` writes it. */
  function formatElapsed(sec) {
    if (sec === null || sec === undefined || !isFinite(sec)) { return "\u2013"; }
    if (sec < 10) { return sec.toFixed(2) + " s"; }
    if (sec < 60) { return sec.toFixed(1) + " s"; }
    var w = Math.round(sec);
    function two(n) { return (n < 10 ? "0" : "") + n; }
    if (w < 3600) { return Math.floor(w / 60) + " min " + two(w % 60) + " s"; }
    return Math.floor(w / 3600) + " h " + two(Math.floor((w % 3600) / 60)) + " min";
  }
  S.emaStep = emaStep; S.formatElapsed = formatElapsed;  // the unit of both, for tests
  /* Every run ended before its first point: the "Waiting…" note says how they ended instead (the
   * server draws the same words when the page is loaded later: frontend/figures.py). Retried for a few
   * seconds in case the figure is still being drawn. */
  function noteEnded(tries) {
    var gd = document.querySelector("#nl-curves .js-plotly-plot");
    var notes = gd && gd.layout && gd.layout.annotations;
    if (!notes || !window.Plotly) {
      if (tries < 25) { setTimeout(function () { noteEnded(tries + 1); }, 200); }
      return;
    }
    if (liveRuns().length || S.scalars.length) { return; }  // queued points replace the note themselves
    var ended = S.runs.map(function (r) { return S.status[r]; });
    var text = ended.every(function (s) { return s === "cancelled"; }) ?
      "Cancelled before the first training points." :
      "Ended (" + ended.filter(function (s, i) { return ended.indexOf(s) === i; }).join(", ") +
      ") before the first training points.";
    var changed = false;
    var kept = notes.map(function (a) {
      if (a.name !== "waiting") { return a; }
      changed = true;
      return Object.assign({}, a, {text: text, name: "ended"});
    });
    if (changed) { window.Plotly.relayout(gd, {annotations: kept}); }
  }

  /* The next append: on the next animation frame, at least 100 ms after the last; while the figure is
   * not drawn yet or the redraw budget is spent, the points wait and the drain is tried again. */
  var DRAIN_MS = 100;
  function scheduleDrain(later) {
    if (S.drainTimer || !S.scalars.length) { return; }
    var wait = Math.max(later || 0, S.drainAt + DRAIN_MS - performance.now());
    S.drainTimer = setTimeout(function () {
      window.requestAnimationFrame(function () {
        S.drainTimer = null;
        S.drainAt = performance.now();
        if (!drainCurves(S.map)) { scheduleDrain(DRAIN_MS); }
      });
    }, Math.max(0, wait));
  }

  /* Append the queued points to the curves graph with Plotly.extendTraces, here and now. Not through
   * dcc.Graph's extendData prop: the Graph keeps a batch queued until its asynchronous redraw resolves,
   * and a batch that arrives before then is queued beside it, so the earlier one is drawn twice.
   * Returns false when points are left waiting (the figure is still being drawn, or no budget). */
  function drainCurves(map) {
    if (!map || !map.runs || !S.scalars.length) { return true; }
    var gd = document.querySelector("#nl-curves .js-plotly-plot");
    // Only onto the figure this map describes: a new figure (other runs, smoothing, x units) may still
    // be plotting; the points wait in the queue until it is drawn.
    var meta = gd && gd.layout && gd.layout.meta;
    if (!gd || !gd.data || !window.Plotly || !meta || meta.normlab_map !== map.id) { return false; }
    hookGraph();
    if (!redrawBudgetLeft()) { return false; }
    var state = S.maps[map.id];
    if (!state) {  // our own copy: the store's data is Dash state and stays untouched
      S.maps = {};
      state = S.maps[map.id] = JSON.parse(JSON.stringify(map));
    }
    var evs = S.scalars; S.scalars = [];
    var xs = {}, ys = {}, cds = {}, order = [];
    var s = state.smooth || 0;
    function push(i, x, y, cd) {
      if (!(i in xs)) { xs[i] = []; ys[i] = []; cds[i] = []; order.push(i); }
      xs[i].push(x); ys[i].push(y); cds[i].push(cd);
    }
    for (var k = 0; k < evs.length; k++) {
      var ev = evs[k], entries = state.runs[ev.run_id];
      if (!entries) { continue; }
      for (var j = 0; j < entries.length; j++) {
        var en = entries[j], v = ev.payload[en.key];
        if (v === null || v === undefined || ev.step <= en.last) { continue; }
        en.last = ev.step;
        var x = state.x === "time" ? ev.payload.elapsed : ev.step;
        var cd = [ev.step, formatElapsed(ev.payload.elapsed), v];  // the hover's [step, wall time, raw]
        if (en.raw !== null && en.raw !== undefined) { push(en.raw, x, v, cd); }
        // each series its own weight (sparse validation curves are drawn raw: frontend/smoothing.py)
        push(en.i, x, emaStep(en, en.smooth === undefined ? s : en.smooth, v), cd);
      }
    }
    if (!order.length) { return true; }
    dropWaitingNote();
    S.appended += order.reduce(function (n, i) { return n + xs[i].length; }, 0);
    S.extends += 1;
    S.pendingSince = performance.now();
    // extendTraces concatenates gd.data at once (the redraw may finish later): no batch is drawn twice
    window.Plotly.extendTraces(gd, {x: order.map(function (i) { return xs[i]; }),
                                    y: order.map(function (i) { return ys[i]; }),
                                    customdata: order.map(function (i) { return cds[i]; })},
                               order, state.max_points || 20000);
    releaseAxes(gd, state, order);
    return true;
  }

  /* An axis drawn over a placeholder range while its panel had no point (frontend/figures.py
   * `waiting_axes`) follows its data from the first point on. */
  function releaseAxes(gd, state, order) {
    var waiting = state.waiting_axes || [];
    if (!waiting.length) { return; }
    var update = {};
    order.forEach(function (i) {
      var t = gd.data[i] || {};
      [["xaxis", t.xaxis || "x"], ["yaxis", t.yaxis || "y"]].forEach(function (pair) {
        var name = pair[0] + pair[1].slice(1);
        if (waiting.indexOf(name) >= 0) { update[name + ".autorange"] = true; }
      });
    });
    var names = Object.keys(update).map(function (k) { return k.split(".")[0]; });
    if (!names.length) { return; }
    state.waiting_axes = waiting.filter(function (a) { return names.indexOf(a) < 0; });
    window.Plotly.relayout(gd, update);
  }

  /* plotly.js: dcc.Graph loads it, on the pages that show a graph, from window._dashPlotlyJSURL (Dash
   * sets that to its full 4.8 MB bundle). Point it at the cartesian partial bundle (1.5 MB; every trace
   * type the pages draw): see assets/vendor/README.md. */
  (function usePartialPlotly() {
    var prefix = "/";
    try {
      prefix = JSON.parse(document.getElementById("_dash-config").textContent).requests_pathname_prefix || "/";
    } catch (err) { prefix = "/"; }
    var url = prefix + "assets/vendor/plotly-cartesian-4.1.1.min.js";
    Object.defineProperty(window, "_dashPlotlyJSURL", {
      configurable: true, get: function () { return url; }, set: function () { /* keep ours */ }
    });
    // The pages that open with a graph name it in their head (a preload: frontend/app.py PRELOAD).
  })();

  // "Download SVG" buttons (the mode bar's camera saves PNG).
  document.addEventListener("click", function (e) {
    var btn = e.target.closest && e.target.closest(".svg-download");
    if (!btn || !window.Plotly) { return; }
    var gd = document.querySelector("#" + btn.getAttribute("data-graph") + " .js-plotly-plot");
    if (gd) { window.Plotly.downloadImage(gd, {format: "svg", filename: "normlab-" + btn.getAttribute("data-graph")}); }
  });

  /* Compare: the URL follows each control change at once (replaceState here, in the browser; the
   * server only redraws the figure), and the comparison is remembered for the nav link and reloads. */
  var LAST_COMPARE = "normlab.compare";  // frontend/ids.py CMP_LAST_KEY
  function compareUrl(runs, smooth, color, x, panels, group) {
    var state = {runs: runs || [], smooth: smooth || 0, color: color, x: x, panels: panels || [],
                 group: group || null};
    var trig = (window.dash_clientside.callback_context || {}).triggered || [];
    var byUser = trig.length > 0 && trig[0].prop_id !== ".";
    // On load, an empty Compare leaves the URL and the remembered comparison alone: it is about to
    // open that comparison (compareRestore), and a late write would overwrite it.
    if (!state.runs.length && !byUser) { return ns(); }
    var q = window.dash_clientside.normlab.urlState(state);
    try {
      window.localStorage.setItem(LAST_COMPARE, q.replace(/(^|&)present=[^&]*/, ""));
    } catch (err) { /* storage off (private mode): nothing to remember */ }
    return state;
  }
  function compareRestore(ask) {
    var q = null;
    try { q = window.localStorage.getItem(LAST_COMPARE); } catch (err) { q = null; }
    if (!ask || !q || !/(^|&)runs=[^&]/.test(q)) { return ns(); }
    return "/compare?" + q;
  }

  /* Probe snapshots are few: hand them to the server (which draws the heatmaps) at most 1/s, and not
   * while the last ones are still being drawn: Dash drops a callback's answer when newer inputs were
   * sent meanwhile, so on a busy server (a long run: hundreds of snapshots) sending every second would
   * leave the panels saying "Loading…" for ever. Drawn = the hidden-state graph redrew after the send;
   * a send older than 20 s counts as lost. */
  function probesFor(n, runId) {
    var now = Date.now();
    var gd = document.querySelector("#run-hidden .js-plotly-plot");
    if (gd && !gd.__normlabProbeHook && gd.on) {
      gd.__normlabProbeHook = true;
      gd.on("plotly_afterplot", function () { S.probeDrawnAt = Date.now(); });
    }
    var drawing = gd && S.probeSentAt > (S.probeDrawnAt || 0) && now - S.probeSentAt < 20000;
    if (!runId || S.probeVersion === S.probeSent || now - S.probeSentAt < 1000 || drawing) { return ns(); }
    S.probeSent = S.probeVersion; S.probeSentAt = now;
    var p = S.probes[runId] || {hidden: [], fisher: []};
    return {hidden: p.hidden, fisher: p.fisher, log: p.log || [], ended: !!TERMINAL[S.status[runId]]};
  }
  /* The log panel's lines, to the server (which lists them) at most once a second. */
  function linesFor(runId) {
    S.lineReader = true;
    var now = Date.now();
    if (!runId || S.lineVersion === S.lineSent || now - S.lineSentAt < 1000) { return ns(); }
    S.lineSent = S.lineVersion; S.lineSentAt = now;
    return (S.lines[runId] || []).slice();
  }

  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    normlab: {
      // The 100 ms tick runs only while there is something to follow: an idle page costs nothing.
      watch: function (watch) { S.watch(watch); return ["", S.runs.length === 0]; },
      // the curves' trace map (a new figure): points queued meanwhile are appended once it is drawn
      curvesMap: function (map) { S.map = map; scheduleDrain(); return ns(); },
      status: function () {
        var idle = !S.es && !S.reopenTimer && S.scalars.length === 0 && S.probeVersion === S.probeSent &&
          (S.lineVersion === S.lineSent || !S.lineReader);
        var off = idle && S.statusVersion === S.statusSent ? true : ns();
        if (S.statusVersion === S.statusSent) { return [ns(), off]; }
        S.statusSent = S.statusVersion;
        return [Object.assign({}, S.status), ns()];
      },
      probes: probesFor,
      // the Run page: its probe snapshots and its log panel's lines, in one callback per tick
      runFeed: function (n, runId) { return [probesFor(n, runId), linesFor(runId)]; },
      urlState: function (state) {
        if (!state) { return ""; }
        var params = new URLSearchParams(window.location.search);
        var keep = params.get("present");
        var out = new URLSearchParams();
        Object.keys(state).forEach(function (key) {
          var v = state[key];
          if (v === null || v === undefined || v === "" || (Array.isArray(v) && !v.length)) { return; }
          out.set(key, Array.isArray(v) ? v.join(",") : String(v));
        });
        if (keep) { out.set("present", keep); }
        var q = out.toString().replace(/%2C/g, ",");
        // replaceState, not a Dash navigation: the page is not re-rendered, zoom and stream are kept.
        window.history.replaceState(null, "", window.location.pathname + (q ? "?" + q : ""));
        return q;
      },
      copyLink: function (n) {
        if (!n) { return ns(); }
        var href = window.location.href;
        var done = function () { return "Link copied"; };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(href).catch(function () {});
        } else {
          var ta = document.createElement("textarea");
          ta.value = href; document.body.appendChild(ta); ta.select();
          try { document.execCommand("copy"); } catch (err) { /* shown below anyway */ }
          document.body.removeChild(ta);
        }
        window.normlabLastCopied = href;
        setTimeout(function () {
          var el = document.getElementById("nl-copy-done"); if (el) { el.textContent = ""; }
        }, 2500);
        return done();
      },
      compareUrl: compareUrl,
      compareRestore: compareRestore,
      present: function (search) {
        var on = /(^|[?&])present=(1|true|yes|on)(&|$)/.test(search || "");
        document.body.classList.toggle("present", on);
        var btn = document.getElementById("nl-present-toggle");
        if (btn) { btn.textContent = on ? "Exit presentation" : "Present"; }
        return on;
      },
      /* The figures are drawn on the server for the mode (type size, line widths): reload with it. */
      togglePresent: function (n) {
        if (!n) { return ns(); }
        var params = new URLSearchParams(window.location.search);
        var on = /^(1|true|yes|on)$/.test(params.get("present") || "");
        if (on) { params.delete("present"); } else { params.set("present", "1"); }
        var q = params.toString().replace(/%2C/g, ",");
        window.location.assign(window.location.pathname + (q ? "?" + q : ""));
        return ns();
      }
    }
  });
})();
