/* The Lab's state (frontend/pages/lab.py): the board and every form field that differs from the task's
 * default, as the page's URL state, and as the cookie "normlab_lab" from which the server renders a bare
 * "/" (the nav's Lab link, a reload) as this browser left it. */
(function () {
  "use strict";
  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    normlab_lab: {
      state: function (board, task, norm, sweep, sweepNorms, sweepBatch, sweepSeeds, values, probeValues, d) {
        var state = {runs: (board && board.runs) || [], task: task};
        if (board && board.group) { state.group = board.group; }  // the last sweep: Compare's results table
        if (norm && norm !== "layer") { state.norm = norm; }
        var defaults = (d && d.tasks && d.tasks[task]) || {};
        function keep(names, vals) {
          (names || []).forEach(function (name, i) {
            var v = (vals || [])[i], dv = defaults[name];
            if (Array.isArray(v)) {
              if (JSON.stringify(v) !== JSON.stringify(dv || [])) {
                state[name] = v.length ? "1" : "0";
              }
            } else if (v !== null && v !== undefined && v !== "" && v !== dv) { state[name] = v; }
          });
        }
        keep(d && d.names, values);
        keep(d && d.probe_names, probeValues);
        if (sweep && sweep.length) {
          state.sweep = "1"; state.sweep_norms = sweepNorms || [];
          state.sweep_batch = sweepBatch; state.sweep_seeds = sweepSeeds;
        }
        var q = new URLSearchParams();
        Object.keys(state).forEach(function (k) {
          var v = state[k];
          if (v === null || v === undefined || v === "" || (Array.isArray(v) && !v.length)) { return; }
          q.set(k, Array.isArray(v) ? v.join(",") : String(v));
        });
        document.cookie = "normlab_lab=" + encodeURIComponent(q.toString()) +
          "; path=/; max-age=2592000; SameSite=Lax";
        return state;
      }
    }
  });
})();
