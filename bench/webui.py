"""The web UI's first load (issue 14), bench.py's `webui` section: a cold load of OpenCode's web
UI in headless Chromium on a throttled phone network (bench/webui.mjs), directly against the
real OpenCode and through three proxies in front of that same server, each with TLS on the
bench's certificate and the bench's Basic credentials, injecting OpenCode's own password:

- the release gateway (compresses the web UI's files itself: brotli 9 / gzip 9, cached per
  asset; its first load after a start pays the compression, so it is reported apart);
- nginx as people configure it: `gzip on` for text types, `gzip_proxied any`, HTTP/2;
- Caddy with `encode zstd gzip` (on the fly, every response).

Each round loads every target once, each in a fresh browser, cold (cache disabled); the
order rotates between rounds. Before measuring, every proxy is checked to compress the main
script, and every load must show the prompt input: a target that never renders stops the bench.
"""

import base64, json, os, re, secrets, signal, subprocess, sys, threading, time
from pathlib import Path

from common import GW, OUT, PASSWORD, ROOT, USER, Proxy, free_port, med, run, span, wait_port

OPENCODE = ROOT / "node_modules" / ".bin" / "opencode"
ROUNDS = int(os.environ.get("WEBUI_ROUNDS", "3"))
# How long a load may take for every answer to come (bench/webui.mjs's SETTLE_MS).
SETTLE_MS = int(os.environ.get("SETTLE_MS", "300000"))
HOST = "bench.gw.localhost"  # the gateway serves the web UI on a host of its own (no base path)


def start_opencode(port, password):
    """OpenCode 1.18.33 in a throwaway project (a git repository) with its own HOME and XDG
    directories, so it neither reads nor writes the user's configuration."""
    home = OUT / "webui"
    project = home / "project"
    project.mkdir(parents=True)
    run(["git", "init", "-q", str(project)])
    env = dict(os.environ, OPENCODE_SERVER_PASSWORD=password, OPENCODE_DISABLE_MODELS_FETCH="1",
               OPENCODE_CONFIG_CONTENT='{"autoupdate": false, "share": "disabled"}', HOME=str(home),
               XDG_DATA_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config"),
               XDG_CACHE_HOME=str(home / "cache"), XDG_STATE_HOME=str(home / "state"))
    proc = subprocess.Popen([str(OPENCODE), "serve", "--hostname", "127.0.0.1", "--port", str(port)], cwd=project, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=open(OUT / "opencode.log", "a"),
                            text=True, start_new_session=True)
    ready = threading.Event()

    def pump():
        for line in proc.stdout:
            if f"listening on http://127.0.0.1:{port}" in line:
                ready.set()
    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(60):
        proc.kill()
        raise RuntimeError(f"opencode serve was not ready in 60 s (see {OUT / 'opencode.log'})")
    return proc, project


