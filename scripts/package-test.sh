#!/usr/bin/env bash
# The Debian package, installed for real: builds it (scripts/deb.sh) and a rebuild with a higher
# revision, installs it into a clean Debian 12 (bookworm) root made by debootstrap (cached as a
# tarball under target/package-test/, so a second run skips the download), and checks inside that
# root: files, owners and modes; the user; `check` on the shipped config; `systemd-analyze verify`
# on the unit; the man page; bash completion; `init --system` for a project folder a second OS
# user owns; the gateway started as root and reached with curl; that project's real OpenCode
# server (this checkout's node_modules binary, copied in) running as that user, whose shell
# through the gateway can read none of the gateway's files nor use its control socket; a second
# gateway user refused for a project without run_as; an upgrade from the earlier layout (the
# state the service user's) and one keeping an edited config; remove keeping config and state;
# purge deleting them. No systemd runs in a chroot: what the maintainer scripts ask of systemctl
# (nothing on install, try-restart on upgrade, stop on remove) is recorded by a stand-in and
# checked; that try-restart restarts only a running unit is systemd's documented behaviour, not
# tested here. Any failed check stops the script with "FAIL: <what and why>".
# Needs root (debootstrap, chroot) and Debian's mirror. Slow (minutes): not part of CI or
# scripts/test.sh; docs/package.md records its last run.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)

