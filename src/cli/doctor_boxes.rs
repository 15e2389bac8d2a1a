//! `doctor` on each `[[box]]`: connect as the gateway will (its key, the pinned host key), then
//! ask the box, in one `exec` channel, for its `opencode` (path and version) and the real path
//! of each of its projects' folders. The gateway cannot read the box's file system itself: this
//! is where a folder that is missing or a link on the box is found before a request meets it.

use std::time::Duration;

use base64::Engine;
use russh::ChannelMsg;

use super::doctor_report::Report;
use crate::config::{Settings, UpstreamKind};
use crate::upstream::ssh_link::BoxLink;

/// Reads `opencode`'s name, then folders, each a base64 line; says `opencode <path> <version>`
/// or `opencode-missing`, then `dir <real path>` or `dir-missing` for each folder, in order.
/// Constant, like the launch script: what varies comes as data on its input.
const PROBE: &str = r#"IFS= read -r line; bin=$(printf %s "$line" | base64 -d)
if p=$(command -v "$bin" 2>/dev/null); then echo "opencode $p $("$bin" --version 2>/dev/null | head -n 1)"; else echo opencode-missing; fi
while IFS= read -r line && [ -n "$line" ]; do
  d=$(printf %s "$line" | base64 -d)
  if r=$(cd "$d" 2>/dev/null && pwd -P); then echo "dir $r"; else echo dir-missing; fi
done
"#;

/// How long the probe may take (an `opencode --version` included).
const PROBE_TIME: Duration = Duration::from_secs(30);

pub(crate) fn boxes(s: &Settings, r: &mut Report) {
    if s.boxes.is_empty() {
        return;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            r.fail(format!("boxes: cannot start the async runtime ({e})"));
            return;
        }
    };
    let links = match crate::upstream::box_links::BoxLinks::default().reconcile(s) {
        Ok(l) => l,
        Err(e) => {
            r.fail(format!("boxes: {e}"));
            return;
        }
    };
    let mut names: Vec<&String> = links.keys().collect();
    names.sort();
    for name in names {
        runtime.block_on(one(s, name, &links[name], r));
    }
}

async fn one(s: &Settings, name: &str, link: &BoxLink, r: &mut Report) {
    let projects: Vec<_> = s
        .projects
        .iter()
        .filter(|p| p.on_box.as_deref() == Some(name))
        .collect();
    let spawns = projects.iter().any(|p| p.upstream == UpstreamKind::Spawned);
    let opencode = s
        .boxes
        .iter()
        .find(|b| b.name == name)
        .map(|b| b.opencode.clone())
        .unwrap_or_default();
    let folders: Vec<_> = projects
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.directory.as_ref()?.to_string_lossy().into_owned())))
        .collect();
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    let mut input = b64(&opencode) + "\n";
    for (_, d) in &folders {
        input += &(b64(d) + "\n");
    }
    input.push('\n');
    let Some(answer) = ask(name, link, input, r).await else {
        return;
    };
    let mut lines = answer.lines();
    if opencode_found(name, lines.next(), &opencode, spawns, r) {
        folders_found(name, lines, folders, r);
    }
}

/// Runs the probe on the box with `input`; its answer, or `None` when a failure was reported.
async fn ask(name: &str, link: &BoxLink, input: String, r: &mut Report) -> Option<String> {
    let (channel, _open) = match link.exec(&format!("exec /bin/sh -c '{PROBE}'")).await {
        Ok(c) => c,
        Err(e) => {
            // `e` names the box, and the step it did not answer (each bounded by
            // `upstream_connect_timeout`: a box that takes the connection and never answers
            // must not hang `doctor`).
            r.fail(format!(
                "{e}. Fix: check ssh, key and host_key in its [[box]] table, and that the box's sshd lets the gateway's key in"
            ));
            return None;
        }
    };
    let (mut reader, writer) = channel.split();
    let answer = async {
        writer.data_bytes(input.into_bytes()).await.ok()?;
        writer.eof().await.ok()?;
        let mut out = Vec::new();
        while let Some(msg) = reader.wait().await {
            match msg {
                ChannelMsg::Data { data } => out.extend_from_slice(&data),
                ChannelMsg::Close => break,
                _ => {}
            }
        }
        Some(String::from_utf8_lossy(&out).into_owned())
    };
    let answer = tokio::time::timeout(PROBE_TIME, answer).await;
    let report = link.report();
    r.ok(format!(
        "box {name}: connected to {}: its host key is the pinned one, and it accepted the gateway's key{}",
        report.address,
        report
            .rtt_ms
            .map(|ms| format!(" (round trip {ms:.1} ms)"))
            .unwrap_or_default()
    ));
    let Ok(Some(answer)) = answer else {
        r.fail(format!(
            "box {name}: it did not answer what it runs within {} s",
            PROBE_TIME.as_secs()
        ));
        return None;
    };
    Some(answer)
}

