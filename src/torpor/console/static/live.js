// The run page, live (issue 40): one EventSource on /runs/ID/sse. Stream items grow the reply
// (text nodes only: nothing received is parsed as markup); a grown history fetches the live
// summary again (the server's HTML fragment, as htmx would); "done" closes the source. On a dropped connection the browser
// reconnects by itself with Last-Event-ID, and the server resumes after that offset.
(function () {
  "use strict";
  var box = document.getElementById("reply");
  if (!box || !window.EventSource) {
    return;
  }
  var text = document.getElementById("reply-text");
  var state = document.getElementById("reply-state");
  var source = new EventSource(box.dataset.sse + "&after=" + encodeURIComponent(box.dataset.after || "0"));

  function partOf(name) {
    var spans = text.querySelectorAll("span[data-part]");
    for (var i = 0; i < spans.length; i++) {
      if (spans[i].dataset.part === name) {
        return spans[i];
      }
    }
    var span = document.createElement("span");
    span.className = "part open";
    span.dataset.part = name;
    text.appendChild(span);
    return span;
  }

  source.addEventListener("item", function (ev) {
    var item = JSON.parse(ev.data);
    box.hidden = false;  // (hidden while nothing was streamed)
    var span = partOf(item.part);
    if (item.kind === "data") {
      var piece = typeof item.data === "string" ? item.data : JSON.stringify(item.data) + "\n";
      span.appendChild(document.createTextNode(piece));
    } else if (item.kind === "end") {
      span.className = "part ended";
    } else if (item.kind === "retract") {
      span.className = "part retracted";
      span.title = String(item.data || "retracted");
    }
    box.dataset.after = String(item.offset);
    state.textContent = "streaming (offset " + item.offset + ")";
  });

  // One fetch of the live summary at a time; a history that grew meanwhile fetches once more.
  var busy = false;
  var again = false;
  function refresh() {
    var live = document.getElementById("run-live");
    if (!live) {
      return;
    }
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    fetch(live.dataset.liveUrl, { credentials: "same-origin" })
      .then(function (r) {
        if (r.redirected) { // the session ended: to the login form, as any page would
          window.location.assign(r.url);
          return null;
        }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        var now = document.getElementById("run-live");
        if (html && now) {
          now.outerHTML = html;
        }
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) {
          again = false;
          refresh();
        }
      });
  }

  source.addEventListener("history", refresh);

  source.addEventListener("done", function () {
    source.close();
    state.textContent = "complete";
  });
})();
