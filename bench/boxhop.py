"""The SSH hop to a box (issue 24): a second gateway whose one project is on a "box", a local
OpenSSH server on loopback (its own host key, the bench's client key authorized for forwarding
to loopback only), in front of the same stand-in upstream as every other target. Its figures
next to the direct gateway's are what the hop adds. OpenSSH's sshd runs as whoever runs the
bench (no root needed: a non-root sshd lets in only its own user)."""

import getpass, os, shutil, subprocess, time

NAME = "opencode-gateway → box (SSH hop)"


def start_sshd(out, free_port, wait_port):
    """sshd on a loopback port; returns (process, port, host key line, client key path)."""
    d = out / "box"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    for k in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / k)], check=True)
    public = (d / "client_key.pub").read_text().strip()
    (d / "authorized_keys").write_text(f'restrict,port-forwarding,permitopen="127.0.0.1:*" {public}\n')
    port = free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n"
        f"AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nAllowTcpForwarding local\n"
        "PermitTTY no\nLogLevel ERROR\n")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=open(out / "sshd.log", "a"))
    wait_port(port, sshd)
    host_key = (d / "host_key.pub").read_text().strip()
    return sshd, port, host_key, d / "client_key"


def gateway_config(out, gateway_port, upstream_port, ssh_port, host_key, client_key, phc, user):
    """The bench gateway's config with its one project on the box."""
    (out / "gateway-box.toml").write_text(f"""
[server]
listen = "127.0.0.1:{gateway_port}"
state_dir = "state-box"
[tls]
cert = "certs/server.crt"
key = "certs/server.key"
[limits]
requests_per_second = 1000000
burst = 1000000
max_connections_per_ip = 1000000
max_streams_per_user = 1000000
[[box]]
name = "bench-box"
ssh = "{getpass.getuser()}@127.0.0.1:{ssh_port}"
key = "{client_key}"
host_key = "{host_key}"
[[project]]
name = "bench"
box = "bench-box"
upstream = "http://127.0.0.1:{upstream_port}"
upstream_password_file = "upstream.pw"
[[user]]
name = "{user}"
password_hash = "{phc}"
projects = ["*"]
role = "operator"
""")
    return out / "gateway-box.toml"