/// The probe's first line: the box's opencode. False when the box ran nothing (folders unknown).
fn opencode_found(name: &str, line: Option<&str>, opencode: &str, spawns: bool, r: &mut Report) -> bool {
    match line {
        Some(l) if l.starts_with("opencode ") => {
            let rest = l.trim_start_matches("opencode ");
            let (path, version) = rest.split_once(' ').unwrap_or((rest, ""));
            // Found the way the launch script finds it: a name on the PATH of a
            // non-interactive SSH command (not a login shell's: ~/.profile is not read).
            let how = if opencode.contains('/') {
                "as its [[box]] opencode names it"
            } else {
                "on the PATH an SSH command gets"
            };
            r.ok(format!("box {name}: opencode {path} (version {}), {how}", version.trim()));
        }
        Some("opencode-missing") if spawns => r.fail(format!(
            "box {name}: {opencode} is not found on the box (on the PATH a non-interactive SSH command gets, which is not a login shell's), and a project spawns there. Fix: npm install -g opencode-ai on the box, or set opencode = \"<its path>\" in the [[box]] table (`ssh <box> command -v opencode` shows what the gateway will find)"
        )),
        Some("opencode-missing") => r.ok(format!("box {name}: no opencode found, and none is needed (no project spawns there)")),
        _ => {
            // A forced command (`command="/bin/false"`) on a forwarding-only key runs nothing.
            let what = format!(
                "box {name}: the box ran nothing for the gateway's key (a forced command in its authorized_keys?), so opencode and folders are not checked"
            );
            if spawns {
                r.fail(format!("{what}. Fix: spawning runs a command: remove command=… from the key's line"));
            } else {
                r.warn(what);
            }
            return false;
        }
    }
    true
}

/// The probe's next lines: each project's folder, as the box resolved it.
fn folders_found<'a>(
    name: &str,
    mut lines: impl Iterator<Item = &'a str>,
    folders: Vec<(&str, String)>,
    r: &mut Report,
) {
    for (project, dir) in folders {
        match lines.next() {
            Some(l) if l.strip_prefix("dir ") == Some(dir.as_str()) => {
                r.ok(format!("project {project}: folder {dir} exists on box {name}"))
            }
            Some(l) if l.starts_with("dir ") => r.fail(format!(
                "project {project}: {dir} is {} on box {name} (a link). Fix: set directory = \"{0}\"",
                &l[4..]
            )),
            _ => r.fail(format!(
                "project {project}: {dir} is not a folder the box's user can enter on box {name}. Fix: create it on the box, or correct directory"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::{Duration, Instant};

    use crate::upstream::test_box::{Hang, TestBox};

    /// A `[[box]]` table for a box at `address` pinned to `host_key`, logged in with `key`.
    fn box_table(name: &str, address: &str, key: &std::path::Path, host_key: &str) -> String {
        format!(
            "[[box]]\nname = \"{name}\"\nssh = \"dev@{address}\"\nkey = \"{}\"\nhost_key = \"{host_key}\"\n",
            key.display()
        )
    }

    /// Boxes that take the connection and then stop answering, each at another step: `doctor`
    /// ends (each step bounded by `upstream_connect_timeout`, 1 s here) and names the step.
    #[test]
    fn doctor_names_the_step_a_silent_box_never_answered() {
        let dir = tempfile::tempdir().unwrap();
        // Listening and never accepted: the kernel completes the TCP handshake, nothing is said.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let banner = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let banner_address = banner.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = banner.accept().unwrap();
            s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").unwrap();
            // Then nothing, until the gateway's side goes.
            let _ = std::io::copy(&mut s, &mut std::io::sink());
        });
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let at_login = runtime.block_on(TestBox::start(Hang::AtLogin));
        let at_channels = runtime.block_on(TestBox::start(Hang::AtChannels));
        let write = |name: &str, client: &russh::keys::PrivateKey| {
            let path = dir.path().join(name);
            let text = client.to_openssh(russh::keys::ssh_key::LineEnding::LF).unwrap();
            crate::support::files::write_private(&path, &text).unwrap();
            path
        };
        let key = write("id_ed25519", &at_login.client_key);
        // The box at channels lets in another key: give it that one.
        let key2 = write("id2", &at_channels.client_key);
        let some_key = &at_login.host_key;
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n[tls]\ncert = \"c.crt\"\nkey = \"c.key\"\ndev_ca = true\n[limits]\nupstream_connect_timeout = \"1s\"\n{}{}{}{}",
            box_table("a-silent", &silent.local_addr().unwrap().to_string(), &key, some_key),
            box_table("b-banner", &banner_address.to_string(), &key, some_key),
            box_table("c-login", &at_login.address, &key, &at_login.host_key),
            box_table("d-channels", &at_channels.address, &key2, &at_channels.host_key),
        );
        let settings = crate::config::parse(&config, &dir.path().join("gateway.toml")).unwrap();
        let started = Instant::now();
        let (done, report) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = crate::cli::doctor_report::Report::default();
            super::boxes(&settings, &mut r);
            let _ = done.send(r.render());
        });
        let out = report
            .recv_timeout(Duration::from_secs(30))
            .expect("doctor did not finish within 30 s: a step is not bounded");
        assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
        let line = |start: &str| {
            out.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{out}"))
                .to_string()
        };
        for (start, says) in [
            (
                "fail box a-silent: ",
                "took the connection but sent no SSH banner within 1 s",
            ),
            ("fail box b-banner: ", "no answer to the SSH key exchange from"),
            ("fail box c-login: ", "no answer to the SSH login as dev within 1 s"),
            (
                "fail box d-channels: ",
                "no answer to opening a channel to run a command within 1 s",
            ),
        ] {
            let found = line(start);
            assert!(found.contains(says), "{found}");
        }
        drop(runtime);
    }
}
