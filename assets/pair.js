// Pairing: the code comes in the URL fragment (never sent to the server in a request line, a log
// or a Referer). Take it, wipe it from the address bar and history at once, fill the form and
// submit it. Without this script the code can be typed.
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
  form.submit();
})();
