#!/usr/bin/env python3
"""Side-by-side benchmark: the gateway against nginx and Caddy in front of the same fast
stand-in upstream, on loopback, in interleaved rounds. Run by bench/run.sh (which installs and
builds what it needs); writes bench/out/results.md.

Every proxy: TLS with the same ECDSA P-256 certificate, the same Basic credentials (except
"nginx, no auth"), a keep-alive upstream pool, no response buffering, no access log, and the
upstream's own credential injected. Figures: req/s, p50/p99 from wrk, and proxy CPU per
request from /proc (utime+stime of the proxy's processes over the run / requests).

A second gateway reaches the same upstream through a project on a box (bench/boxhop.py: a
local sshd on loopback), so the SSH hop's cost shows beside the direct gateway's.

The `webui` section (bench/webui.py) puts the gateway, nginx and Caddy in front of the real
OpenCode instead and times a cold load of its web UI in throttled Chromium (issue 14).
"""

import base64, json, os, re, resource, shutil, signal, socket, statistics, subprocess, sys, time
from pathlib import Path

import boxhop

from common import (AUTH, GW, OUT, TOOLS, PASSWORD, ROOT, UP_AUTH, UPSTREAM_PW, USER, Proxy, cpu_ticks, free_port, med,
                    rss_kib, run, span, tree, wait_port)

TICK = os.sysconf("SC_CLK_TCK")
ROUNDS = int(os.environ.get("ROUNDS", "5"))
DURATION = os.environ.get("DURATION", "10s")
SECTIONS = os.environ.get("SECTIONS", "throughput,handshakes,sse,streams,instructions,webui").split(",")
# 10 000 streams need 20 000 sockets in a one-process proxy; see docs/performance.md for this
# machine's descriptor limit.
STREAMS = [int(n) for n in os.environ.get("STREAMS", "2000,9900").split(",")]
# HTTP/2: streams over connections, multiplexed. 100 a connection stays under every proxy's
# default limit on concurrent streams (gateway 256, nginx 128, Caddy 250).
H2_STREAMS = [tuple(int(x) for x in c.split("/")) for c in os.environ.get("H2_STREAMS", "2000/20").split(",") if c]


def setup():
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    certs = OUT / "certs"
    run([str(GW), "cert", "dev", "--out", str(certs), "-c", "/nonexistent.toml"])
    (OUT / "upstream.pw").write_text(UPSTREAM_PW)
    os.chmod(OUT / "upstream.pw", 0o600)
    # The leaf alone for nginx and Caddy; the gateway's file has the chain.
    leaf = (certs / "server.crt").read_text().split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n"
    (certs / "leaf.crt").write_text(leaf)
    return certs


def gateway_config(port, upstream, state_dir="state", store=""):
    """The gateway's config: limits out of the way, one project on the stand-in upstream, one
    user; `store` a `[store]` table or nothing (SQLite in `state_dir`)."""
    phc = run([str(GW), "hash-password"], input=PASSWORD + "\n").strip()
    return f"""
[server]
listen = "127.0.0.1:{port}"
state_dir = "{state_dir}"
{store}
[tls]
cert = "certs/server.crt"
key = "certs/server.key"
[limits]
requests_per_second = 1000000
burst = 1000000
max_connections_per_ip = 1000000
max_streams_per_user = 1000000
[[project]]
name = "bench"
upstream = "http://127.0.0.1:{upstream}"
upstream_password_file = "upstream.pw"
[[user]]
name = "{USER}"
password_hash = "{phc}"
projects = ["*"]
role = "operator"
"""


