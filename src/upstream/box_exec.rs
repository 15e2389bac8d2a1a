//! A [`Job`] on a box (issue 41: a task's git and acceptance test, a box set's listing), in an
//! `exec` channel on the box's one SSH connection, as its SSH user. As with a server's launch
//! (`supervise/remote.rs`), the command is a constant POSIX `sh` script and everything that
//! varies (the folder, the program, its arguments, the environment) reaches it on the channel's
//! standard input, base64 per line: no argument is ever parsed as shell code.
//!
//! The script runs the command in a process group of its own and keeps reading its standard
//! input: when that ends (the gateway cut the output, the time ran out, the link fell) the
//! whole group is killed, so nothing the gateway gave up on keeps running on the box.

use base64::Engine;
use russh::ChannelMsg;

use super::job_spec::{Failed, Job, Keep, Kept, MAX_STDERR, Ran};
use super::ssh_link::BoxLink;

/// The script (one single-quoted word for the user's login shell: no `'` and no `\`).
const SCRIPT: &str = r#"set -u
unset SSH_CONNECTION SSH_CLIENT SSH_TTY SSH_ORIGINAL_COMMAND SSH_AUTH_SOCK MAIL
dir=
set --
while IFS= read -r line && [ -n "$line" ]; do
  v=$(printf %s "${line#*=}" | base64 -d) || exit 70
  case ${line%%=*} in
    dir) dir=$v ;;
    arg) set -- "$@" "$v" ;;
    env) export "$v" || exit 70 ;;
  esac
done
if [ -z "$dir" ] || [ "$#" -eq 0 ]; then
  echo "opencode-gateway: the request was cut short" >&2; exit 70
fi
cd "$dir" 2>/dev/null || { echo "opencode-gateway: cannot enter $dir on the box" >&2; exit 66; }
export LANG=C GIT_TERMINAL_PROMPT=0
exec 3<&0
setsid "$@" </dev/null &
pid=$!
{ cat >/dev/null; kill -KILL -$pid; } <&3 >/dev/null 2>&1 &
watcher=$!
exec 3<&-
wait $pid
code=$?
kill $watcher 2>/dev/null
exit $code
"#;

fn command() -> String {
    sh_word(SCRIPT)
}

/// The exec request that runs `script` through the box user's login shell: `/bin/sh` with the
/// script as one single-quoted word, which reads the same in sh, bash, zsh and fish while the
/// script holds no `'` and no `\` (the tests hold every script to that).
pub(super) fn sh_word(script: &str) -> String {
    format!("exec /bin/sh -c '{script}'")
}

/// The script's standard input: `name=base64(value)` lines, then an empty line.
fn request(job: &Job<'_>) -> String {
    let b64 = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
    let mut out = String::new();
    let mut line = |name: &str, value: &[u8]| {
        out.push_str(name);
        out.push('=');
        out.push_str(&b64(value));
        out.push('\n');
    };
    use std::os::unix::ffi::OsStrExt;
    line("dir", job.dir.as_os_str().as_bytes());
    for (k, v) in job.env {
        line("env", &[k.as_bytes(), b"=", v.as_bytes()].concat());
    }
    line("arg", job.program.as_bytes());
    for a in job.args {
        line("arg", a.as_bytes());
    }
    out.push('\n');
    out
}

pub(super) async fn run(link: &BoxLink, job: &Job<'_>) -> Result<Ran, Failed> {
    let (mut channel, _open) = link.exec(&command()).await.map_err(|e| Failed::Cannot(e.to_string()))?;
    (channel.data_bytes(request(job).into_bytes()).await)
        .map_err(|e| Failed::Cannot(format!("box {}: cannot send the command: {e}", link.name())))?;
    let mut out = Kept::new(job.keep);
    let mut err = Kept::new(Keep::First(MAX_STDERR));
    let read = async {
        let mut status = None;
        let mut stopped = false;
        while let Some(msg) = channel.wait().await {
            match msg {
                // Enough: standard input ends, and the script kills the command's group.
                ChannelMsg::Data { data } if !stopped && out.push(&data) => {
                    stopped = true;
                    let _ = channel.eof().await;
                }
                ChannelMsg::ExtendedData { data, ext: 1 } => {
                    err.push(&data);
                }
                ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
                ChannelMsg::Eof if status.is_some() => break,
                ChannelMsg::Close => break,
                _ => {}
            }
        }
        status
    };
    let status = match tokio::time::timeout(job.timeout, read).await {
        Ok(status) => status,
        Err(_) => {
            let _ = channel.eof().await;
            let _ = channel.close().await;
            return Err(Failed::TimedOut);
        }
    };
    let _ = channel.close().await;
    let status = match status {
        Some(0) => Ok(()),
        Some(code) => Err(format!("exit {code}")),
        None => Err(format!(
            "box {}: the command's channel closed without an exit status",
            link.name()
        )),
    };
    let (out, cut) = out.finish();
    let (err, _) = err.finish();
    Ok(Ran { status, out, cut, err })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This script and the server's launch script (`supervise/remote.rs`).
    #[test]
    fn every_box_script_is_one_single_quoted_word() {
        for script in [SCRIPT, super::super::supervise::remote::SCRIPT] {
            assert!(!script.contains('\''), "a quote would end the word");
            assert!(!script.contains('\\'), "fish reads backslashes inside quotes");
        }
    }

    /// The script as sshd would run it, here: arguments with quotes, `$`, spaces and a newline
    /// reach the command as they were, and the environment named is set.
    #[tokio::test]
    async fn arguments_reach_the_command_unparsed() {
        use tokio::io::AsyncWriteExt;
        let dir = tempfile::tempdir().unwrap();
        let odd = "a 'b' \"c\" $(touch pwned) `x`\nline two; rm -rf /";
        let args = [
            std::ffi::OsStr::new("-c"),
            "printf '%s|%s' \"$1\" \"$WHO\"".as_ref(),
            "sh".as_ref(),
            odd.as_ref(),
        ];
        let job = Job {
            dir: dir.path(),
            program: "sh",
            args: &args,
            env: &[("WHO", "me too".as_ref())],
            keep: Keep::Head(4096),
            timeout: std::time::Duration::from_secs(10),
        };
        let mut child = tokio::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(command())
            .current_dir("/")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(request(&job).as_bytes()).await.unwrap();
        let out = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        drop(stdin);
        assert!(out.status.success(), "{out:?}");
        // `$(...)` in a value is kept as text (base64 -d strips only trailing newlines).
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{odd}|me too"));
        assert!(!dir.path().join("pwned").exists() && !std::path::Path::new("/pwned").exists());
    }
}
