//! The browser login and the CLI's token, as the tests that need them on the side use them: the
//! form on the login host (`gw.localhost`, the base domain `base_config` sets), the check that a
//! cookie is logged in, and `token create`.

use http_body_util::Full;

use crate::common::client::{Https, Reply};
use crate::common::gateway::{BIN, Gateway};

/// The login host `base_config` sets up.
pub const LOGIN_HOST: &str = "gw.localhost";

/// The login form posted on the login host, as the page does (same origin): the answer, whatever
/// it is.
pub async fn post_login(c: &Https, user: &str, password: &str) -> Reply {
    let login = c.host(LOGIN_HOST);
    let req = login
        .request("POST", "/login", None)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", format!("https://{}", login.authority()))
        .header("sec-fetch-site", "same-origin")
        .body(Full::from(format!("user={user}&password={password}&next=/")))
        .unwrap();
    login.call(req).await
}

/// Log `user` in with the form on the login host; the `__Host-ocgw=…` pair its answer set.
pub async fn form_login(c: &Https, user: &str, password: &str) -> String {
    cookie_set_by(&post_login(c, user, password).await)
}

/// Is this cookie (`__Host-ocgw=…`) logged in on the login host? (`GET /login` sends a logged-in
/// browser on, and shows the form to anyone else.)
pub async fn logged_in(c: &Https, cookie: &str) -> bool {
    let login = c.host(LOGIN_HOST);
    let req = login
        .request("GET", "/login", None)
        .header("cookie", cookie)
        .body(Full::default())
        .unwrap();
    let r = login.call(req).await;
    match r.status.as_u16() {
        303 => true,
        200 => {
            assert!(r.body.contains("name=\"password\""), "{}", r.body);
            false
        }
        other => panic!("GET /login answered {other}: {}", r.body),
    }
}

/// `token create <user>` on the gateway's config: the token, asserting success.
pub fn token_create(gw: &Gateway, user: &str) -> String {
    let out = crate::common::process::bounded(
        std::process::Command::new(BIN)
            .args(["token", "create", user, "-c"])
            .arg(&gw.config),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The `Location` of a redirect, failing the test with the answer when there is none.
pub fn location(r: &Reply) -> String {
    r.headers
        .get("location")
        .unwrap_or_else(|| panic!("no Location in a {} answer: {}", r.status, r.body))
        .to_str()
        .unwrap()
        .to_string()
}

/// A GET as a browser sends it: with the cookie header `cookie`, and, for a navigation (`html`),
/// `Accept: text/html` and `Sec-Fetch-Mode: navigate`.
pub async fn browser_get(c: &Https, path: &str, cookie: Option<&str>, html: bool) -> Reply {
    let mut b = c.request("GET", path, None);
    if let Some(k) = cookie {
        b = b.header("cookie", k);
    }
    if html {
        b = b.header("accept", "text/html").header("sec-fetch-mode", "navigate");
    }
    c.call(b.body(Full::default()).unwrap()).await
}

/// A control-room form (`/_gw/act`: answer, abort, resume) posted on the login host as the page
/// does (same origin), with the login's cookie.
pub async fn act(lh: &Https, cookie: &str, form: &str) -> Reply {
    portal_post(lh, cookie, "/_gw/act", form).await
}

/// A portal form posted to `path` on the login host as the page does (same origin).
pub async fn portal_post(lh: &Https, cookie: &str, path: &str, form: &str) -> Reply {
    let own = format!("https://{}", lh.authority());
    let req = lh
        .request("POST", path, None)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", cookie)
        .header("origin", own)
        .header("sec-fetch-site", "same-origin")
        .body(Full::from(form.to_string()))
        .unwrap();
    lh.call(req).await
}

/// `pair alice` on `gw`'s CLI: the code.
pub fn pair_code(gw: &Gateway) -> String {
    let (ok, said) = gw.cli(&["pair", "alice", "--label", "phone"]);
    assert!(ok, "{said}");
    said.lines()
        .map(str::trim)
        .find(|l| l.len() == 14 && l.matches('-').count() == 2)
        .unwrap_or_else(|| panic!("no code in:\n{said}"))
        .to_string()
}

/// The phone's pairing page on the login host `c` names posting `code`: the `__Host-ocgw=…` pair it set.
pub async fn redeem_code(c: &Https, code: &str) -> String {
    let req = c
        .request("POST", "/pair", None)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", format!("https://{}", c.authority()))
        .header("sec-fetch-site", "same-origin")
        .header("sec-fetch-mode", "navigate")
        .body(Full::from(format!("code={code}")))
        .unwrap();
    cookie_set_by(&c.call(req).await)
}

/// The `name=value` pair of the cookie a 303 set.
fn cookie_set_by(r: &Reply) -> String {
    assert_eq!(r.status, 303, "{}", r.body);
    r.headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

pub fn form_post(c: &Https) -> http::request::Builder {
    c.request("POST", "/pair", None)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("sec-fetch-mode", "navigate")
        .header("accept", "text/html")
}

/// The phone's page posting a code, as a browser on the login host does.
pub async fn post_code(c: &Https, code: &str) -> Reply {
    let req = form_post(c)
        .header("origin", format!("https://{}", c.authority()))
        .header("sec-fetch-site", "same-origin")
        .body(Full::from(format!("code={}", code.replace(' ', "+"))))
        .unwrap();
    c.call(req).await
}
