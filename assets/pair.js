// Pairing: the code comes in the URL fragment (never sent to the server in a request line, a log
// or a Referer). Take it, wipe it from the address bar and history at once, fill the form and
// submit it. Without this script the code can be typed.
//
// At the address, the form names the gateway's named host (`data-named`, issue 38): passkeys work
// only there. If this phone reaches it within 3 s (its name resolves and its certificate is
// trusted: the same CA), pairing completes there instead, the code again only in the fragment;
// else here, as before (the portal then says where passkeys work).
(function () {
  "use strict";
  var raw = location.hash ? location.hash.slice(1) : "";
  if (!raw) return;
  history.replaceState(null, "", location.pathname + location.search);
  var code;
  try {
    code = decodeURIComponent(raw);
  } catch (e) {
    code = raw;
  }
  var input = document.getElementById("code");
  var form = document.getElementById("pair-form");
  if (!input || !form || document.getElementById("error")) return;
  input.value = code;
  var named = form.getAttribute("data-named");
  if (!named || !window.fetch || !window.AbortController) {
    form.submit();
    return;
  }
  var note = document.getElementById("pair-named");
  if (note) note.hidden = false;
  var stop = new AbortController();
  var timer = setTimeout(function () { stop.abort(); }, 3000);
  fetch(named + "/_gw/static/icon.svg", { mode: "no-cors", cache: "no-store", credentials: "omit", signal: stop.signal })
    .then(function () {
      clearTimeout(timer);
      location.replace(named + "/pair#" + encodeURIComponent(code));
    }, function () {
      clearTimeout(timer);
      form.submit();
    });
})();
