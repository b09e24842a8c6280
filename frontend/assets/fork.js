/* Interventions on the curves: each `intervention` event (live, or replayed to a late joiner) becomes a
 * vertical line at its step on every panel of the curves chart, labelled with what changed (old → new).
 * normlab.js hands the events over (window.normlabFork.intervention); markers survive redraws because
 * they are kept here and re-added after each new figure. */
(function () {
  var seen = {};  // "run:seq" -> marker, so a replayed event is drawn once

  function graph() { return document.querySelector("#nl-curves .js-plotly-plot"); }

  function label(ev) {
    var changes = (ev.payload && ev.payload.changes) || {};
    return Object.keys(changes).map(function (k) {
      return k + " " + changes[k].old + " → " + changes[k]["new"];
    }).join(", ");
  }

  function draw() {
    var gd = graph();
    if (!gd || !gd.layout || !window.Plotly) { return; }
    var axes = Object.keys(gd.layout).filter(function (k) { return /^xaxis\d*$/.test(k); });
    var ours = function (s) { return s && s.name && s.name.indexOf("nl-intervention") === 0; };
    var shapes = (gd.layout.shapes || []).filter(function (s) { return !ours(s); });
    var notes = (gd.layout.annotations || []).filter(function (a) { return !ours(a); });
    Object.keys(seen).forEach(function (key) {
      var m = seen[key];
      axes.forEach(function (ax, i) {
        var x = "x" + ax.slice(5);
        var yref = "y" + ax.slice(5) + " domain";
        shapes.push({type: "line", name: "nl-intervention-" + key, xref: x, yref: yref, x0: m.step, x1: m.step,
                     y0: 0, y1: 1, line: {color: "#555", width: 1, dash: "dot"}});
        if (i === 0) {
          notes.push({name: "nl-intervention-" + key, xref: x, yref: yref, x: m.step, y: 1, yanchor: "bottom",
                      showarrow: false, text: m.text, font: {size: 10}, bgcolor: "rgba(255,255,255,0.8)"});
        }
      });
    });
    window.Plotly.relayout(gd, {shapes: shapes, annotations: notes});
  }

  window.normlabFork = {
    intervention: function (ev) {
      var key = ev.run_id + ":" + ev.seq;
      if (seen[key]) { return; }
      seen[key] = {step: ev.step, text: "step " + ev.step + ": " + label(ev)};
      draw();
    },
    markers: function () { return Object.keys(seen).map(function (k) { return seen[k]; }); },
  };
  // a new figure (smoothing, a redraw) comes without our shapes: add them back
  setInterval(function () {
    var gd = graph();
    if (!gd || !gd.layout || !Object.keys(seen).length) { return; }
    var has = (gd.layout.shapes || []).some(function (s) { return s.name && s.name.indexOf("nl-intervention") === 0; });
    if (!has) { draw(); }
  }, 1000);
})();
