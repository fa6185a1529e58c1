// Live updates for the dashboard: listen to /api/events (server-sent events)
// and refetch the server-rendered fragment of the page when something changed.
// No framework, no build step. Everything inserted comes from the server's
// escaped templates; nothing from an event is put into the page as HTML.
(function () {
  "use strict";
  var body = document.body;
  var badge = document.getElementById("live");
  var pending = false;
  var fetching = false;
  var again = false;

  function setLive(on) {
    if (!badge) return;
    badge.textContent = on ? "live" : "offline";
    badge.className = on ? "live on" : "live off";
  }

  // Runs ticked for a batch action, by id: kept while live refresh replaces the rows.
  function picked() {
    var boxes = document.querySelectorAll("input.pick:checked");
    return Array.prototype.map.call(boxes, function (box) { return Number(box.value); });
  }

  function repick(ids) {
    Array.prototype.forEach.call(document.querySelectorAll("input.pick"), function (box) {
      box.checked = ids.indexOf(Number(box.value)) >= 0;
    });
    countPicked();
  }

  function countPicked() {
    var form = document.getElementById("batch");
    if (!form) return;
    var count = picked().length;
    document.getElementById("batch-count").textContent = String(count);
    Array.prototype.forEach.call(form.querySelectorAll("button"), function (button) {
      button.disabled = count === 0;
    });
  }

  // One refresh at a time. A change announced before the fetch goes out is in its answer;
  // one announced while the fetch is in flight may not be, so another refresh follows it
  // (else the run's last change, its ending, could stay unseen until the next event).
  function refresh(target, url) {
    if (pending) {
      if (fetching) again = true;
      return;
    }
    pending = true;
    setTimeout(function () {
      fetching = true;
      again = false;
      fetch(url, { headers: { Accept: "text/html" } })
        .then(function (resp) { return resp.ok ? resp.text() : null; })
        .then(function (html) {
          var keep = picked();
          if (html !== null) target.innerHTML = html;
          repick(keep);
          body.dataset.refreshed = String(Date.now());
        })
        .catch(function () {})
        .then(function () {
          pending = false;
          fetching = false;
          if (again) refresh(target, url);
        });
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

  // One listener for every action form, those a live refresh puts in the page included.
  function setupActions() {
    document.addEventListener("submit", function (ev) {
      var form = ev.target;
      if (!form.classList || !form.classList.contains("action")) return;
      ev.preventDefault();
      var out = form.querySelector("output");
      var payload = {};
      if (form.elements.note && form.elements.note.value) payload.note = form.elements.note.value;
      out.textContent = "…";
      fetch(form.dataset.url, {
        method: "POST",
        credentials: "same-origin",
        headers: { "X-CSRF-Token": csrfToken(), "Content-Type": "application/json" },
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
  }

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  function showBatch(data) {
    var list = document.getElementById("batch-results");
    list.textContent = "";
    (data.results || []).forEach(function (result) {
      var item = document.createElement("li");
      item.className = result.ok ? "done" : "refused";
      item.dataset.runId = String(result.run_id);
      item.textContent = "run " + result.run_id + ": " + result.outcome.replace("_", " ") +
        " — " + result.message;
      list.appendChild(item);
    });
    document.getElementById("batch-status").textContent =
      data.done + " done, " + data.refused + " refused";
  }

  function setupBatch(live) {
    var form = document.getElementById("batch");
    if (!form) return;
    document.addEventListener("change", function (ev) {
      if (ev.target.classList && ev.target.classList.contains("pick")) countPicked();
    });
    Array.prototype.forEach.call(form.querySelectorAll("button"), function (button) {
      button.addEventListener("click", function () {
        var status = document.getElementById("batch-status");
        status.textContent = "…";
        fetch(form.dataset.url, {
          method: "POST",
          credentials: "same-origin",
          headers: { "X-CSRF-Token": csrfToken(), "Content-Type": "application/json" },
          body: JSON.stringify({ action: button.dataset.action, runs: picked() })
        }).then(function (resp) {
          return resp.json().then(function (data) {
            if (!resp.ok) { status.textContent = data.error || ("HTTP " + resp.status); return; }
            showBatch(data);
            repick([]);
            refresh(live, live.dataset.fragment);
          });
        }).catch(function (err) { status.textContent = String(err); });
      });
    });
    countPicked();
  }

  setupActions();
  var page = body.dataset.page;
  if (page === "runs") {
    var live = document.getElementById("runs-live");
    setupBatch(live);
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
