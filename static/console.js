// chunkmq console: progressive enhancement only; every page works without this file.
"use strict";

// Live refresh: htmx polls the #live fragments; skip the polls while the tab is hidden.
document.addEventListener("htmx:beforeRequest", function (event) {
  if (document.hidden) {
    event.preventDefault();
  }
});

// The navigation folds behind the Menu button on narrow screens (console.css); without this script
// the button stays hidden and every link stays listed.
var menu = document.querySelector("header.top button.menu");
if (menu) {
  menu.hidden = false;
  menu.parentElement.classList.add("js");
  menu.addEventListener("click", function () {
    var open = menu.getAttribute("aria-expanded") !== "true";
    menu.setAttribute("aria-expanded", String(open));
    menu.parentElement.classList.toggle("open", open);
  });
}

// Charts: <div class="chart" data-src="...json" data-title="..."> is drawn with uPlot from
// {"t": [epoch s...], "series": [{"label": "...", "values": [...]}]}.
var COLORS = ["#2458d3", "#137a3a", "#b4690e", "#b42318", "#7a3ab4"];

function drawChart(el) {
  if (typeof uPlot === "undefined") {
    return;
  }
  fetch(el.dataset.src, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then(function (response) { return response.ok ? response.json() : null; })
    .then(function (data) {
      if (!data) {
        return;
      }
      var plot = el.querySelector(".plot");
      plot.textContent = "";
      var series = [{}];
      var columns = [data.t];
      data.series.forEach(function (s, i) {
        series.push({ label: s.label, stroke: COLORS[i % COLORS.length], width: 1.5 });
        columns.push(s.values);
      });
      var width = Math.max(200, el.clientWidth - 16);  // a chart on a phone is about 300 px wide
      var x = { time: true };
      if (data.t.length < 2) {  // one point: uPlot would otherwise span years around it
        var t0 = data.t.length ? data.t[0] : Date.now() / 1000;
        x.range = [t0 - 60, t0 + 60];
      }
      new uPlot({ width: width, height: 180, series: series, scales: { x: x }, axes: [{}, { size: 60 }] },
                columns, plot);
    })
    .catch(function () { /* the table above still holds the numbers */ });
}

document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".chart[data-src]").forEach(drawChart);
});