def configs(certs, ports):
    (OUT / "gateway.toml").write_text(gateway_config(ports["gateway"], ports["upstream"]))
    apr1 = run(["openssl", "passwd", "-apr1", PASSWORD]).strip()
    (OUT / "htpasswd").write_text(f"{USER}:{apr1}\n")
    (OUT / "nginx").mkdir()
    common = f"""
        ssl_certificate {certs}/server.crt;
        ssl_certificate_key {certs}/server.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:10m;
        keepalive_requests 1000000;
        location / {{
            %s
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Authorization "Basic {UP_AUTH}";
            proxy_buffering off;
            proxy_read_timeout 1h;
        }}"""
    (OUT / "nginx.conf").write_text(f"""
user root;
worker_processes auto;
worker_rlimit_nofile 200000;
pid {OUT}/nginx.pid;
error_log {OUT}/nginx-error.log warn;
events {{ worker_connections 100000; }}
http {{
    access_log off;
    upstream up {{ server 127.0.0.1:{ports['upstream']}; keepalive 256; keepalive_requests 1000000; }}
    server {{ listen 127.0.0.1:{ports['nginx_auth']} ssl http2; {common % f'auth_basic "bench"; auth_basic_user_file {OUT}/htpasswd;'} }}
    server {{ listen 127.0.0.1:{ports['nginx']} ssl http2; {common % ''} }}
}}
""")
    bcrypt = run(["caddy", "hash-password", "--plaintext", PASSWORD]).strip()
    (OUT / "Caddyfile").write_text(f"""
{{
    admin off
    auto_https off
    log {{
        level ERROR
    }}
}}
https://127.0.0.1:{ports['caddy']} {{
    tls {certs}/server.crt {certs}/server.key
    basicauth {{
        {USER} {bcrypt}
    }}
    reverse_proxy 127.0.0.1:{ports['upstream']} {{
        header_up Authorization "Basic {UP_AUTH}"
        flush_interval -1
        transport http {{
            keepalive 90s
            keepalive_idle_conns 256
        }}
    }}
}}
""")


