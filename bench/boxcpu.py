"""Where a request's CPU goes, direct and through a box (issue 43, target 3): every process on the
path (the gateway, the box's sshd with its per-connection children, the stand-in upstream and
wrk itself) measured per request while wrk loads the direct gateway and then the one whose
project is on the box, in turns. On this two-core machine both runs use the cores whole, so the
requests per second of either is about 2 cores ÷ the sum of its column; what the box's sshd
costs per request is part of that sum whatever the gateway does.

Uses the configs a bench/run.sh run with the box target left in bench/out (bench.py's throughput
section writes gateway.toml, gateway-box.toml and box/).
Usage: python3 bench/boxcpu.py [gateway binary] (default target/release/opencode-gateway); ROUNDS=3
"""
import os, re, subprocess, sys, time

from common import AUTH, GW, OUT, TOOLS, cpu_ticks, tree

ROUNDS = int(os.environ.get("ROUNDS", "3"))


def port_of(conf, pattern):
    return re.search(pattern, (OUT / conf).read_text()).group(1)


def answered(port):
    for _ in range(100):
        code = subprocess.run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "-H", f"Authorization: Basic {AUTH}",
                               f"https://127.0.0.1:{port}/global/health"], capture_output=True, text=True).stdout
        if code == "200":
            return
        time.sleep(0.3)
    raise SystemExit(f"nothing answered 200 on port {port} in 30 s")


def wrk(port, seconds):
    return subprocess.run(["wrk", "-t1", "-c32", f"-d{seconds}s", "-H", f"Authorization: Basic {AUTH}",
                           f"https://127.0.0.1:{port}/global/health"], capture_output=True, text=True).stdout


def measured(port, groups):
    """µs of CPU per request for each process group while wrk loads `port` for 10 s."""
    wrk(port, 2)
    pids = {name: tree(pid) for name, pid in groups.items()}
    before = {name: cpu_ticks(p) for name, p in pids.items()}
    t0 = os.times()
    out = wrk(port, 10)
    t1 = os.times()
    n = int(re.search(r"(\d+) requests in", out).group(1))
    per = {name: (cpu_ticks(p) - before[name]) * 1e6 / os.sysconf("SC_CLK_TCK") / n for name, p in pids.items()}
    per["wrk"] = (t1.children_user - t0.children_user + t1.children_system - t0.children_system) * 1e6 / n
    return n / 10, per


def main():
    if not (OUT / "gateway-box.toml").exists():
        raise SystemExit("run bench/run.sh with the box target first (it writes bench/out/gateway-box.toml)")
    binary = sys.argv[1] if len(sys.argv) > 1 else str(GW)
    up = port_of("gateway.toml", r'upstream = "http://127.0.0.1:(\d+)')
    direct, box = port_of("gateway.toml", r'listen = "127.0.0.1:(\d+)'), port_of("gateway-box.toml", r'listen = "127.0.0.1:(\d+)')
    env = dict(os.environ, RUST_LOG="warn")
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # sshd run as root wants its privilege-separation folder
    procs = {
        "stand-in": subprocess.Popen([str(TOOLS / "upstream"), up], **quiet),
        "sshd": subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(OUT / "box" / "sshd_config")], **quiet),
        "gateway": subprocess.Popen([binary, "serve", "-c", "gateway.toml"], cwd=OUT, env=env, **quiet),
        "gateway → box": subprocess.Popen([binary, "serve", "-c", "gateway-box.toml"], cwd=OUT, env=env, **quiet),
    }
    try:
        answered(direct)
        answered(box)
        groups = {name: p.pid for name, p in procs.items()}
        print("| run | req/s | " + " | ".join(list(groups) + ["wrk"]) + " | sum µs/req | 2 cores ÷ sum |")
        print("|---|---:|" + "---:|" * (len(groups) + 3))
        for r in range(1, ROUNDS + 1):
            for name, port in (("direct", direct), ("box", box)):
                rps, per = measured(port, groups)
                total = sum(per.values())
                cells = " | ".join(f"{per[k]:.1f}" for k in list(groups) + ["wrk"])
                print(f"| {r}: {name} | {rps:.0f} | {cells} | {total:.1f} | {2e6 / total:.0f} |", flush=True)
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(10)


if __name__ == "__main__":
    main()
