// Live updates for the dashboard: listen to /api/events (server-sent events)
// and refetch the server-rendered fragment of the page when something changed.
// No framework, no build step. Everything inserted comes from the server's
// escaped templates; nothing from an event is put into the page as HTML.
(function () {
  "use strict";
  var body = document.body;
  var badge = document.getElementById("live");
  var pending = false;

  function setLive(on) {
    if (!badge) return;
    badge.textContent = on ? "live" : "offline";
    badge.className = on ? "live on" : "live off";
  }

  function refresh(target, url) {
    if (pending) return;
    pending = true;
    setTimeout(function () {
      fetch(url, { headers: { Accept: "text/html" } })
        .then(function (resp) { return resp.ok ? resp.text() : null; })
        .then(function (html) {
          if (html !== null) target.innerHTML = html;
          body.dataset.refreshed = String(Date.now());
        })
        .catch(function () {})
        .then(function () { pending = false; });
    }, 150);
  }

  function watch(onEvent) {
    if (!window.EventSource) return;
    var source = new EventSource("/api/events");
    source.onopen = function () { setLive(true); };
    source.onerror = function () { setLive(false); };
    ["run.queued", "run.started", "run.progress", "run.succeeded", "run.failed",
     "run.cancelled", "run.escalated", "repo.frozen", "repo.unfrozen"].forEach(function (name) {
      source.addEventListener(name, function (msg) {
        var data = null;
        try { data = JSON.parse(msg.data); } catch (e) { return; }
        onEvent(name, data);
      });
    });
    window.addEventListener("beforeunload", function () { source.close(); });
  }

  function setupActions() {
    var forms = document.querySelectorAll("form.action");
    Array.prototype.forEach.call(forms, function (form) {
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        var out = form.querySelector("output");
        var meta = document.querySelector('meta[name="csrf-token"]');
        var csrf = meta ? meta.getAttribute("content") : "";
        var payload = {};
        if (form.elements.note && form.elements.note.value) payload.note = form.elements.note.value;
        out.textContent = "…";
        fetch(form.dataset.url, {
          method: "POST",
          credentials: "same-origin",
          headers: { "X-CSRF-Token": csrf, "Content-Type": "application/json" },
          body: JSON.stringify(payload)
        }).then(function (resp) {
          return resp.json().then(function (data) {
            if (resp.ok) {
              out.textContent = "done";
              if (data.id && form.dataset.url.indexOf("/retry") > 0) {
                window.location.href = "/runs/" + data.id;
              } else {
                window.location.reload();
              }
            } else {
              out.textContent = data.error || ("HTTP " + resp.status);
            }
          });
        }).catch(function (err) { out.textContent = String(err); });
      });
    });
  }

  setupActions();
  var page = body.dataset.page;
  if (page === "runs") {
    var live = document.getElementById("runs-live");
    watch(function (name) {
      refresh(live, live.dataset.fragment);
    });
  } else if (page === "run") {
    var detail = document.getElementById("run-detail");
    var runId = Number(body.dataset.runId);
    watch(function (name, data) {
      if (data.run_id === runId) refresh(detail, body.dataset.fragment);
    });
  } else if (page === "repos") {
    watch(function (name) {
      if (name.indexOf("repo.") === 0) window.location.reload();
    });
  }
})();
