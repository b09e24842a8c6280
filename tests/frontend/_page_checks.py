"""What the browser tests ask a page: overlapping figure texts, visible form controls, whether it is
drawn (JavaScript for Playwright's page.evaluate / wait_for_function)."""

# Pairs of texts within one figure whose boxes overlap by more than a sliver (2 px each way).
OVERLAPS = """
() => {
  // a figure's texts: its title, each legend (legend, legend2, …), each axis title (xtitle, y2title, …),
  // each annotation (subplot titles included) and each colour bar's title
  const KIND = /^(g-gtitle|legend\\d*|g-[xy]\\d*title|annotation)$/;
  const shown = (el) => {
    for (let e = el; e && e.nodeType === 1; e = e.parentNode) {
      const cs = getComputedStyle(e);
      if (cs.display === "none" || cs.visibility === "hidden" || cs.opacity === "0") { return false; }
    }
    const r = el.getBoundingClientRect();
    return r.width > 1 && r.height > 1 && (el.textContent || "").trim() !== "";
  };
  const out = [];
  document.querySelectorAll(".js-plotly-plot").forEach((gd) => {
    const items = [];
    gd.querySelectorAll(".infolayer > g").forEach((g) => {
      if (KIND.test(g.getAttribute("class") || "")) { items.push(g); }
    });
    gd.querySelectorAll(".cbtitle").forEach((g) => items.push(g));
    const boxes = items.filter(shown).map((el) => [el, el.getBoundingClientRect()]);
    const name = (el) => el.getAttribute("class").split(" ")[0] + " '" +
      (el.textContent || "").trim().slice(0, 40) + "'";
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const [a, ra] = boxes[i], [b, rb] = boxes[j];
        const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
        const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
        if (w > 2 && h > 2) {
          const fig = gd.closest("[id]");
          out.push((fig ? fig.id : "figure") + ": " + name(a) + " × " + name(b));
        }
      }
    }
  });
  return out;
}
"""

# Form controls a person can see (the top bar's "Exit presentation" is the one allowed in the mode).
CONTROLS = """
() => Array.from(document.querySelectorAll(
    "input, select, textarea, button, [role=slider], .dash-dropdown, .Select-control, a.btn"))
  .filter((el) => el.id !== "nl-present-toggle" && !el.closest(".modebar"))
  .filter((el) => {
    if (el.type === "hidden") { return false; }
    const r = el.getBoundingClientRect(), cs = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && cs.visibility !== "hidden" && el.offsetParent !== null;
  })
  .map((el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + " '" +
    ((el.textContent || el.value || "").trim().slice(0, 30)) + "'")
"""

# The page is built: no Dash loading mark, its content there, every visible graph laid out.
DRAWN = """
() => {
  if (document.querySelector("[data-dash-is-loading=true], ._dash-loading")) { return false; }
  if (!document.querySelector(".page .card, .page table, .js-plotly-plot")) { return false; }
  return Array.from(document.querySelectorAll(".js-plotly-plot"))
    .filter((gd) => gd.offsetParent !== null).every((gd) => gd._fullLayout);
}
"""