def configs(certs, ports, oc_password):
    up_auth = base64.b64encode(f"opencode:{oc_password}".encode()).decode()
    pw = OUT / "webui-upstream.pw"
    pw.write_text(oc_password)
    os.chmod(pw, 0o600)
    phc = run([str(GW), "hash-password"], input=PASSWORD + "\n").strip()
    (OUT / "gateway-webui.toml").write_text(f"""
[server]
listen = "127.0.0.1:{ports['gateway']}"
base_domain = "gw.localhost"
state_dir = "state-webui"
[tls]
cert = "certs/server.crt"
key = "certs/server.key"
[limits]
requests_per_second = 1000000
burst = 1000000
[[project]]
name = "bench"
upstream = "http://127.0.0.1:{ports['opencode']}"
upstream_password_file = "webui-upstream.pw"
[[user]]
name = "{USER}"
password_hash = "{phc}"
projects = ["*"]
role = "operator"
""")
    os.chmod(OUT / "gateway-webui.toml", 0o600)  # it holds a password hash: the gateway warns otherwise
    # nginx 1.22 (Debian 12) enables HTTP/2 with `listen … http2` (the `http2` directive came
    # in 1.25.1). gzip at nginx's default level (1), as a config that only says `gzip on` gets.
    (OUT / "nginx-webui.conf").write_text(f"""
user root;
worker_processes auto;
pid {OUT}/nginx-webui.pid;
error_log {OUT}/nginx-webui-error.log warn;
events {{ worker_connections 1024; }}
http {{
    include /etc/nginx/mime.types;
    access_log off;
    gzip on;
    gzip_types text/css application/javascript text/javascript application/json image/svg+xml;
    gzip_proxied any;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    server {{
        listen 127.0.0.1:{ports['nginx']} ssl http2;
        ssl_certificate {OUT}/certs/server.crt;
        ssl_certificate_key {OUT}/certs/server.key;
        auth_basic "opencode";
        auth_basic_user_file {OUT}/htpasswd;
        location / {{
            proxy_pass http://127.0.0.1:{ports['opencode']};
            proxy_http_version 1.1;
            proxy_set_header Authorization "Basic {up_auth}";
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_read_timeout 1h;
        }}
    }}
}}
""")
    # Caddy 2.6.2: `encode` compresses every response of a default list of text types (scripts,
    # CSS, JSON, SVG, HTML…) at each request, preferring zstd when the client offers both.
    bcrypt = run(["caddy", "hash-password", "--plaintext", PASSWORD]).strip()
    (OUT / "Caddyfile-webui").write_text(f"""
{{
    admin off
    auto_https off
    log {{
        level ERROR
    }}
}}
https://127.0.0.1:{ports['caddy']} {{
    tls {OUT}/certs/server.crt {OUT}/certs/server.key
    encode zstd gzip
    basicauth {{
        {USER} {bcrypt}
    }}
    reverse_proxy 127.0.0.1:{ports['opencode']} {{
        header_up Authorization "Basic {up_auth}"
    }}
}}
""")
    apr1 = run(["openssl", "passwd", "-apr1", PASSWORD]).strip()
    (OUT / "htpasswd").write_text(f"{USER}:{apr1}\n")


def proxies(ports):
    gw = Proxy("opencode-gateway", lambda: subprocess.Popen([str(GW), "serve", "-c", str(OUT / "gateway-webui.toml")], cwd=OUT,
                                                            env=dict(os.environ, RUST_LOG="warn"), stdout=subprocess.DEVNULL,
                                                            stderr=open(OUT / "gateway-webui.log", "a")),
               f"https://{HOST}:{ports['gateway']}", ports["gateway"])
    ngx = Proxy("nginx, gzip on", lambda: subprocess.Popen(["nginx", "-c", str(OUT / "nginx-webui.conf"), "-g", "daemon off;"],
                                                           stdout=subprocess.DEVNULL, stderr=open(OUT / "nginx-webui-error.log", "a")),
                f"https://127.0.0.1:{ports['nginx']}", ports["nginx"])
    caddy = Proxy("Caddy, encode zstd gzip", lambda: subprocess.Popen(["caddy", "run", "--config", str(OUT / "Caddyfile-webui"), "--adapter", "caddyfile"],
                                                                      stdout=subprocess.DEVNULL, stderr=open(OUT / "caddy-webui.log", "a"),
                                                                      env=dict(os.environ, HOME=str(OUT))),
                  f"https://127.0.0.1:{ports['caddy']}", ports["caddy"])
    return gw, ngx, caddy


def curl(url, accept, port=None, user=f"{USER}:{PASSWORD}", timeout=60):
    """Status and response headers of a GET (body discarded)."""
    args = ["curl", "-sk", "-o", "/dev/null", "-D", "-", "--max-time", str(timeout), "-u", user, "-H", f"Accept-Encoding: {accept}"]
    if port is not None:  # the gateway's project host: curl does not resolve *.localhost itself
        args += ["--resolve", f"{HOST}:{port}:127.0.0.1"]
    head = run(args + [url])
    status = int(re.match(r"HTTP/\S+ (\d+)", head).group(1))
    headers = {k.strip().lower(): v.strip() for k, v in re.findall(r"^([^:\r\n]+):(.*)$", head, re.M)}
    return status, headers


