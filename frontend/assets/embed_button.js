/* The shell's "Embed" button (frontend/app.py): copies an <iframe> of this page's runs as a chrome-less
   live chart (/embed/run/<id>, or /embed/compare?runs=... for several; frontend/embed.py). */
window.dash_clientside = Object.assign({}, window.dash_clientside, {
  normlab_embed: {
    embedUrl: function () {
      var loc = window.location, q = new URLSearchParams(loc.search), path;
      var one = /^\/run\/([0-9A-Za-z_-]{1,32})$/.exec(loc.pathname);
      var runs = (q.get("runs") || "").split(",").filter(Boolean);
      if (!one && !runs.length) {  // the runs this page shows: its links to runs, in order
        document.querySelectorAll('a[href*="/run/"]').forEach(function (a) {
          var m = /\/run\/([0-9A-Za-z_-]{1,32})/.exec(a.getAttribute("href"));
          if (m && runs.indexOf(m[1]) < 0 && runs.length < 6) { runs.push(m[1]); }
        });
      }
      if (one) { path = "/embed/run/" + one[1]; }
      else if (runs.length === 1) { path = "/embed/run/" + runs[0]; }
      else if (runs.length) { path = "/embed/compare?runs=" + runs.join(","); }
      else { return null; }
      var smooth = q.get("smooth");
      if (smooth) { path += (path.indexOf("?") < 0 ? "?" : "&") + "smoothing=" + encodeURIComponent(smooth); }
      return loc.origin + path;
    },
    copy: function (n) {
      if (!n) { return window.dash_clientside.no_update; }
      var src = window.dash_clientside.normlab_embed.embedUrl();
      if (!src) { return "No runs on this page to embed"; }
      var code = '<iframe src="' + src + '" width="100%" height="420" style="border:0" ' +
        'loading="lazy" title="normlab chart"></iframe>';
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(code).catch(function () {});
      } else {
        var ta = document.createElement("textarea");
        ta.value = code; document.body.appendChild(ta); ta.select();
        try { document.execCommand("copy"); } catch (err) { /* the note below still shows */ }
        document.body.removeChild(ta);
      }
      window.normlabLastEmbed = code;
      setTimeout(function () {
        var el = document.getElementById("nl-embed-done"); if (el) { el.textContent = ""; }
      }, 2500);
      return "Embed code copied";
    }
  }
});