def proxies(ports):
    env = dict(os.environ, RUST_LOG="warn")
    gw = Proxy("opencode-gateway", lambda: subprocess.Popen([str(GW), "serve", "-c", str(OUT / "gateway.toml")], cwd=OUT, env=env,
                                                    stdout=subprocess.DEVNULL, stderr=open(OUT / "gateway.log", "a")),
               f"https://127.0.0.1:{ports['gateway']}", ports["gateway"])
    ngx = Proxy("nginx, TLS + auth_basic apr1", lambda: subprocess.Popen(["nginx", "-c", str(OUT / "nginx.conf"), "-g", "daemon off;"],
                                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                f"https://127.0.0.1:{ports['nginx_auth']}", ports["nginx_auth"])
    ngx_noauth = Proxy("nginx, TLS, no auth", None, f"https://127.0.0.1:{ports['nginx']}", ports["nginx"])
    caddy = Proxy("Caddy, TLS + basicauth", lambda: subprocess.Popen(["caddy", "run", "--config", str(OUT / "Caddyfile"), "--adapter", "caddyfile"],
                                                                      stdout=subprocess.DEVNULL, stderr=open(OUT / "caddy.log", "a"), env=dict(os.environ, HOME=str(OUT))),
                  f"https://127.0.0.1:{ports['caddy']}", ports["caddy"])
    return gw, ngx, ngx_noauth, caddy


def wrk(url, auth, extra=()):
    args = ["wrk", "-t1", "-c32", "-d", DURATION, "--latency"] + list(extra)
    if auth:
        args += ["-H", f"Authorization: Basic {AUTH}"]
    text = run(args + [url + "/global/health"])
    reqs = int(re.search(r"(\d+) requests in", text).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    unit = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    lat = {}
    for pct in ("50", "99"):
        m = re.search(rf"\s{pct}%\s+([\d.]+)(us|ms|s)", text)
        lat[pct] = float(m.group(1)) * unit[m.group(2)]
    return reqs, rps, lat["50"], lat["99"], int(errors.group(1)) if errors else 0


def warm(url, auth, ca):
    """One authenticated request, so every proxy's verified-credential cache is filled before
    anything is measured (Caddy's bcrypt at its default cost 14 takes about a second)."""
    out = run([str(TOOLS / "client"), "handshakes", url + "/global/health", "1", "full", AUTH if auth else "-", ca])
    if "handshakes 1 of 1" not in out:
        raise RuntimeError(f"warm-up request to {url} failed: {out}")


def settle(proc, timeout=60):
    """Wait until the proxy is idle (under 2 % of a core over half a second), so one measurement's
    leftover work is not billed to the next."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        c0 = cpu_ticks(tree(proc.pid))
        time.sleep(0.5)
        if cpu_ticks(tree(proc.pid)) - c0 <= TICK * 0.01:
            return
    print(f"warning: {proc.args[0]} still busy after {timeout} s", file=sys.stderr)



def main():
    # Streams need two sockets each in the proxy; take the largest descriptor limit allowed.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    certs = setup()
    load = os.getloadavg()
    stand_in_sections = any(s in SECTIONS for s in ("throughput", "handshakes", "sse", "streams"))
    wrk_rounds = f"; {ROUNDS} interleaved rounds of wrk -t1 -c32 -d{DURATION}" if stand_in_sections else ""
    report = [f"# Benchmark results\n\nRun {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores; "
              f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}{wrk_rounds}.\n"]
    if stand_in_sections:
        stand_in(report, certs)
    if "instructions" in SECTIONS:
        if not (OUT / "gateway.toml").exists():
            configs(certs, {n: free_port() for n in ("upstream", "gateway", "nginx_auth", "nginx", "caddy")})
        instructions(report)
    if "webui" in SECTIONS:
        # Its own OpenCode and proxies; imported here, as it imports this file's helpers.
        from webui import webui
        webui(report, certs)
    text = "\n".join(report) + "\n"
    (OUT / "results.md").write_text(text)
    print(text)


def instructions(report):
    """User-space instructions per keep-alive request under callgrind (bench/callgrind.sh), the
    gateway and nginx without auth, on the configs the stand-in sections wrote: a count the
    machine's load does not move, unlike CPU time."""
    rows = []
    for name, arg in (("opencode-gateway", []), ("nginx, TLS, no auth", ["nginx"])):
        out = run(["bash", str(ROOT / "bench" / "callgrind.sh"), *arg])
        m = re.search(r"requests (\d+), instructions per request (\d+)", out)
        if not m:
            raise RuntimeError(f"bench/callgrind.sh {' '.join(arg)} printed no figure:\n{out}")
        rows.append((name, int(m.group(2)), int(m.group(1))))
    report.append("\n## Instructions per request (callgrind)\n")
    report.append("Keep-alive `GET /global/health` with Basic credentials, wrk -t1 -c4 for 10 s under valgrind's "
                  "callgrind after a 3 s warm-up; user-space instructions of the proxy's process ÷ requests. "
                  "The kernel's socket work is not counted.\n")
    report.append("| target | instructions / request | requests under callgrind |\n|---|---:|---:|")
    for name, ir, n in rows:
        report.append(f"| {name} | {ir:,} | {n:,} |")
    report.append(f"\nRatio gateway / nginx without auth: **{rows[0][1] / rows[1][1]:.2f}**.")


def stand_in(report, certs):
    """The sections against the stand-in upstream (bench/tools), all proxies started once."""
    names = ["upstream", "gateway", "nginx_auth", "nginx", "caddy", "gateway_box"]
    ports = {n: free_port() for n in names}
    configs(certs, ports)
    upstream = start_upstream(ports["upstream"])
    wait_port(ports["upstream"], upstream)
    gw, ngx, ngx_noauth, caddy = proxies(ports)
    sshd, ssh_port, host_key, client_key = boxhop.start_sshd(OUT, free_port, wait_port)
    box_config = boxhop.gateway_config(OUT, ports["gateway"], ports["gateway_box"], ssh_port, host_key, client_key)
    env = dict(os.environ, RUST_LOG="warn")
    gw_box = Proxy(boxhop.NAME, lambda: subprocess.Popen([str(GW), "serve", "-c", str(box_config)], cwd=OUT, env=env,
                                                         stdout=subprocess.DEVNULL, stderr=open(OUT / "gateway-box.log", "a")),
                   f"https://127.0.0.1:{ports['gateway_box']}", ports["gateway_box"])
    befores = before_gateways(ports, env, box_config)
    started = {p.name: p.start() for p in (gw, gw_box, ngx, caddy, *befores)}
    ngx_noauth.proc = ngx.proc
    ca = str(certs / "ca.crt")

    targets = [("upstream alone (plain HTTP)", f"http://127.0.0.1:{ports['upstream']}", upstream, False),
               ("opencode-gateway", gw.url, gw.proc, True),
               (boxhop.NAME, gw_box.url, gw_box.proc, True),
               ("nginx, TLS + auth_basic apr1", ngx.url, ngx.proc, True),
               ("nginx, TLS, no auth", ngx_noauth.url, ngx.proc, False),
               ("Caddy, TLS + basicauth (cached)", caddy.url, caddy.proc, True)]
    if befores:
        # Each older build right after its counterpart: BEFORE=path/to/older/opencode-gateway.
        targets[2:2] = [(p.name, p.url, p.proc, True) for p in befores]
    only = os.environ.get("TARGETS")
    if only:
        targets = [t for t in targets if any(o in t[0] for o in only.split(","))]
    if "throughput" in SECTIONS:
        throughput(report, targets, ca)
    chosen = lambda ps: [p for p in ps if not only or any(o in p.name for o in only.split(","))]
    if "handshakes" in SECTIONS:
        handshakes(report, chosen((gw, ngx, ngx_noauth, caddy)), ca)
    if "sse" in SECTIONS:
        sse_latency(report, ports, (gw, ngx, caddy), ca, gw_box, befores)
    if "streams" in SECTIONS:
        # An older build (BEFORE) beside this one; its box twin has no place here.
        direct_befores = [b for b in befores if boxhop.NAME not in b.name]
        idle_streams(report, chosen((gw, *direct_befores, ngx, caddy)), ca)
    for p in (gw, gw_box, ngx, caddy, *befores):
        p.stop()
    sshd.terminate()
    sshd.wait(10)
    # Gone before anything else binds its port (the instructions section starts its own there).
    upstream.terminate()
    try:
        upstream.wait(10)
    except subprocess.TimeoutExpired:
        upstream.kill()
        upstream.wait()


def start_upstream(port):
    """The stand-in, or with UPSTREAM=nginx a real HTTP server answering the same JSON at
    `/global/health` with its own headers and defaults (issue 43: the throughput section only,
    it has no event stream)."""
    if os.environ.get("UPSTREAM") != "nginx":
        return subprocess.Popen([str(TOOLS / "upstream"), str(port)], stdout=subprocess.DEVNULL)
    if set(SECTIONS) - {"throughput"}:
        raise SystemExit("UPSTREAM=nginx serves no event stream: use it with SECTIONS=throughput")
    (OUT / "upstream-nginx").mkdir(exist_ok=True)
    conf = OUT / "upstream-nginx" / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
pid {OUT}/upstream-nginx/nginx.pid;
error_log {OUT}/upstream-nginx/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{port};
        location = /global/health {{ default_type application/json; return 200 '{{"healthy":true,"version":"1.18.33"}}'; }}
    }}
}}
""")
    return subprocess.Popen(["nginx", "-c", str(conf), "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def before_gateways(ports, env, box_config):
    """With BEFORE set: that build of the gateway, direct and through the box, on the same
    configs moved to ports and state folders of their own (side by side in one run)."""
    before = os.environ.get("BEFORE")
    if not before:
        return []
    made = []
    for name, config, key in (("opencode-gateway (before)", OUT / "gateway.toml", "gateway"),
                              (boxhop.NAME + " (before)", box_config, "gateway_box")):
        port = free_port()
        text = (config.read_text().replace(f'listen = "127.0.0.1:{ports[key]}"', f'listen = "127.0.0.1:{port}"', 1)
                .replace('state_dir = "state', 'state_dir = "before-state', 1))
        path = OUT / f"before-{key}.toml"
        path.write_text(text)
        log = OUT / f"before-{key}.log"
        made.append(Proxy(name, lambda path=path, log=log: subprocess.Popen([before, "serve", "-c", str(path)], cwd=OUT, env=env,
                                                                        stdout=subprocess.DEVNULL, stderr=open(log, "a")),
                          f"https://127.0.0.1:{port}", port))
    return made


def throughput(report, targets, ca):
    """Authenticated keep-alive requests, in interleaved rounds."""
    results = {t[0]: {"rps": [], "p50": [], "p99": [], "cpu": []} for t in targets}
    for name, url, proc, auth in targets:
        warm(url, auth, ca)
    for r in range(ROUNDS):
        for name, url, proc, auth in targets:
            settle(proc)
            pids = tree(proc.pid)
            c0 = cpu_ticks(pids)
            reqs, rps, p50, p99, errors = wrk(url, auth)
            c1 = cpu_ticks(tree(proc.pid))
            if errors:
                print(f"warning: {name}: {errors} non-2xx responses", file=sys.stderr)
            res = results[name]
            res["rps"].append(rps)
            res["p50"].append(p50)
            res["p99"].append(p99)
            res["cpu"].append((c1 - c0) / TICK * 1e6 / max(reqs, 1))
            print(f"round {r + 1} {name}: {rps:.0f} req/s p50 {p50:.2f} ms p99 {p99:.2f} ms cpu {res['cpu'][-1]:.1f} us/req", flush=True)
    names = [t[0] for t in targets]
    base = results["nginx, TLS + auth_basic apr1"] if "nginx, TLS + auth_basic apr1" in names else results[names[0]]
    report.append("## Authenticated keep-alive requests\n")
    report.append("| target | req/s (median, min..max) | p50 ms | p99 ms | proxy CPU µs/req | req/s vs nginx+auth | CPU/req vs nginx no auth |")
    report.append("|---|---:|---:|---:|---:|---:|---:|")
    noauth_cpu = med(results["nginx, TLS, no auth"]["cpu"] if "nginx, TLS, no auth" in names else results[names[0]]["cpu"])
    for name, *_ in targets:
        res = results[name]
        cpu = med(res["cpu"])
        report.append(f"| {name} | {med(res['rps']):.0f} ({span(res['rps'])}) | {med(res['p50']):.2f} | {med(res['p99']):.2f} ({span(res['p99'], '{:.2f}')}) | "
                      f"{cpu:.1f} ({span(res['cpu'], '{:.1f}')}) | {med(res['rps']) / med(base['rps']):.2f}× | {cpu / noauth_cpu:.2f}× |")



def handshakes(report, proxies, ca):
    """Proxy CPU per new TLS connection (Connection: close), full and resumed."""
    report.append("\n## TLS handshakes (one request per connection)\n")
    report.append("| target | full: proxy CPU µs/conn | resumed: proxy CPU µs/conn |")
    report.append("|---|---:|---:|")
    n = int(os.environ.get("HANDSHAKES", "2000"))
    for p in proxies:
        auth = p.name != "nginx, TLS, no auth"
        row = []
        for mode in ("full", "resume"):
            proc = p.proc
            settle(proc)
            c0 = cpu_ticks(tree(proc.pid))
            out = run([str(TOOLS / "client"), "handshakes", p.url + "/global/health", str(n), mode, AUTH if auth else "-", ca])
            c1 = cpu_ticks(tree(proc.pid))
            ok = int(re.search(r"handshakes (\d+)", out).group(1))
            row.append((c1 - c0) / TICK * 1e6 / max(ok, 1))
        report.append(f"| {p.name} | {row[0]:.0f} | {row[1]:.0f} |")
        print(f"handshakes {p.name}: full {row[0]:.0f} us resumed {row[1]:.0f} us", flush=True)



def sse_latency(report, ports, proxies, ca, gw_box, befores=()):
    """The latency an event adds crossing the proxy. All targets' streams run at the same time, so
    a hiccup of the machine lands on the direct stream and the proxied ones alike."""
    gw, ngx, caddy = proxies
    n = int(os.environ.get("EVENTS", "2000"))
    report.append(f"\n## SSE event latency (upstream send → client receive; {n} events at 10 ms on each stream, all streams at once)\n")
    report.append("| target | p50 µs | p99 µs | added p50 µs | added p99 µs |")
    report.append("|---|---:|---:|---:|---:|")
    targets = (("upstream alone", f"http://127.0.0.1:{ports['upstream']}", False), (gw.name, gw.url, True),
               (gw_box.name, gw_box.url, True), *((p.name, p.url, True) for p in befores),
               (ngx.name, ngx.url, True), (caddy.name, caddy.url, True))
    clients = {name: subprocess.Popen([str(TOOLS / "client"), "latency", url + "/event?interval_ms=10", str(n), AUTH if auth else "-", ca],
                                      stdout=subprocess.PIPE, text=True) for name, url, auth in targets}
    lat = {}
    for name, c in clients.items():
        out, _ = c.communicate(timeout=n * 0.01 + 120)
        m = re.search(r"p50_us (\d+) p99_us (\d+)", out)
        lat[name] = (int(m.group(1)), int(m.group(2)))
    for name, (p50, p99) in lat.items():
        d50, d99 = p50 - lat["upstream alone"][0], p99 - lat["upstream alone"][1]
        report.append(f"| {name} | {p50} | {p99} | {d50 if name != 'upstream alone' else '-'} | {d99 if name != 'upstream alone' else '-'} |")
        print(f"sse {name}: p50 {p50} us p99 {p99} us", flush=True)


def held_rss(p, ca, args, count):
    """Restart `p`, then RSS growth per stream while a client holds `count` streams (client args)."""
    p.stop()
    p.start()
    warm(p.url, True, ca)
    settle(p.proc)
    idle = rss_kib(p.pids())
    holder = subprocess.Popen([str(TOOLS / "client")] + args + [AUTH, ca], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = holder.stdout.readline()
    ready = int(re.search(r"ready (\d+)", line).group(1))
    time.sleep(3)
    held = rss_kib(p.pids())
    holder.stdin.close()
    holder.wait(60)
    return idle, ready, (held - idle) / max(ready, 1)


def idle_streams(report, proxies, ca):
    """Memory per idle authenticated SSE stream (each proxy restarted first), over HTTP/1.1 (a TLS
    connection each) and over HTTP/2 (many streams on each TLS connection). Either way each stream
    holds its own upstream connection."""
    report.append("\n## Idle authenticated SSE streams (client TLS connection + upstream connection each)\n")
    report.append("| target | idle RSS MiB | start to ready ms | " + " | ".join(f"{n} streams: KiB/stream" for n in STREAMS) + " |")
    report.append("|---|---:|---:|" + "---:|" * len(STREAMS))
    for p in proxies:
        cells = []
        for count in STREAMS:
            idle, ready, per = held_rss(p, ca, ["hold", p.url + "/event", str(count)], count)
            ready_ms = p.ready_s * 1000
            cells.append(f"{per:.1f}" + ("" if ready == count else f" ({ready} held)"))
            print(f"streams {p.name}: {ready}/{count} held, {per:.1f} KiB/stream", flush=True)
        report.append(f"| {p.name} | {idle / 1024:.1f} | {ready_ms:.0f} | " + " | ".join(cells) + " |")
    if not H2_STREAMS:
        return
    report.append("\n## Idle authenticated SSE streams over HTTP/2 (streams multiplexed on TLS connections; an upstream connection each)\n")
    report.append("| target | " + " | ".join(f"{n} streams on {c} connections: KiB/stream" for n, c in H2_STREAMS) + " |")
    report.append("|---|" + "---:|" * len(H2_STREAMS))
    for p in proxies:
        cells = []
        for count, conns in H2_STREAMS:
            idle, ready, per = held_rss(p, ca, ["hold2", p.url + "/event", str(count), str(conns)], count)
            cells.append(f"{per:.1f}" + ("" if ready == count else f" ({ready} held)"))
            print(f"h2 streams {p.name}: {ready}/{count} held on {conns} connections, {per:.1f} KiB/stream", flush=True)
        report.append(f"| {p.name} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