def check_compression(targets, script, oc_password):
    """Each proxy answers the main script compressed (what Chromium offers over HTTPS), and
    OpenCode itself does not: otherwise the comparison would not be what it claims."""
    found = {}
    status, h = curl(targets["direct"][0] + script, "gzip, deflate, br, zstd", user=f"opencode:{oc_password}")
    if status != 200:
        raise RuntimeError(f"OpenCode answered {status} for {script}")
    found["OpenCode direct"] = h.get("content-encoding", "identity")
    for name, accept, want in (("gateway", "gzip, deflate, br, zstd", "br"), ("gateway", "gzip", "gzip"),
                               ("nginx", "gzip, deflate, br, zstd", "gzip"), ("caddy", "gzip, deflate, br, zstd", "zstd"),
                               ("caddy", "gzip", "gzip")):
        url, port = targets[name]
        status, h = curl(url + script, accept, port)
        got = h.get("content-encoding", "identity")
        if status != 200 or got != want:
            raise RuntimeError(f"{name} answered {status} with Content-Encoding {got} (want {want}) for {script} "
                               f"with Accept-Encoding: {accept}")
        found[f"{name} ({accept})"] = got
    print("webui: main script " + script + ": " + ", ".join(f"{k} → {v}" for k, v in found.items()), flush=True)
    return found


def api_sizes(targets, oc_password, project):
    """Bytes of the largest API answers the web UI asks for on every load, as each target sends
    them to Chromium (which offers br and zstd only over HTTPS)."""
    sizes = {}
    for path in ("/provider", "/command", "/agent"):
        for name, (url, port) in targets.items():
            accept = "gzip, deflate" if name == "direct" else "gzip, deflate, br, zstd"
            user = f"opencode:{oc_password}" if name == "direct" else f"{USER}:{PASSWORD}"
            args = ["curl", "-sfk", "-o", "/dev/null", "-w", "%{size_download}", "-u", user, "-H", f"Accept-Encoding: {accept}"]
            if port is not None:
                args += ["--resolve", f"{HOST}:{port}:127.0.0.1"]
            sizes[(path, name)] = int(run(args + [f"{url}{path}?directory={project}"]))
    return sizes


