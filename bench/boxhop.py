"""The SSH hop to a box (issue 24): a second gateway whose one project is on a "box", a local
OpenSSH server on loopback (its own host key, the bench's client key authorized for forwarding
to loopback only), in front of the same stand-in upstream as every other target. Its figures
next to the direct gateway's are what the hop adds. OpenSSH's sshd runs as whoever runs the
bench (no root needed: a non-root sshd lets in only its own user)."""

import getpass, os, shutil, subprocess

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
        "PermitTTY no\nLogLevel ERROR\n" + os.environ.get("SSHD_EXTRA", ""))
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=open(out / "sshd.log", "a"))
    wait_port(port, sshd)
    host_key = (d / "host_key.pub").read_text().strip()
    return sshd, port, host_key, d / "client_key"


def gateway_config(out, direct_port, box_port, ssh_port, host_key, client_key):
    """The direct gateway's config (bench.configs wrote it), its one project moved onto the box."""
    direct = (out / "gateway.toml").read_text()
    box = (f'[[box]]\nname = "bench-box"\nssh = "{getpass.getuser()}@127.0.0.1:{ssh_port}"\n'
           f'key = "{client_key}"\nhost_key = "{host_key}"\n')
    text = (direct.replace(f'listen = "127.0.0.1:{direct_port}"', f'listen = "127.0.0.1:{box_port}"', 1)
            .replace('state_dir = "state"', 'state_dir = "state-box"', 1)
            .replace("[[project]]\n", f"{box}[[project]]\n", 1)
            .replace('name = "bench"\n', 'name = "bench"\nbox = "bench-box"\n', 1))
    if "bench-box" not in text or f"127.0.0.1:{box_port}" not in text:
        raise RuntimeError("the direct gateway's config changed shape: bench/boxhop.py cannot move its project")
    (out / "gateway-box.toml").write_text(text)
    return out / "gateway-box.toml"
