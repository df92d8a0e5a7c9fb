// rlbook explorers: each .rlbook-explorer holds its views as JSON (one Plotly figure per choice of its controls);
// moving a control shows the view of that choice. It runs in the page: no kernel, no network.
(function () {
  function setup(root) {
    if (root.dataset.ready) return;
    var plot = root.querySelector(".explorer-plot");
    if (typeof Plotly === "undefined") {
      plot.innerHTML = '<p class="explorer-missing">This interactive figure runs in the rendered book ' +
        "(build/html/index.html). In JupyterLab, use the explorer above.</p>";
      return;
    }
    var spec = JSON.parse(root.querySelector("script.explorer-data").textContent);
    var controls = Array.prototype.slice.call(root.querySelectorAll("[data-control]"));
    function choice() {
      return controls.map(function (c) {
        var options = JSON.parse(c.dataset.options);
        var value = c.tagName === "SELECT" ? c.value : options[+c.value];
        var shown = root.querySelector('output[data-for="' + c.dataset.control + '"]');
        if (shown) shown.textContent = value;
        return value;
      }).join("|");
    }
    function draw() {
      var key = choice();
      var view = spec.views[key] || {data: [], layout: {title: {text: "no stored run for this choice"}}};
      var layout = Object.assign({}, spec.layout, view.layout);
      Plotly.react(plot, view.data, layout, {responsive: true, displaylogo: false});
      root.dataset.view = key;
    }
    controls.forEach(function (c) { c.addEventListener("input", draw); c.addEventListener("change", draw); });
    draw();
    root.dataset.ready = "1";
  }
  function all() { document.querySelectorAll(".rlbook-explorer").forEach(setup); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", all); else all();
})();
