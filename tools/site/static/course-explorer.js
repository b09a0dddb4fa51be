// The course's explorers without a kernel: every frame was rendered by `make site`
// (tools/site/explorers.py); moving a control shows the frame for the controls' current values.
"use strict";
document.querySelectorAll(".course-explorer").forEach(function (box) {
  var m = JSON.parse(box.querySelector("script.ce-manifest").textContent);
  var inputs = Array.prototype.slice.call(box.querySelectorAll("[data-control]"));
  var img = box.querySelector("img.ce-frame");
  var message = box.querySelector(".ce-message");
  var loaded = {};
  function position() { // one index per control; a fixed control (a text box) stays at 0
    var at = m.controls.map(function () { return 0; });
    inputs.forEach(function (input) { at[Number(input.dataset.control)] = Number(input.value); });
    return at;
  }
  function frameAt(at) {
    return m.frames[at.reduce(function (i, k, c) { return i + k * m.strides[c]; }, 0)];
  }
  function preload(file) {
    if (typeof file === "string" && !loaded[file]) {
      loaded[file] = new Image();
      loaded[file].src = m.base + file;
    }
  }
  function show() {
    var at = position();
    inputs.forEach(function (input) {
      var c = Number(input.dataset.control);
      var out = box.querySelector('output[data-for="' + c + '"]');
      if (out) out.textContent = m.controls[c].labels[at[c]];
    });
    var file = frameAt(at);
    if (typeof file === "string") {
      message.textContent = "";
      img.src = m.base + file;
    } else {
      message.textContent = file.error; // the notebook shows the same sentence and keeps the picture
    }
    at.forEach(function (k, c) { // the neighbours of each control: the next move is already here
      [k - 1, k + 1].forEach(function (j) {
        if (j >= 0 && j < m.controls[c].labels.length) {
          var next = at.slice();
          next[c] = j;
          preload(frameAt(next));
        }
      });
    });
  }
  inputs.forEach(function (input) { input.addEventListener("input", show); });
  show();
  if (m.frames.length <= 64) { // a small explorer: every frame, once the page has loaded
    window.addEventListener("load", function () { m.frames.forEach(preload); });
  }
});
