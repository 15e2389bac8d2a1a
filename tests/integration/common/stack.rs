//! Gateway stacks the tests start: the gateway in front of two fake upstreams, or in front of the
//! real OpenCode server with a fake model.

use crate::common::client::{Https, basic};
use crate::common::fake_upstream::FakeUpstream;
use crate::common::gateway::{ALICE, Gateway, TestUser, base_config, external_project, users_toml};
use crate::common::opencode::{FakeModel, OpenCode};
use crate::common::write_secret;

pub const UPSTREAM_PW: &str = "upstream-secret-Zq81";

/// Two projects on fake upstreams: alice may use both, bob only "web".
pub async fn two_projects(extra: &str) -> (Gateway, FakeUpstream, FakeUpstream, Https) {
    let (gw, web, api) = two_projects_as(external_project, extra, |config| config).await;
    let client = Https::new(gw.https, &gw.ca());
    (gw, web, api, client)
}

/// [`two_projects`] with each `[[project]]` written by `project(name, upstream url)`, `extra`
/// before them, and the whole config (after `base_config`) passed through `edit`.
pub async fn two_projects_as(
    project: impl Fn(&str, &str) -> String,
    extra: &str,
    edit: impl FnOnce(String) -> String,
) -> (Gateway, FakeUpstream, FakeUpstream) {
    let web = FakeUpstream::start(UPSTREAM_PW).await;
    let api = FakeUpstream::start(UPSTREAM_PW).await;
    let body = format!(
        "{extra}\n{}{}{}",
        project("web", &web.url()),
        project("api", &api.url()),
        users_toml(&[
            ALICE,
            TestUser {
                name: "bob",
                password: "bob-password-22",
                projects: "[\"web\"]",
                role: "operator"
            },
        ])
    );
    let config = edit(base_config(&body));
    (Gateway::start_behind(&config, UPSTREAM_PW), web, api)
}

/// One project "web" on a fake upstream demanding `password`: `extra` before it, `users` after.
pub async fn one_project(password: &'static str, extra: &str, users: &[TestUser<'_>]) -> (Gateway, FakeUpstream) {
    one_project_as(password, extra, users, |config| config).await
}

/// [`one_project`] with the whole config (after `base_config`) passed through `edit`.
pub async fn one_project_as(
    password: &'static str,
    extra: &str,
    users: &[TestUser<'_>],
    edit: impl FnOnce(String) -> String,
) -> (Gateway, FakeUpstream) {
    let web = FakeUpstream::start(password).await;
    let body = format!("{extra}\n{}{}", external_project("web", &web.url()), users_toml(users));
    let config = edit(base_config(&body));
    (Gateway::start_behind(&config, password), web)
}

pub struct Setup {
    pub model: FakeModel,
    pub oc: OpenCode,
    pub gw: Gateway,
    pub client: Https,
    /// The box the project is reached through, for [`setup_on_box`].
    pub on_box: Option<super::sshd::TestBox>,
}

pub const ALICE_PW: &str = "alice-password-1";

pub fn alice() -> String {
    basic("alice", ALICE_PW)
}

/// A real OpenCode server behind the gateway as project "demo"; alice is its operator.
pub async fn setup(bash_command: &str) -> Setup {
    setup_pinned(bash_command, false).await
}

/// Like [`setup`]; with `pinned`, the project's `directory` is the server's project folder.
pub async fn setup_pinned(bash_command: &str, pinned: bool) -> Setup {
    setup_as(bash_command, pinned, |config| config).await
}

/// Like [`setup_pinned`], with the project on a box: every request reaches OpenCode through an
/// SSH channel on the box's connection (a real sshd on loopback). The tests of pinning, roles
/// and spellings run this way too, to show they hold for a project on a box.
pub async fn setup_on_box(bash_command: &str, pinned: bool) -> Setup {
    let on_box = tokio::task::block_in_place(super::sshd::TestBox::start);
    let mut s = setup_as(bash_command, pinned, |config| on_box.put_on(&config, "demo")).await;
    s.on_box = Some(on_box);
    s
}

impl Setup {
    /// For [`setup_on_box`]: requests did reach OpenCode through the box's sshd.
    pub fn assert_reached_through_box(&self) {
        let sshd = &self.on_box.as_ref().expect("set up on a box").sshd;
        let log = sshd.log.lock().unwrap();
        assert!(
            log.contains(&format!("target 127.0.0.1 port {}", self.oc.port)),
            "the box's sshd forwarded nothing to OpenCode:\n{log}"
        );
    }
}

/// Like [`setup_pinned`], the whole config passed through `edit` first.
pub async fn setup_as(bash_command: &str, pinned: bool, edit: impl FnOnce(String) -> String) -> Setup {
    let model = FakeModel::start(bash_command).await;
    let oc = tokio::task::block_in_place(|| OpenCode::start(&model));
    let directory = if pinned {
        format!("directory = \"{}\"\n", oc.project.display())
    } else {
        String::new()
    };
    let config = base_config(&format!(
        "[[project]]\nname = \"demo\"\nupstream = \"{}\"\nupstream_password_file = \"upstream.pw\"\n{directory}\n{}",
        oc.url(),
        users_toml(&[
            TestUser {
                name: "alice",
                password: ALICE_PW,
                projects: "[\"*\"]",
                role: "operator"
            },
            TestUser {
                name: "vera",
                password: "vera-password-1",
                projects: "[\"demo\"]",
                role: "viewer"
            },
            TestUser {
                name: "aaron",
                password: "aaron-password-1",
                projects: "[\"demo\"]",
                role: "approver"
            },
            TestUser {
                name: "adam",
                password: "adam-password-1",
                projects: "[\"demo\"]",
                role: "admin"
            },
        ])
    ));
    let config = edit(config);
    let pw = oc.password.clone();
    let gw = Gateway::start_with(&config, &[], move |d| write_secret(&d.join("upstream.pw"), &pw));
    let client = Https::new(gw.https, &gw.ca());
    Setup {
        model,
        oc,
        gw,
        client,
        on_box: None,
    }
}

/// Two tests from one body (`async fn body(s: &Setup)`): against a real OpenCode with the
/// project pinned to its folder, and against the same reached through a box
/// ([`setup_on_box`]), which must also show its requests crossed the box's sshd.
#[macro_export]
macro_rules! here_and_on_a_box {
    ($here:ident, $on_box:ident, $body:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs OpenCode: run scripts/test.sh"]
        async fn $here() {
            $body(&$crate::common::stack::setup_pinned("echo unused", true).await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs OpenCode and OpenSSH's sshd: run scripts/test.sh"]
        async fn $on_box() {
            let s = $crate::common::stack::setup_on_box("echo unused", true).await;
            $body(&s).await;
            s.assert_reached_through_box();
        }
    };
}
