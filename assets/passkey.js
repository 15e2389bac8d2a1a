// Passkeys (WebAuthn): "Sign in with a passkey" on the login page, "Add a passkey" on the portal.
// The gateway makes the options and checks every answer (`/_gw/passkey`); this script only
// carries them between the gateway and the browser's authenticator, as base64url JSON. Shown only
// where the browser has WebAuthn.
(() => {
  if (!window.PublicKeyCredential || !navigator.credentials) return;
  const dec = (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0)).buffer;
  const enc = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  const ids = (list) => (list || []).map((c) => ({ ...c, id: dec(c.id) }));
  const creation = (o) => (PublicKeyCredential.parseCreationOptionsFromJSON ? PublicKeyCredential.parseCreationOptionsFromJSON(o)
    : { ...o, challenge: dec(o.challenge), user: { ...o.user, id: dec(o.user.id) }, excludeCredentials: ids(o.excludeCredentials) });
  const request = (o) => (PublicKeyCredential.parseRequestOptionsFromJSON ? PublicKeyCredential.parseRequestOptionsFromJSON(o)
    : { ...o, challenge: dec(o.challenge), allowCredentials: ids(o.allowCredentials) });
  // The answer as `PublicKeyCredential.toJSON()` gives it, for browsers without it.
  const answer = (c) => {
    if (c.toJSON) return c.toJSON();
    const r = c.response;
    const out = { id: c.id, rawId: enc(c.rawId), type: c.type, authenticatorAttachment: c.authenticatorAttachment,
      clientExtensionResults: c.getClientExtensionResults(), response: { clientDataJSON: enc(r.clientDataJSON) } };
    if (r.attestationObject) {
      out.response.attestationObject = enc(r.attestationObject);
      out.response.transports = r.getTransports ? r.getTransports() : [];
    } else {
      out.response.authenticatorData = enc(r.authenticatorData);
      out.response.signature = enc(r.signature);
      if (r.userHandle) out.response.userHandle = enc(r.userHandle);
    }
    return out;
  };
  const post = async (fields) => {
    const r = await fetch('/_gw/passkey', { method: 'POST', credentials: 'same-origin', body: new URLSearchParams(fields) });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || `the gateway answered ${r.status}`);
    return body;
  };
  const say = (el, e) => { el.textContent = e.name === 'NotAllowedError' ? 'Cancelled, or no passkey for this site on this device.' : e.message; el.title = e.message; el.hidden = false; };

  const signIn = document.getElementById('passkey-sign-in');
  if (signIn) {
    const error = document.getElementById('passkey-error');
    document.getElementById('passkey').hidden = false;
    signIn.addEventListener('click', async () => {
      error.hidden = true;
      try {
        const options = await post({ do: 'sign-in-options' });
        const cred = await navigator.credentials.get({ publicKey: request(options) });
        // `ceremony`: the gateway's sealed record of this sign-in, handed back with the answer.
        const done = await post({ do: 'sign-in', credential: JSON.stringify(answer(cred)), ceremony: options.ceremony, next: signIn.dataset.next || '/' });
        location.assign(done.next);
      } catch (e) { say(error, e); }
    });
  }

  const add = document.getElementById('passkey-add-button');
  if (add) {
    const error = document.getElementById('passkey-error');
    document.getElementById('passkey-add').hidden = false;
    add.addEventListener('click', async () => {
      error.hidden = true;
      try {
        const options = await post({ do: 'register-options' });
        const cred = await navigator.credentials.create({ publicKey: creation(options) });
        await post({ do: 'register', credential: JSON.stringify(answer(cred)), label: document.getElementById('passkey-label').value });
        location.assign('/?done=passkey_added');
      } catch (e) { say(error, e); }
    });
  }
})();
