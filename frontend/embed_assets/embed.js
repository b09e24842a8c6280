/* normlab embed pages (frontend/embed.py): live charts of runs, or a replay of finished runs on one
   clock. Reads its configuration from #nl-embed-config; talks only to the normlab server. The smoothing
   is the dashboard's debiased EMA (client/normlab_client/palette.py `ema`). State for tests: window.normlabEmbed. */
(function () {
  "use strict";
  var C = JSON.parse(document.getElementById("nl-embed-config").textContent);
  var S = window.normlabEmbed = {ready: false, runs: {}, live: {}, shown: {}, t: 0, T: 0,
                                 playing: false, hoverStep: null, error: null};
  var PANELS = {
    loss: {title: "Training loss", field: "train_loss", log: true},
    val: {title: "Validation loss", field: "val_loss"},
    metric: {title: "Validation metric", field: "metric"},
    grad: {title: "Gradient norm", field: "grad_norm", log: true},
    lr: {title: "Learning rate", field: "lr"},
    hidden: {title: "Hidden: summed-input std", probe: "hidden"},
    fisher: {title: "Fisher trace", probe: "fisher"}
  };
  var METRICS = ["accuracy", "bpc", "recall"];
  var DASHES = ["solid", "dash", "dot", "dashdot", "longdash"];
  var dark = C.theme === "dark";
  var fontSize = C.big ? 22 : 12;
  var divs = [];
  var panelKeys = C.panels.filter(function (p) { return C.mode !== "replay" || !PANELS[p].probe; });

  function url(path, params) {
    var q = new URLSearchParams(params || {});
    if (C.token) { q.set("token", C.token); }
    var s = q.toString().replace(/%2C/g, ",").replace(/%3A/g, ":");
    return C.api + path + (s ? "?" + s : "");
  }
  function getJSON(path, params) {
    return fetch(url(path, params)).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) { throw new Error(body.detail || ("HTTP " + r.status)); }
        return body;
      });
    });
  }
  function note(text) { document.getElementById("note").textContent = text; }

  function ema(values, w, st) {
    var acc = st ? st[0] : 0, n = st ? st[1] : 0, out = [];
    for (var i = 0; i < values.length; i++) {
      var v = values[i];
      if (v === null || v === undefined || !isFinite(v)) { out.push(v); continue; }
      acc = acc * w + (1 - w) * v; n += 1;
      var d = 1 - Math.pow(w, n);
      out.push(d > 0 ? acc / d : v);
    }
    return {values: out, state: [acc, n]};
  }
  function mean(xs) {
    var s = 0, n = 0;
    (xs || []).forEach(function (v) { if (typeof v === "number" && isFinite(v)) { s += v; n += 1; } });
    return n ? s / n : null;
  }
  function probeValue(kind, payload) {
    if (kind === "hidden") {
      if (payload.layers) { return mean(payload.layers.map(function (l) { return l.summed_std; })); }
      return mean(payload.summed_std);
    }
    if (kind === "fisher") {
      var t = payload.trace || {}, s = 0, n = 0;
      Object.keys(t).forEach(function (k) { if (typeof t[k] === "number") { s += t[k]; n += 1; } });
      return n ? s : null;
    }
    return null;
  }
  function fieldOf(key, run) { return PANELS[key].field === "metric" ? run.metric : PANELS[key].field; }
  /* Only the dense per-step series is smoothed (frontend/smoothing.py SMOOTHED_PANELS): validation
   * curves are drawn as measured, as on the dashboard. */
  function smoothed(key) { return C.smoothing > 0 && (C.smoothed_panels || ["loss"]).indexOf(key) >= 0; }

  function layout(key) {
    var fg = dark ? "#e8e8e8" : "#222", grid = dark ? "#333" : "#e5e5e5";
    var axis = {gridcolor: grid, zerolinecolor: grid, color: fg, automargin: true};
    return {
      title: {text: PANELS[key].title, font: {size: fontSize + 2, color: fg}, x: 0.02},
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: {size: fontSize, color: fg}, margin: {l: 50, r: 10, t: 30 + fontSize, b: Math.round(fontSize * 4.5)},
      xaxis: Object.assign({}, axis),
      yaxis: Object.assign({type: PANELS[key].log ? "log" : "linear"}, axis),
      showlegend: key === panelKeys[0], legend: {orientation: "h", x: 0, y: -0.08, yanchor: "top"},
      hovermode: "x", shapes: []
    };
  }

  /* Per panel: per run a raw trace (faint when smoothed) and a smoothed one. map[key][run] = indices. */
  var map = {};
  function buildPanels(runs) {
    var box = document.getElementById("panels"), seen = {};
    panelKeys.forEach(function (key) {
      var div = document.createElement("div");
      div.className = "panel"; div.id = "panel-" + key; box.appendChild(div); divs.push(div);
      map[key] = {};
    });
    var traces = {};
    panelKeys.forEach(function (key) { traces[key] = []; });
    runs.forEach(function (run) {
      var norm = run.spec.norm, color = C.colors[norm] || C.colors.other;
      if (dark && norm === "none") { color = "#d0d0d0"; }  // the baseline's black would vanish on dark
      var dash = DASHES[(seen[norm] = (seen[norm] || 0) + 1) - 1 % DASHES.length];
      var name = norm + " · bs " + run.spec.batch_size + " · seed " + run.spec.seed;
      var width = C.big ? 3 : 1.6;
      panelKeys.forEach(function (key) {
        var h = run.history[key] || {x: [], y: [], t: []}, list = traces[key], entry = {};
        entry.raw = list.length;
        list.push({x: h.x.slice(), y: h.y.slice(), mode: "lines", name: name, legendgroup: run.id,
                   showlegend: !smoothed(key), line: {color: color, dash: dash, width: width},
                   opacity: smoothed(key) ? C.raw_opacity : 1, type: "scattergl"});
        if (smoothed(key)) {
          var sm = ema(h.y, C.smoothing);
          entry.smooth = list.length; entry.state = sm.state;
          list.push({x: h.x.slice(), y: sm.values, mode: "lines", name: name, legendgroup: run.id,
                     line: {color: color, dash: dash, width: width + 0.8}, type: "scattergl"});
        }
        map[key][run.id] = entry;
      });
    });
    panelKeys.forEach(function (key, i) {
      Plotly.newPlot(divs[i], traces[key], layout(key), {
        responsive: true, displaylogo: false, displayModeBar: C.controls ? "hover" : false,
        showSendToCloud: false  // never offer to upload a lab's data to Plotly's cloud ("Share chart")
      });
      linkHover(divs[i]);
      // a probe panel of runs that recorded none (probes off) says so instead of drawing bare axes
      var probesOn = runs.some(function (r) { return r.spec.probes && r.spec.probes.enabled; });
      if (PANELS[key].probe && !probesOn) {
        Plotly.relayout(divs[i], {"xaxis.visible": false, "yaxis.visible": false, annotations: [{
          text: "No " + (key === "hidden" ? "hidden-state" : "Fisher") + " data:<br>probes were off for " +
            (runs.length === 1 ? "this run" : "these runs"),  // two short lines: fits a narrow panel
          showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
          font: {size: C.big ? 20 : 13, color: dark ? "#bbb" : "#555"}}]});
      }
    });
  }

  /* Link by step: hovering one chart marks the same step on every chart. */
  function linkHover(div) {
    div.on("plotly_hover", function (ev) {
      if (!ev.points || !ev.points.length) { return; }
      var step = ev.points[0].x;
      S.hoverStep = step;
      var line = {type: "line", xref: "x", yref: "paper", x0: step, x1: step, y0: 0, y1: 1,
                  line: {color: dark ? "#aaa" : "#555", width: 1, dash: "dot"}};
      divs.forEach(function (d) { Plotly.relayout(d, {shapes: [line]}); });
    });
    div.on("plotly_unhover", function () {
      S.hoverStep = null;
      divs.forEach(function (d) { Plotly.relayout(d, {shapes: []}); });
    });
  }

  /* History: the dashboard's downsampled series (min/max buckets keep spikes), as {x, y, t} per panel. */
  function loadRun(id) {
    return Promise.all([getJSON("/api/runs/" + id), getJSON("/api/runs/" + id + "/metrics", {max_points: 2000})])
      .then(function (got) {
        var info = got[0], series = got[1].series, run = {id: id, spec: info.spec, status: info.status,
                                                          last_seq: info.last_seq, history: {}};
        run.metric = METRICS.filter(function (m) {
          return series[m] && series[m].value.some(function (v) { return v !== null; });
        })[0] || "accuracy";
        panelKeys.forEach(function (key) {
          var f = fieldOf(key, run), s = series[f], h = {x: [], y: [], t: []};
          if (s) {
            for (var i = 0; i < s.step.length; i++) {
              if (s.value[i] !== null) { h.x.push(s.step[i]); h.y.push(s.value[i]); h.t.push(s.time[i]); }
            }
          }
          run.history[key] = h;
        });
        S.runs[id] = run;
        return run;
      });
  }

  /* Live: one multiplexed stream for every run of the page, appended at most ~10 times a second. */
  function follow(runs) {
    var probes = panelKeys.some(function (k) { return PANELS[k].probe; });
    var cursor = runs.map(function (r) { return r.id + ":" + (probes ? 0 : r.last_seq); }).join(",");
    var lastStep = {}, queue = [];
    runs.forEach(function (r) {
      lastStep[r.id] = {};
      panelKeys.forEach(function (k) { var x = r.history[k].x; lastStep[r.id][k] = x.length ? x[x.length - 1] : -1; });
      S.live[r.id] = 0;
    });
    var es = new EventSource(url("/api/events", {runs: runs.map(function (r) { return r.id; }).join(","),
                                                   after: cursor}));
    S.stream = es;
    ["scalars", "hidden", "fisher", "status"].forEach(function (kind) {
      es.addEventListener(kind, function (msg) { queue.push(JSON.parse(msg.data)); });
    });
    es.onerror = function () { if (es.readyState === 2) { S.closed = true; } };  // ended (204) or refused
    setInterval(function () {
      if (!queue.length) { return; }
      var batch = queue; queue = [];
      panelKeys.forEach(function (key, i) {
        var xs = [], ys = [], idx = [];
        runs.forEach(function (run) {
          var e = map[key][run.id], px = [], py = [];
          batch.forEach(function (ev) {
            if (ev.run_id !== run.id) { return; }
            var v = null;
            if (PANELS[key].probe) { v = ev.kind === PANELS[key].probe ? probeValue(ev.kind, ev.payload) : null; }
            else if (ev.kind === "scalars") { v = ev.payload[fieldOf(key, run)]; }
            if (v === null || v === undefined || ev.step <= lastStep[run.id][key]) { return; }
            lastStep[run.id][key] = ev.step; px.push(ev.step); py.push(v);
          });
          if (!px.length) { return; }
          if (key === panelKeys[0]) { S.live[run.id] += px.length; }
          xs.push(px); ys.push(py); idx.push(e.raw);
          if (e.smooth !== undefined) {
            var sm = ema(py, C.smoothing, e.state); e.state = sm.state;
            xs.push(px.slice()); ys.push(sm.values); idx.push(e.smooth);
          }
        });
        if (idx.length) { Plotly.extendTraces(divs[i], {x: xs, y: ys}, idx, 20000); }
      });
      batch.forEach(function (ev) {
        if (ev.kind === "status") { S.runs[ev.run_id].status = ev.payload.status; }
      });
    }, 100);
  }

  /* Replay: finished runs on one clock (seconds since each run's first point), play/pause/scrub/speed. */
  function replay(runs) {
    runs.forEach(function (run) {
      var t0 = Infinity;
      panelKeys.forEach(function (k) { if (run.history[k].t.length) { t0 = Math.min(t0, run.history[k].t[0]); } });
      run.t0 = isFinite(t0) ? t0 : 0;
      panelKeys.forEach(function (k) {
        var h = run.history[k];
        h.clock = h.t.map(function (t) { return t - run.t0; });
        if (h.clock.length) { S.T = Math.max(S.T, h.clock[h.clock.length - 1]); }
        if (smoothed(k)) { h.smooth = ema(h.y, C.smoothing).values; }
      });
    });
    var speed = C.speed || Math.max(S.T / 20, 0.05);
    var bar = document.getElementById("bar");
    bar.hidden = !C.controls;
    bar.innerHTML = '<button id="nl-play" type="button">Pause</button>' +
      '<input id="nl-scrub" type="range" min="0" max="1000" step="1" value="0" aria-label="replay time">' +
      '<span id="nl-clock"></span><select id="nl-speed" aria-label="speed"></select>';
    var sel = document.getElementById("nl-speed");
    [0.25, 0.5, 1, 2, 4, 8, 16, 32, 64].concat([speed]).filter(function (v, i, a) { return a.indexOf(v) === i; })
      .sort(function (a, b) { return a - b; }).forEach(function (v) {
        var o = document.createElement("option"); o.value = String(v);
        o.textContent = (Math.round(v * 100) / 100) + "×"; o.selected = v === speed; sel.appendChild(o);
      });
    S.speed = speed;
    function upper(arr, t) { var lo = 0, hi = arr.length; while (lo < hi) { var m = (lo + hi) >> 1; if (arr[m] <= t) { lo = m + 1; } else { hi = m; } } return lo; }
    function draw() {
      panelKeys.forEach(function (key, i) {
        var xs = [], ys = [], idx = [];
        runs.forEach(function (run) {
          var h = run.history[key], e = map[key][run.id], k = upper(h.clock, S.t);
          if (key === panelKeys[0]) { S.shown[run.id] = k; }
          xs.push(h.x.slice(0, k)); ys.push(h.y.slice(0, k)); idx.push(e.raw);
          if (e.smooth !== undefined) { xs.push(h.x.slice(0, k)); ys.push(h.smooth.slice(0, k)); idx.push(e.smooth); }
        });
        Plotly.restyle(divs[i], {x: xs, y: ys}, idx);
      });
      document.getElementById("nl-scrub").value = String(Math.round(1000 * S.t / (S.T || 1)));
      document.getElementById("nl-clock").textContent = S.t.toFixed(1) + " s / " + S.T.toFixed(1) + " s";
    }
    S.seek = function (t) { S.t = Math.min(Math.max(t, 0), S.T); draw(); };
    var last = null;
    function tick(now) {
      if (S.playing) {
        if (last !== null) { S.t = Math.min(S.T, S.t + (now - last) / 1000 * S.speed); draw(); }
        if (S.t >= S.T) { setPlaying(false); }
      }
      last = now;
      window.requestAnimationFrame(tick);
    }
    function setPlaying(on) {
      if (on && S.t >= S.T) { S.t = 0; }
      S.playing = on; document.getElementById("nl-play").textContent = on ? "Pause" : "Play";
    }
    S.setPlaying = setPlaying;
    document.getElementById("nl-play").onclick = function () { setPlaying(!S.playing); };
    document.getElementById("nl-scrub").oninput = function (ev) {
      setPlaying(false); S.seek(Number(ev.target.value) / 1000 * S.T);
    };
    sel.onchange = function () { S.speed = Number(sel.value); };
    // fixed axes: the curves grow into a frame that does not move while they play
    panelKeys.forEach(function (key, i) {
      var xmax = 0;
      runs.forEach(function (r) { var x = r.history[key].x; if (x.length) { xmax = Math.max(xmax, x[x.length - 1]); } });
      Plotly.relayout(divs[i], {"xaxis.range": [0, xmax || 1], "xaxis.autorange": false});
    });
    S.seek(0);
    setPlaying(true);
    window.requestAnimationFrame(tick);
  }

  function start() {
    Promise.all(C.runs.map(loadRun)).then(function (runs) {
      buildPanels(runs);
      if (C.mode === "replay") {
        var going = runs.filter(function (r) { return r.status === "queued" || r.status === "running"; });
        if (going.length) { note("still training (replay shows what is stored): " + going.map(function (r) { return r.id; }).join(", ")); }
        replay(runs);
      } else {
        follow(runs);
      }
      S.ready = true;
    }).catch(function (err) { S.error = String(err.message || err); note(S.error); });
  }
  if (window.Plotly) { start(); } else { window.addEventListener("load", start); }
})();