def load(name, url, creds):
    """One cold load in a fresh browser; stops the bench if the prompt never shows."""
    out = subprocess.run(["node", str(ROOT / "bench" / "webui.mjs"), f"{name}={url}@{creds}"], capture_output=True, text=True,
                         env=dict(os.environ, CERT=str(OUT / "certs" / "server.crt"), SETTLE_MS=str(SETTLE_MS)),
                         timeout=SETTLE_MS / 1000 + 180)
    if out.returncode != 0:
        sys.exit(f"webui: {name} did not render the web UI: {out.stderr.strip()[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    with open(OUT / "webui.jsonl", "a") as f:
        f.write(json.dumps(res) + "\n")
    print(f"webui {name}: {res['bytes']} B ({res['api_bytes']} B API answers) before the prompt showed after "
          f"{res['prompt_visible_ms']} ms, {res['requests']} requests, main script {res['main']}; every answer in after "
          f"{res['all_answers_ms']} ms, {res['bytes_all']} B in all" + (f", still waiting for {res['left']}" if res['left'] else ""), flush=True)
    return res


def webui(report, certs):
    ports = {n: free_port() for n in ("opencode", "gateway", "nginx", "caddy")}
    oc_password = secrets.token_urlsafe(18)
    oc, project = start_opencode(ports["opencode"], oc_password)
    procs = []
    try:
        configs(certs, ports, oc_password)
        gw, ngx, caddy = proxies(ports)
        procs = [gw.start(), ngx.start(), caddy.start()]
        slug = base64.urlsafe_b64encode(str(project).encode()).decode().rstrip("=")
        path = f"/{slug}/session"
        targets = {"direct": (f"http://127.0.0.1:{ports['opencode']}", None), "gateway": (gw.url, gw.port),
                   "nginx": (ngx.url, None), "caddy": (caddy.url, None)}
        index = run(["curl", "-sf", "-u", f"opencode:{oc_password}", targets["direct"][0] + path])
        script = re.search(r'/assets/index-[^"]+\.js', index).group(0)
        coding = check_compression(targets, script, oc_password)
        sizes = api_sizes(targets, oc_password, project)
        mine = f"{USER}:{PASSWORD}"
        direct = ("OpenCode direct (plain HTTP)", targets["direct"][0] + path, f"opencode:{oc_password}")
        first = ("opencode-gateway, first load (cache empty)", gw.url + path, mine)
        warm = ("opencode-gateway, warm cache", gw.url + path, mine)
        nginx = (f"nginx {nginx_version()}, gzip on", ngx.url + path, mine)
        cad = (f"Caddy {caddy_version()}, encode zstd gzip", caddy.url + path, mine)
        units = [[direct], [first, warm], [nginx], [cad]]
        results = {t[0]: [] for u in units for t in u}
        for r in range(ROUNDS):
            for unit in units[r % len(units):] + units[:r % len(units)]:
                if unit[0] is first:
                    # An empty compression cache; one API request first so the credential check
                    # is not what this load measures.
                    gw.stop()
                    gw.start()
                    status, _ = curl(gw.url + "/global/health", "identity", gw.port)
                    if status != 200:
                        raise RuntimeError(f"the gateway answered {status} to an authenticated health check")
                for name, url, creds in unit:
                    results[name].append(load(name, url, creds))
        table(report, results, direct[0], coding, sizes)
    finally:
        for p in procs:
            p.stop()
        os.killpg(oc.pid, signal.SIGTERM)
        oc.wait(10)


def nginx_version():
    return re.search(r"nginx/(\S+)", subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr).group(1)


def caddy_version():
    return run(["caddy", "version"]).split()[0].lstrip("v")


def table(report, results, direct, coding, sizes):
    load = os.getloadavg()
    base_b = med([r["bytes"] for r in results[direct]])
    base_ms = med([r["prompt_visible_ms"] for r in results[direct]])
    report.append(f"\n## The web UI's cold load on a throttled phone network ({ROUNDS} rounds)\n")
    report.append("Headless Chromium, CDP network emulation 1.6 Mbps down / 750 kbps up / 150 ms RTT, 390×844, cache disabled, "
                  "a fresh browser per load; OpenCode 1.18.33's web UI until `[data-component=prompt-input]` is visible. "
                  f"Load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}.\n")
    report.append("Bytes: the responses finished when the prompt showed (encoded, as on the wire): the document, scripts, "
                  "styles, and the API answers that happened to finish first (the rest, among them the large `/provider`, "
                  "is still under way; bench/out/webui.jsonl lists both). Every answer in: until every request but the event "
                  "streams has finished (none new for 2 s); bytes in all: what had come by then.\n")
    report.append("| target | main script came as | bytes until the prompt (median, min..max) | of direct | of which API answers "
                  "| prompt visible s (median, min..max) | vs direct | every answer in s (median, min..max) | bytes in all (median) |")
    report.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, rs in results.items():
        b = [r["bytes"] for r in rs]
        s = [r["prompt_visible_ms"] / 1000 for r in rs]
        a = [r["all_answers_ms"] / 1000 for r in rs if r["all_answers_ms"] is not None]
        unsettled = sum(r["all_answers_ms"] is None for r in rs)
        m = rs[-1]["main"] or {}
        how = f"{m.get('protocol', '?')}, {m.get('encoding', '?')}"
        api = med([r["api_bytes"] for r in rs])
        report.append(f"| {name} | {how} | {med(b):.0f} ({span(b)}) | {med(b) / base_b * 100:.1f} % | {api:.0f} | "
                      f"{med(s):.1f} ({span(s, '{:.1f}')}) | {med(s) * 1000 / base_ms:.2f}× | "
                      f"{med(a):.1f} ({span(a, '{:.1f}')}){f' ({unsettled} loads not done in {SETTLE_MS / 1000:.0f} s)' if unsettled else ''} | "
                      f"{med([r['bytes_all'] for r in rs]):.0f} |")
    asks = sorted({r["provider_requests"] for rs in results.values() for r in rs})
    report.append(f"\nThe largest API answers the web UI asks for on every load (`/provider` {'/'.join(map(str, asks))} times per load), bytes as each target sends "
                  "them (curl, with the Accept-Encoding Chromium sends):\n")
    names = {"direct": "OpenCode direct", "gateway": "opencode-gateway", "nginx": "nginx, gzip on", "caddy": "Caddy, encode"}
    report.append("| answer | " + " | ".join(names.values()) + " |")
    report.append("|---|" + "---:|" * len(names))
    for path in ("/provider", "/command", "/agent"):
        report.append(f"| `{path}` | " + " | ".join(str(sizes[(path, n)]) for n in names) + " |")
    report.append("\nContent-Encoding of the main script by curl (Accept-Encoding given): "
                  + "; ".join(f"{k}: {v}" for k, v in coding.items()) + ".")
