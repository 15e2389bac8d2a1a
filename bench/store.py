#!/usr/bin/env python3
"""The state database's cost (issue 27): one gateway on SQLite and one on PostgreSQL, side by side
in front of the stand-in upstream, in interleaved rounds. Run by bench/store.sh (which installs
and builds what it needs); writes bench/out/store.md.

- Keep-alive requests with Basic credentials (wrk -t1 -c32): req/s, p50, p99, the gateway's CPU
  per request. A verified credential is cached in memory, so neither store should be asked.
- Form logins (wrk -t1 -c8, POST /login with the right password): logins per second and p99.
  The password is verified once and cached; each login then writes a browser session, so this
  is the store's write path.

PostgreSQL is a throwaway cluster (Debian's initdb/pg_ctl) on a Unix socket in a temporary
folder, with its default durability (fsync and synchronous_commit on); SQLite runs as the
gateway configures it (WAL, synchronous=NORMAL).

BEFORE=path/to/an/older/opencode-gateway adds a third gateway, that binary on PostgreSQL (a
database of its own on the same cluster), in the same rounds: a change's before and after are
then measured side by side, each as a ratio to SQLite in the same run (issue 43).
"""

import os, re, shutil, subprocess, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as b  # noqa: E402

LOGIN_LUA = """
wrk.method = "POST"
wrk.body = "user=bench&password=bench-password-1&next=/"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.headers["Origin"] = os.getenv("ORIGIN")
wrk.headers["Sec-Fetch-Site"] = "same-origin"
"""


class Cluster:
    """initdb + pg_ctl in a temporary folder, as `postgres` when run as root."""

    def __init__(self):
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if not bins:
            raise SystemExit("PostgreSQL is not installed (bench/store.sh installs it)")
        self.bin = bins[-1].parent
        self.dir = Path(tempfile.mkdtemp(prefix="ocgw-bench-pg-"))
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        data = self.dir / "data"
        self.run("initdb", "-A", "trust", "-U", "ocgw", "-D", str(data))
        opts = f"-k {self.dir} -c listen_addresses=''"
        self.run("pg_ctl", "-w", "-t", "60", "-l", str(self.dir / "log"), "-o", opts, "start", "-D", str(data))
        self.run("createdb", "-h", str(self.dir), "-U", "ocgw", "gateway")
        self.run("createdb", "-h", str(self.dir), "-U", "ocgw", "gateway_before")
        self.url = f"postgresql://ocgw@localhost/gateway?host={self.dir}"
        self.url_before = f"postgresql://ocgw@localhost/gateway_before?host={self.dir}"

    def run(self, program, *args):
        cmd = [str(self.bin / program), *args]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True)

    def stop(self):
        self.run("pg_ctl", "-w", "stop", "-m", "fast", "-D", str(self.dir / "data"))
        shutil.rmtree(self.dir, ignore_errors=True)


def login_wrk(url):
    script = b.OUT / "login.lua"
    script.write_text(LOGIN_LUA)
    text = subprocess.run(["wrk", "-t1", "-c8", "-d", b.DURATION, "--latency", "-s", str(script), url + "/login"],
                          check=True, capture_output=True, text=True, env=dict(os.environ, ORIGIN=url)).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    unit = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    m = re.search(r"\s99%\s+([\d.]+)(us|ms|s)", text)
    return rps, float(m.group(1)) * unit[m.group(2)], int(bad.group(1)) if bad else 0


