// The StepThrough player (course_lib/viz/player.py): every step's picture is already in the
// page, one <figure class="cl-step"> each, so nothing here needs a kernel or the network.
// Without JavaScript (an untrusted notebook, GitHub) the figures stay one after another.
// This script, inside the player's <div>, adds play / previous / slider / next and shows one
// figure at a time. For screen readers the slider says "step 3 of 8: <what it did>", and a
// polite status line says the step a button moved to (not each step played, not to flood).
(function () {
  "use strict";
  // The player is this script's parent; a front end that runs an output's scripts elsewhere
  // (the classic Notebook's jQuery runs them in <head>) finds it by the digest of its
  // pictures, which player.py writes both on the player and here.
  var script = document.currentScript;
  var root = script && script.parentNode.matches(".cl-player") ? script.parentNode
    : document.querySelector('.cl-player[data-player="__PLAYER__"]:not([data-started])');
  if (!root) return;
  root.setAttribute("data-started", "");
  var frames = Array.prototype.slice.call(root.querySelectorAll(".cl-step"));
  var last = frames.length - 1;
  var current = 0;
  var timer = null;
  // a timer longer than 2^31 - 1 ms would wrap around and fire at once
  var interval = Math.min(Number(root.getAttribute("data-interval")), 2147483647);
  var controls = document.createElement("div");
  controls.className = "cl-controls";
  controls.style.cssText =
    "display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin:4px 0 8px";
  var status = document.createElement("div");
  status.setAttribute("role", "status");
  status.style.cssText =
    "position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap";
  // Keys pressed here move the player only: JupyterLab would take the arrows (they select
  // cells) and cancel the slider's own handling.
  controls.addEventListener("keydown", function (event) { event.stopPropagation(); });

  function button(text, label, onClick) {
    var b = document.createElement("button");
    b.type = "button";
    b.textContent = text;
    b.setAttribute("aria-label", label);
    b.addEventListener("click", onClick);
    controls.appendChild(b);
    return b;
  }

  function said(step) {
    var code = frames[step].querySelector("figcaption code");
    return "step " + (step + 1) + " of " + frames.length + (code ? ": " + code.textContent : "");
  }

  function show(step) {
    current = Math.max(0, Math.min(last, step));
    frames.forEach(function (frame, i) {
      frame.style.display = i === current ? "" : "none";
    });
    slider.value = String(current + 1);
    slider.setAttribute("aria-valuetext", said(current));
  }

  function announce() {
    status.textContent = said(current);
  }

  function stop() {
    if (timer !== null) {
      clearInterval(timer);
      timer = null;
      play.textContent = "▶ play";
      play.setAttribute("aria-pressed", "false");
    }
  }

  function moveTo(step) {
    stop();
    show(step);
    announce();
  }

  var play = button("▶ play", "play", function () {
    if (timer !== null) {
      stop();
      announce();
      return;
    }
    if (current === last) show(0);
    play.textContent = "❚❚ pause";
    play.setAttribute("aria-pressed", "true");
    timer = setInterval(function () {
      if (!root.isConnected) {  // its output was cleared (the cell run again): no more ticks
        stop();
        return;
      }
      show(current + 1);
      if (current === last) {
        stop();
        announce();
      }
    }, interval);
  });
  play.setAttribute("aria-pressed", "false");
  button("◀ previous", "previous step", function () { moveTo(current - 1); });
  var slider = document.createElement("input");
  slider.type = "range";
  slider.min = "1";
  slider.max = String(frames.length);
  slider.setAttribute("aria-label", "step");
  // the slider says its own aria-valuetext: the status line would say it twice
  slider.addEventListener("input", function () {
    stop();
    show(Number(slider.value) - 1);
  });
  controls.appendChild(slider);
  button("next ▶", "next step", function () { moveTo(current + 1); });
  controls.appendChild(status);
  root.insertBefore(controls, root.firstChild);
  show(0);
})();
