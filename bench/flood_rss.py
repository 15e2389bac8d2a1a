#!/usr/bin/env python3
"""The gateway's resident memory before, at the peak of and after a flood of silent TLS
connections (issue 21, C). Loopback only; a benchmark, not a test: it prints figures and
asserts nothing.

Starts GATEWAY_BIN (default target/release/opencode-gateway) on a throwaway config, reads
VmRSS from /proc/<pid>/status, opens FLOOD connections (default 10000) from ADDRESSES loopback
addresses (default 96, 127.0.5.1 …), each completing its TLS handshake and then sending
nothing, and holds them until the gateway closes them (request_head_timeout, HEAD_TIMEOUT,
default 10s). Then it waits AFTER seconds (default 60) and reads VmRSS again.
"""

import asyncio
import os
import re
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BIN = os.environ.get("GATEWAY_BIN", "target/release/opencode-gateway")
FLOOD = int(os.environ.get("FLOOD", "10000"))
ADDRESSES = int(os.environ.get("ADDRESSES", "96"))
HEAD_TIMEOUT = os.environ.get("HEAD_TIMEOUT", "10s")
AFTER = float(os.environ.get("AFTER", "60"))
# Handshakes in flight at once (the client's own bound, so it does not time itself out).
PARALLEL = int(os.environ.get("PARALLEL", "256"))
# A folder to keep /proc/<pid>/smaps in, before the flood and after AFTER: which mappings hold
# the memory that stays.
SMAPS_DIR = os.environ.get("SMAPS_DIR")


def keep_smaps(pid, name):
    if SMAPS_DIR:
        os.makedirs(SMAPS_DIR, exist_ok=True)
        with open(f"/proc/{pid}/smaps") as f, open(os.path.join(SMAPS_DIR, name), "w") as out:
            out.write(f.read())


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def mib(kib):
    return f"{kib / 1024:.1f} MiB"


def metric(admin, name):
    body = urllib.request.urlopen(f"http://{admin}/metrics", timeout=5).read().decode()
    for line in body.splitlines():
        if line.startswith(f"opencode_gateway_{name} ") or line.startswith(f"opencode_gateway_{name}{{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def start(folder):
    with open(os.path.join(folder, "pw"), "w") as f:
        f.write("flood-upstream-pw")
    os.chmod(os.path.join(folder, "pw"), 0o600)
    config = os.path.join(folder, "gateway.toml")
    with open(config, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:0"
state_dir = "state"

[tls]
cert = "certs/server.crt"
key = "certs/server.key"
dev_ca = true

[admin]
listen = "127.0.0.1:0"

[limits]
request_head_timeout = "{HEAD_TIMEOUT}"
max_connections_per_ip = {FLOOD // ADDRESSES + 16}

[[project]]
name = "web"
upstream = "http://127.0.0.1:9"
upstream_password_file = "pw"
""")
    proc = subprocess.Popen([BIN, "serve", "-c", config], cwd=folder, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "RUST_LOG": "info"})
    deadline = time.time() + 60
    for line in proc.stderr:
        if "gateway ready" in line:
            https = re.search(r"https=(\S+)", line).group(1)
            admin = re.search(r"admin=(\S+)", line).group(1)
            # Keep draining the log so the gateway never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, https, admin
        if time.time() > deadline:
            break
    proc.kill()
    sys.exit("the gateway did not say it was ready")


async def flood(https):
    host, port = https.rsplit(":", 1)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    gate = asyncio.Semaphore(PARALLEL)
    counts = {"connected": 0, "failed": 0}

    async def one(i):
        source = f"127.0.5.{1 + i % ADDRESSES}"
        async with gate:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, int(port), ssl=ctx, server_hostname="localhost",
                                            local_addr=(source, 0)), 30)
            except Exception:
                counts["failed"] += 1
                return
        counts["connected"] += 1
        try:
            # Silent: wait for the gateway to close it.
            await asyncio.wait_for(reader.read(), 600)
        except Exception:
            pass
        writer.close()

    await asyncio.gather(*(one(i) for i in range(FLOOD)))
    return counts


def main():
    with tempfile.TemporaryDirectory() as folder:
        proc, https, admin = start(folder)
        try:
            time.sleep(2)
            before = rss_kib(proc.pid)
            keep_smaps(proc.pid, "before")
            peak = [before]
            done = threading.Event()

            def sample():
                while not done.is_set():
                    peak[0] = max(peak[0], rss_kib(proc.pid))
                    time.sleep(0.2)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            started = time.time()
            counts = asyncio.run(flood(https))
            closed_at = time.time()
            # Every flood connection is gone (the gateway's own count).
            while (metric(admin, "connections_open") or 0) > 0 and time.time() < closed_at + 60:
                time.sleep(0.2)
            done.set()
            sampler.join()
            at_close = rss_kib(proc.pid)
            time.sleep(AFTER)
            after = rss_kib(proc.pid)
            keep_smaps(proc.pid, "after")
            print(f"flood: {FLOOD} silent TLS connections from {ADDRESSES} addresses; "
                  f"{counts['connected']} completed the handshake, {counts['failed']} refused or failed; "
                  f"{closed_at - started:.1f} s until the gateway had closed them all")
            print(f"shed: {metric(admin, 'connections_shed_total')}, cap: {metric(admin, 'connections_cap')}")
            print(f"VmRSS before: {mib(before)}  peak: {mib(peak[0])}  all closed: {mib(at_close)}  "
                  f"{AFTER:.0f} s later: {mib(after)}")
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