def main():
    certs = b.setup()
    before = os.environ.get("BEFORE")
    ports = {n: b.free_port() for n in ("upstream", "gateway", "gateway_pg", "gateway_before")}
    cluster = Cluster()
    (b.OUT / "gateway.toml").write_text(b.gateway_config(ports["gateway"], ports["upstream"]))
    (b.OUT / "gateway-pg.toml").write_text(
        b.gateway_config(ports["gateway_pg"], ports["upstream"], "state-pg", f'[store]\nurl = "{cluster.url}"\n'))
    (b.OUT / "gateway-before.toml").write_text(b.gateway_config(
        ports["gateway_before"], ports["upstream"], "state-pg-before", f'[store]\nurl = "{cluster.url_before}"\n'))
    upstream = subprocess.Popen([str(b.TOOLS / "upstream"), str(ports["upstream"])], stdout=subprocess.DEVNULL)
    b.wait_port(ports["upstream"], upstream)
    env = dict(os.environ, RUST_LOG="warn")

    def gateway(name, toml, port, binary=b.GW):
        return b.Proxy(name, lambda: subprocess.Popen([str(binary), "serve", "-c", str(b.OUT / toml)], cwd=b.OUT, env=env,
                                                       stdout=subprocess.DEVNULL, stderr=open(b.OUT / f"{toml}.log", "a")),
                       f"https://127.0.0.1:{port}", port)

    gws = [gateway("SQLite", "gateway.toml", ports["gateway"]).start(),
           gateway("PostgreSQL", "gateway-pg.toml", ports["gateway_pg"]).start()]
    if before:
        gws.append(gateway("PostgreSQL (before)", "gateway-before.toml", ports["gateway_before"], before).start())
    ca = str(certs / "ca.crt")
    results = {g.name: {"rps": [], "p50": [], "p99": [], "cpu": [], "logins": [], "login_p99": []} for g in gws}
    try:
        for g in gws:
            b.warm(g.url, True, ca)
        for r in range(b.ROUNDS):
            for g in gws:
                res = results[g.name]
                b.settle(g.proc)
                c0 = b.cpu_ticks(g.pids())
                reqs, rps, p50, p99, errors = b.wrk(g.url, True)
                c1 = b.cpu_ticks(g.pids())
                if errors:
                    print(f"warning: {g.name}: {errors} non-2xx responses", file=sys.stderr)
                res["rps"].append(rps)
                res["p50"].append(p50)
                res["p99"].append(p99)
                res["cpu"].append((c1 - c0) / b.TICK * 1e6 / max(reqs, 1))
                b.settle(g.proc)
                logins, login_p99, bad = login_wrk(g.url)
                if bad:
                    raise RuntimeError(f"{g.name}: {bad} logins were not answered 303")
                res["logins"].append(logins)
                res["login_p99"].append(login_p99)
                print(f"round {r + 1} {g.name}: {rps:.0f} req/s p50 {p50:.2f} ms p99 {p99:.2f} ms "
                      f"cpu {res['cpu'][-1]:.1f} us/req; {logins:.0f} logins/s p99 {login_p99:.2f} ms", flush=True)
    finally:
        for g in gws:
            g.stop()
        upstream.terminate()
        upstream.wait(10)
        cluster.stop()
    load = os.getloadavg()
    lines = [f"# The state database: SQLite vs PostgreSQL\n\nRun {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
             f"{os.cpu_count()} cores (load after: {load[0]:.2f}); {b.ROUNDS} interleaved rounds of {b.DURATION} each"
             + (f"; PostgreSQL (before) is {before}" if before else "") + ".\n",
             "| store | req/s (median, min..max) | p50 ms | p99 ms (median, min..max) | CPU µs/req | form logins/s (median, min..max) | login p99 ms |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, res in results.items():
        lines.append(f"| {name} | {b.med(res['rps']):.0f} ({b.span(res['rps'])}) | {b.med(res['p50']):.2f} | "
                     f"{b.med(res['p99']):.2f} ({b.span(res['p99'], '{:.2f}')}) | {b.med(res['cpu']):.1f} | "
                     f"{b.med(res['logins']):.0f} ({b.span(res['logins'])}) | {b.med(res['login_p99']):.2f} |")
    s, p = results["SQLite"], results["PostgreSQL"]
    lines.append(f"\nPostgreSQL / SQLite: req/s {b.med(p['rps']) / b.med(s['rps']):.3f}, p99 {b.med(p['p99']) / b.med(s['p99']):.3f}, "
                 f"logins/s {b.med(p['logins']) / b.med(s['logins']):.3f}.")
    if before:
        o = results["PostgreSQL (before)"]
        lines.append(f"PostgreSQL (before) / SQLite: req/s {b.med(o['rps']) / b.med(s['rps']):.3f}, "
                     f"p99 {b.med(o['p99']) / b.med(s['p99']):.3f}, logins/s {b.med(o['logins']) / b.med(s['logins']):.3f}.")
    text = "\n".join(lines) + "\n"
    (b.OUT / "store.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