WORK=target/package-test
ROOT=$WORK/root
MIRROR=${MIRROR:-http://deb.debian.org/debian}
# What the checks use inside the root; the package's own dependencies are not asked for: apt
# must bring what the root lacks (procps) from the mirror when it installs the package.
INCLUDE=systemd,man-db,bash-completion,curl,ca-certificates
CACHE=$WORK/bookworm-$(printf %s "$INCLUDE" | sha256sum | cut -c1-12).tar.gz
NAME=opencode-gateway
passed=0

fail() {
  printf '\nFAIL: %s\n' "$*" >&2
  exit 1
}
ok() {
  passed=$((passed + 1))
  printf 'ok   %s\n' "$*"
}
step() { printf '\n==> %s\n' "$*"; }
# A command inside the root, as root, with a clean environment.
in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
# A dpkg or apt command as in a booted system: /run/systemd/system present, and a stand-in
# systemctl that only records what the maintainer scripts ask of it (no systemd runs in a chroot).
in_pkg() {
  local rc=0
  mkdir -p "$ROOT/run/systemd/system"
  # apt runs dpkg with a PATH of its own (DPkg::Path): the stand-in goes first in both.
  chroot "$ROOT" /usr/bin/env -i PATH=/opt/stub:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@" || rc=$?
  rmdir "$ROOT/run/systemd/system"
  return $rc
}
# What the maintainer scripts asked systemctl about the unit since the last call.
unit_calls() {
  grep -h "$NAME" "$ROOT/tmp/systemctl.calls" 2>/dev/null | tr '\n' ';' || true
  : >"$ROOT/tmp/systemctl.calls"
}
# "owner:group mode" of a path inside the root.
stat_of() { in_root stat -c '%U:%G %a' "$1" 2>/dev/null || echo "missing"; }
expect_stat() {
  local got
  got=$(stat_of "$1")
  [ "$got" = "$2" ] || fail "$1 is $got, want $2"
  ok "$1 $2"
}

# The installed gateway as the unit starts it (root), from the installed config; sets gateway_pid
# and port.
start_gateway() {
  chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \
    /usr/bin/$NAME serve -c /etc/$NAME/gateway.toml >"$WORK/serve.log" 2>&1 &
  gateway_pid=$!
  port=
  for _ in $(seq 1 100); do
    port=$(sed -n -E 's/.*gateway ready.* https=127\.0\.0\.1:([0-9]+).*/\1/p' "$WORK/serve.log" | head -1)
    [ -n "$port" ] && break
    kill -0 "$gateway_pid" 2>/dev/null || fail "the gateway exited: $(cat "$WORK/serve.log")"
    sleep 0.1
  done
  [ -n "$port" ] || fail "the gateway did not say ready in 10 s: $(cat "$WORK/serve.log")"
}

[ "$(id -u)" = 0 ] || fail "needs root (debootstrap and chroot)"
mkdir -p "$WORK"

step "the packages: revision 1, and a rebuild as revision 2 for the upgrade"
# REUSE=1 takes the packages the last run built (a check of the script itself, not of a change).
if [ "${REUSE:-0}" = 1 ] && [ -f "$WORK/v1.deb" ] && [ -f "$WORK/v2.deb" ]; then
  echo "REUSE=1: the packages of the last run"
else
  scripts/deb.sh --deb-revision 1 -o "$WORK/v1.deb"
  scripts/deb.sh --deb-revision 2 -o "$WORK/v2.deb"
fi
version=$(dpkg-deb -f "$WORK/v1.deb" Version)
arch=$(dpkg-deb -f "$WORK/v1.deb" Architecture)
[ "$arch" = "$(dpkg --print-architecture)" ] || fail "the package is for $arch, this machine is $(dpkg --print-architecture)"
dpkg --compare-versions "$(dpkg-deb -f "$WORK/v2.deb" Version)" gt "$version" || fail "the rebuild's version is not higher"
ok "built $NAME $version ($arch) and its rebuild $(dpkg-deb -f "$WORK/v2.deb" Version)"
rm -rf "$WORK/unpacked" && dpkg-deb -x "$WORK/v1.deb" "$WORK/unpacked"
if readelf -S "$WORK/unpacked/usr/bin/$NAME" | grep -qE '\.debug_|\.symtab'; then
  fail "the packaged binary still has debug sections or a symbol table"
fi
ok "the packaged binary is stripped ($(stat -c %s "$WORK/unpacked/usr/bin/$NAME") bytes)"

step "a clean Debian 12 root"
if [ ! -f "$CACHE" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
  rm -rf "$WORK/fresh"
  debootstrap --variant=minbase --include="$INCLUDE" bookworm "$WORK/fresh" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    fail "debootstrap of bookworm from $MIRROR failed (no network to the mirror?): see $WORK/debootstrap.log"
  tar -C "$WORK/fresh" -czf "$CACHE.tmp" . && mv "$CACHE.tmp" "$CACHE"
  rm -rf "$WORK/fresh"
fi
if mountpoint -q "$ROOT/proc" 2>/dev/null; then umount "$ROOT/proc"; fi
rm -rf "$ROOT" && mkdir -p "$ROOT" && tar -C "$ROOT" -xzf "$CACHE"
root_size=$(du -sh "$ROOT" | cut -f1)
mount -t proc proc "$ROOT/proc"
gateway_pid=
cleanup() {
  if [ -n "$gateway_pid" ]; then kill "$gateway_pid" 2>/dev/null || true; fi
  umount "$ROOT/proc" 2>/dev/null || true
}
trap cleanup EXIT
[ "$(in_root sh -c '. /etc/os-release; echo $VERSION_CODENAME')" = bookworm ] || fail "the root is not bookworm"
in_root dpkg -s "$NAME" >/dev/null 2>&1 && fail "the fresh root already has $NAME"
ok "a fresh bookworm root ($root_size) from $CACHE"

step "install revision 1"
cp "$WORK/v1.deb" "$WORK/v2.deb" "$ROOT/tmp/"
mkdir -p "$ROOT/opt/stub"
# It records each call; `is-active` answers "inactive" (3), as for a unit that is not running.
printf '#!/bin/sh\necho "$*" >>/tmp/systemctl.calls\n[ "$1" != is-active ] || exit 3\n' >"$ROOT/opt/stub/systemctl"
chmod 755 "$ROOT/opt/stub/systemctl"
# procps (the unit's /bin/kill) is not in a minimal root: apt must bring it (adduser already is).
in_root dpkg -s procps >/dev/null 2>&1 && fail "the fresh root already has procps: the dependency would go untested"
in_root apt-get update -qq || fail "apt-get update in the root failed (no network to the mirror?)"
in_pkg apt-get install -y -qq -o DPkg::Path=/opt/stub:/usr/sbin:/usr/bin:/sbin:/bin /tmp/v1.deb || fail "apt-get install refused the package"
grep -qx daemon-reload "$ROOT/tmp/systemctl.calls" || fail "the stand-in systemctl heard nothing: the maintainer scripts' calls would go unchecked"
calls=$(unit_calls)
grep -qE "(^|;)(start|restart|try-restart|enable)[^;]*$NAME" <<<"$calls" && fail "the first install asked systemctl: $calls"
in_root dpkg -s adduser procps >/dev/null 2>&1 || fail "the package's dependencies were not installed"
ok "apt-get install installed it and its dependency procps, and neither enabled nor started it"
in_root getent passwd "$NAME" | grep -q ":/var/lib/$NAME/home:/usr/sbin/nologin$" || fail "no system user $NAME with home /var/lib/$NAME/home and no shell: $(in_root getent passwd "$NAME")"
in_root getent group "$NAME" >/dev/null || fail "no group $NAME"
ok "the system user and group $NAME"
expect_stat /usr/bin/$NAME "root:root 755"
expect_stat /lib/systemd/system/$NAME.service "root:root 644"
expect_stat /etc/$NAME "root:root 750"
expect_stat /etc/$NAME/gateway.toml "root:root 640"
expect_stat /etc/$NAME/gateway.users.toml "root:root 600"
expect_stat /var/lib/$NAME "root:root 711"
expect_stat /var/lib/$NAME/home "$NAME:$NAME 700"
expect_stat /usr/share/bash-completion/completions/$NAME "root:root 644"
expect_stat /usr/share/zsh/vendor-completions/_$NAME "root:root 644"
expect_stat /usr/share/fish/vendor_completions.d/$NAME.fish "root:root 644"
expect_stat /usr/share/man/man1/$NAME.1.gz "root:root 644"
in_root dpkg-query -W -f='${Conffiles}\n' "$NAME" | grep -q "/etc/$NAME/gateway.toml" || fail "gateway.toml is not a conffile"
ok "/etc/$NAME/gateway.toml is a conffile"

step "the installed program"
said=$(in_root $NAME --version)
grep -qE "^$NAME ${version%-*} \(commit ([0-9a-f]{7,}|unknown); route table of OpenCode [0-9.]+\)$" <<<"$said" || fail "--version said: $said"
ok "--version: $said"
said=$(in_root $NAME check -c /etc/$NAME/gateway.toml 2>&1) || fail "check refused the shipped config: $said"
ok "check accepts the shipped config"
said=$(in_root /usr/bin/$NAME serve -c /etc/$NAME/gateway.toml 2>&1) && fail "serve started on the shipped example: $said"
grep -q "nothing to serve" <<<"$said" || fail "serve on the example failed otherwise: $said"
ok "serve refuses the unedited example: nothing to serve"
said=$(in_root systemd-analyze verify /lib/systemd/system/$NAME.service 2>&1) || fail "systemd-analyze verify: $said"
[ -z "$said" ] || fail "systemd-analyze verify said: $said"
ok "systemd-analyze verify passes the unit, silently"
# is-enabled exits 1 for "disabled": its word is what counts.
said=$(in_root systemctl is-enabled $NAME.service 2>&1 || true)
[ "$said" = disabled ] || fail "the unit is not installed disabled: $said"
ok "the unit is installed, not enabled"
said=$(in_root sh -c "MANPAGER=cat MANWIDTH=100 man $NAME 2>&1") || fail "man $NAME: $said"
grep -q "opencode-gateway-token" <<<"$said" || fail "man $NAME does not list token: $said"
ok "man $NAME renders ($(wc -l <<<"$said") lines)"
said=$(in_root sh -c "MANPAGER=cat MANWIDTH=100 man $NAME-token-create 2>&1") || fail "man $NAME-token-create: $said"
grep -q -- "--ttl" <<<"$said" || fail "man $NAME-token-create does not describe --ttl: $said"
ok "man $NAME-token-create renders (one page per subcommand: $(ls "$ROOT/usr/share/man/man1" | grep -c "^$NAME"))"
said=$(in_root bash -c '. /usr/share/bash-completion/bash_completion
  _completion_loader opencode-gateway
  f=$(complete -p opencode-gateway | sed -E "s/.*-F ([^ ]+).*/\1/")
  COMP_WORDS=(opencode-gateway to); COMP_CWORD=1; COMP_LINE="opencode-gateway to"; COMP_POINT=${#COMP_LINE}
  "$f" opencode-gateway to opencode-gateway; printf "%s\n" "${COMPREPLY[@]}"')
[ "$said" = token ] || fail "bash completion of 'opencode-gateway to' gave: $said"
ok "bash completes 'opencode-gateway to' to 'token'"

step "init --system for a folder a second OS user owns, then the gateway as root, reached with curl"
in_root useradd --create-home --shell /bin/sh alice || fail "useradd alice in the root"
in_root install -d -o alice -g alice /srv/demo
# The project's real OpenCode server: this checkout's binary (npm opencode-ai, a Bun executable).
opencode_bin=$(readlink -f node_modules/.bin/opencode 2>/dev/null || true)
[ -x "$opencode_bin" ] || fail "no node_modules/.bin/opencode: run scripts/npm-deps.sh first"
install -m 0755 "$opencode_bin" "$ROOT/usr/local/bin/opencode"
said=$(in_root $NAME init --system --project-dir /srv/demo 2>&1) || fail "init --system: $said"
password=$(sed -n 's/^user "dev", password: //p' <<<"$said")
[ -n "$password" ] || fail "init --system printed no password: $said"
grep -q 'project demo runs as the OS user alice, never as root' <<<"$said" || fail "init --system did not say who the project runs as: $said"
grep -qx 'run_as = "alice".*' "$ROOT/etc/$NAME/gateway.toml" || fail "the config does not run the project as alice: $(cat "$ROOT/etc/$NAME/gateway.toml")"
expect_stat /etc/$NAME/gateway.toml "root:root 640"
expect_stat /etc/$NAME/gateway.users.toml "root:root 600"
expect_stat /var/lib/$NAME/certs/server.key "root:root 600"
expect_stat /var/lib/$NAME/certs/ca.key "root:root 600"
expect_stat /var/lib/$NAME "root:root 711"
said=$(in_root $NAME init --system --project-dir /srv/demo 2>&1) && fail "a second init --system overwrote the config"
grep -q "not the packaged example" <<<"$said" || fail "a second init --system failed otherwise: $said"
ok "init --system replaced the example (the project as alice, every secret root's), and refuses to overwrite its own config"
# Ephemeral ports: the root shares this machine's network. The SSH door is not needed here.
sed -i -E 's/^listen = "127\.0\.0\.1:[0-9]+"/listen = "127.0.0.1:0"/' "$ROOT/etc/$NAME/gateway.toml"
echo "# edited by package-test.sh" >>"$ROOT/etc/$NAME/gateway.toml"
in_root $NAME check -c /etc/$NAME/gateway.toml >/dev/null 2>&1 || fail "check refused the edited config: $(in_root $NAME check -c /etc/$NAME/gateway.toml 2>&1)"
start_gateway
[ "$(stat -c %u "/proc/$gateway_pid")" = 0 ] || fail "the gateway does not run as root"
ok "serve runs as root from the installed config (https on 127.0.0.1:$port)"
url=https://127.0.0.1:$port/p/demo/global/health
ca=/var/lib/$NAME/certs/ca.crt
code=$(in_root curl -s -o /dev/null -w '%{http_code}' --cacert $ca "$url")
[ "$code" = 401 ] || fail "curl without a password got $code from $url, want 401"
# The project's server starts (first request waits for it) as alice.
code=000
for _ in $(seq 1 60); do
  code=$(in_root curl -s -o /tmp/answer -w '%{http_code}' --cacert $ca -u "dev:$password" "$url")
  [ "$code" = 200 ] && break
  sleep 1
done
[ "$code" = 200 ] || fail "curl as dev got $code from $url, want 200 from the project's OpenCode: $(cat "$ROOT/tmp/answer"); $(tail -5 "$WORK/serve.log")"
server_pid=$(pgrep -f '/usr/local/bin/opencode serve' | head -1)
[ -n "$server_pid" ] || fail "no opencode serve process"
[ "$(stat -c %u "/proc/$server_pid")" = "$(in_root id -u alice)" ] || fail "the project's server runs as uid $(stat -c %u "/proc/$server_pid"), not alice's"
ok "curl through the dev CA: 401 without a password, 200 as dev from the project's OpenCode, which runs as alice"
grep -qF "$password" "$WORK/serve.log" && fail "the gateway's log holds dev's password"
ok "the log holds no password"

step "the project's shell cannot reach the gateway's files or its control socket"
api() { in_root curl -s --cacert $ca -u "dev:$password" -H 'content-type: application/json' -H "Origin: https://127.0.0.1:$port" "$@"; }
session=$(api -X POST -d '{}' "https://127.0.0.1:$port/p/demo/session" | sed -n 's/.*"id":"\(ses_[A-Za-z0-9]*\)".*/\1/p')
[ -n "$session" ] || fail "no session made through the gateway"
probe='id -un; cat /etc/opencode-gateway/gateway.users.toml >/dev/null 2>&1 && echo READ-users || echo refused-users; cat /var/lib/opencode-gateway/certs/ca.key >/dev/null 2>&1 && echo READ-ca-key || echo refused-ca-key; cat /var/lib/opencode-gateway/gateway.db >/dev/null 2>&1 && echo READ-database || echo refused-database; ls /var/lib/opencode-gateway >/dev/null 2>&1 && echo LISTED-state || echo refused-listing; curl -s --max-time 5 --unix-socket /var/lib/opencode-gateway/control/gateway.sock http://gw/status >/dev/null 2>&1 && echo CONTROL-answered || echo refused-control'
body=$(python3 -c 'import json, sys; print(json.dumps({"agent": "build", "command": sys.argv[1]}))' "$probe")
api -X POST -d "$body" "https://127.0.0.1:$port/p/demo/session/$session/shell" >"$WORK/shell.json"
messages=$(api "https://127.0.0.1:$port/p/demo/session/$session/message")
# The shell's output only (the command itself, echoed in the tool's input, names the words too).
out=$(python3 -c 'import json, sys; print("\n".join(p["state"].get("output", "") for m in json.load(sys.stdin) for p in m["parts"] if p.get("type") == "tool"))' <<<"$messages") || fail "the session's messages are not JSON: $(head -c 500 <<<"$messages")"
for want in "alice" refused-users refused-ca-key refused-database refused-listing refused-control; do
  grep -qF "$want" <<<"$out" || fail "the shell's output lacks \"$want\": $(head -c 2000 <<<"$out") (shell answered: $(head -c 500 "$WORK/shell.json"))"
done
grep -qE "READ-|LISTED-|CONTROL-answered" <<<"$out" && fail "the project's shell reached the gateway's files: $(head -c 2000 <<<"$out")"
ok "an operator's shell in the project runs as alice and reads none of the users file, CA key, state database or state folder, nor talks to the control socket"
kill "$gateway_pid" && wait "$gateway_pid" 2>/dev/null || true
gateway_pid=
in_root sh -c "echo token-db-marker > /var/lib/$NAME/marker"

step "a second gateway user, a project without run_as: refused"
cp "$ROOT/etc/$NAME/gateway.toml" "$WORK/gateway.toml.kept"
sed -i '/^run_as = /d' "$ROOT/etc/$NAME/gateway.toml"
said=$(printf 'bob-password-of-the-package-test\n' | in_root $NAME user add bob --projects demo --role viewer -c /etc/$NAME/gateway.toml 2>&1) && fail "user add bob let a second user in beside a project as root: $said"
grep -q "project demo.run_as" <<<"$said" || fail "user add bob refused otherwise: $said"
ok "user add refuses a second user while a project would run as root"
cp "$WORK/gateway.toml.kept" "$ROOT/etc/$NAME/gateway.toml"
printf 'bob-password-of-the-package-test\n' | in_root $NAME user add bob --projects demo --role viewer -c /etc/$NAME/gateway.toml >/dev/null 2>&1 || fail "user add bob beside a project with run_as: $(printf 'x\n' | in_root $NAME check -c /etc/$NAME/gateway.toml 2>&1)"
sed -i '/^run_as = /d' "$ROOT/etc/$NAME/gateway.toml"
said=$(in_root $NAME check -c /etc/$NAME/gateway.toml 2>&1) && fail "check accepted a project as root with two users: $said"
grep -q "project demo.run_as: it would run as the gateway's own OS user (root, uid 0)" <<<"$said" || fail "check refused it otherwise: $said"
said=$(in_root $NAME serve -c /etc/$NAME/gateway.toml 2>&1) && fail "serve started it: $said"
grep -q "project demo.run_as" <<<"$said" || fail "serve refused it otherwise: $said"
ok "check and serve refuse a project without run_as once two users can reach the gateway"
cp "$WORK/gateway.toml.kept" "$ROOT/etc/$NAME/gateway.toml"
printf 'y\n' | in_root $NAME user remove bob -c /etc/$NAME/gateway.toml >/dev/null 2>&1 || fail "user remove bob"

step "upgrade to revision 2, from the earlier layout (the state the service user's)"
# What a version before hostile round five left: the state, the users file and the overrides the
# service user's and group's, its home the state itself.
in_root chown -R $NAME:$NAME /var/lib/$NAME /etc/$NAME/gateway.users.toml
in_root chmod 0700 /var/lib/$NAME
in_root usermod --home /var/lib/$NAME $NAME
for o in "root $NAME 0750 /etc/$NAME" "root $NAME 0640 /etc/$NAME/gateway.toml"; do
  in_root dpkg-statoverride --remove "${o##* }"
  in_root dpkg-statoverride --update --add $o
done
edited=$(sha256sum "$ROOT/etc/$NAME/gateway.toml")
in_pkg apt-get install -y -qq -o DPkg::Path=/opt/stub:/usr/sbin:/usr/bin:/sbin:/bin -o Dpkg::Options::=--force-confold /tmp/v2.deb || fail "the upgrade failed"
calls=$(unit_calls)
# Moving the earlier layout's home asks whether the unit runs (it does not): then try-restart.
[ "$calls" = "is-active --quiet $NAME.service;try-restart $NAME.service;" ] || fail "the upgrade asked systemctl: $calls (want is-active, then only try-restart: a restart of a running service only)"
ok "the upgrade asked systemctl only to try-restart the unit (which starts nothing that was not running)"
[ "$(in_root dpkg-query -W -f='${Version}' $NAME)" = "$(dpkg-deb -f "$WORK/v2.deb" Version)" ] || fail "the upgrade did not install revision 2"
[ "$(sha256sum "$ROOT/etc/$NAME/gateway.toml")" = "$edited" ] || fail "the upgrade changed the edited config"
expect_stat /etc/$NAME/gateway.toml "root:root 640"
ok "the upgrade kept the edited config"
expect_stat /etc/$NAME "root:root 750"
expect_stat /etc/$NAME/gateway.users.toml "root:root 600"
expect_stat /var/lib/$NAME "root:root 711"
expect_stat /var/lib/$NAME/certs/ca.key "root:root 600"
expect_stat /var/lib/$NAME/home "$NAME:$NAME 700"
in_root getent passwd "$NAME" | grep -q ":/var/lib/$NAME/home:" || fail "the upgrade did not move $NAME's home: $(in_root getent passwd "$NAME")"
ok "the upgrade moved the earlier layout's state, users file and overrides to root, and the projects' user's home to its own folder"

step "remove, then purge"
in_pkg dpkg -r $NAME || fail "dpkg -r failed"
calls=$(unit_calls)
[ "$calls" = "stop $NAME.service;" ] || fail "remove asked systemctl: $calls (want: stop)"
[ ! -e "$ROOT/usr/bin/$NAME" ] || fail "remove left the binary"
[ -f "$ROOT/etc/$NAME/gateway.toml" ] || fail "remove deleted the config"
[ -f "$ROOT/var/lib/$NAME/marker" ] || fail "remove deleted the state"
ok "remove stopped the unit and kept /etc/$NAME and /var/lib/$NAME"
in_pkg dpkg -P $NAME || fail "dpkg -P failed"
[ ! -e "$ROOT/etc/$NAME" ] || fail "purge left /etc/$NAME: $(ls -la "$ROOT/etc/$NAME")"
[ ! -e "$ROOT/var/lib/$NAME" ] || fail "purge left /var/lib/$NAME"
[ -z "$(in_root dpkg-statoverride --list | grep $NAME || true)" ] || fail "purge left dpkg-statoverride entries"
ok "purge deleted the config, the state and the owner overrides"

step "the user's path, timed: dpkg -i to a paired phone (curl as the phone)"
ms() { echo $(($(date +%s%N) / 1000000)); }
t_path=$(ms)
in_pkg dpkg -i /tmp/v2.deb >/dev/null || fail "dpkg -i of the package failed"
t_installed=$(ms)
said=$(in_root $NAME init --system --project-dir /srv/demo 2>&1) || fail "init --system after purge: $said"
sed -i -E 's/^listen = "127\.0\.0\.1:[0-9]+"/listen = "127.0.0.1:0"/' "$ROOT/etc/$NAME/gateway.toml"
start_gateway
t_serving=$(ms)
said=$(in_root /usr/bin/$NAME pair dev -c /etc/$NAME/gateway.toml 2>&1) || fail "pair dev: $said"
pair_code=$(grep -oE '^ +[A-Z2-9]{4}-[A-Z2-9]{4}-[A-Z2-9]{4} *$' <<<"$said" | tr -d ' ')
[ -n "$pair_code" ] || fail "pair printed no code: $said"
grep -q '[▀▄█]' <<<"$said" || fail "pair printed no QR code: $said"
t_code=$(ms)
# The phone opens the page pair printed (its login host, resolved to this machine), posts the
# code as the page's form does (same origin), and keeps the cookie.
origin=$(grep -oE 'open https://[^/ ]+' <<<"$said" | head -1 | cut -c6-)
[ -n "$origin" ] || fail "pair printed no page to open: $said"
authority=${origin#https://}
resolve=(--resolve "${authority%:*}:$port:127.0.0.1")
origin="https://${authority%:*}:$port"
code=$(in_root curl -s "${resolve[@]}" -o /tmp/paired -w '%{http_code}' --cacert $ca -c /tmp/jar -H "Origin: $origin" \
  -H 'Sec-Fetch-Site: same-origin' --data-urlencode "code=$pair_code" "$origin/pair")
[ "$code" = 303 ] || fail "posting the pairing code to $origin/pair got $code: $(cat "$ROOT/tmp/paired")"
page=$(in_root curl -s "${resolve[@]}" --cacert $ca -b /tmp/jar -H 'Accept: text/html' "$origin/?done=paired")
grep -q "This device is paired" <<<"$page" || fail "the portal after pairing does not say the device is paired: $(head -c 300 <<<"$page")"
t_paired=$(ms)
ok "dpkg -i to a paired phone in $((t_paired - t_path)) ms: dpkg -i $((t_installed - t_path)), init --system and serve ready $((t_serving - t_installed)), pair $((t_code - t_serving)), the phone's post and its portal $((t_paired - t_code))"
kill "$gateway_pid" && wait "$gateway_pid" 2>/dev/null || true
gateway_pid=

printf '\npackage-test: %d passed, 0 failed in %d s\n' "$passed" "$(($(date +%s) - t0))"
