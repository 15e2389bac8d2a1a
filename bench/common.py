"""What the bench's sections share (bench.py runs them; webui.py and store.py are sections of
their own): where things are, the bench user, processes under test and their ports, and the
two summaries every table prints. Apart from bench.py so a section never imports the runner."""
import base64, signal, socket, statistics, subprocess, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
GW = ROOT / "target" / "release" / "opencode-gateway"
TOOLS = ROOT / "bench" / "tools" / "target" / "release"
USER, PASSWORD = "bench", "bench-password-1"
UPSTREAM_PW = "bench-upstream-password"
AUTH = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
UP_AUTH = base64.b64encode(f"opencode:{UPSTREAM_PW}".encode()).decode()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc=None, timeout=30):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return time.time() - t0
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
            time.sleep(0.01)
    raise RuntimeError(f"port {port} did not open")


def tree(pid):
    """pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            kids = []
        todo.extend(int(k) for k in kids)
    return out


def cpu_ticks(pids):
    total = 0
    for p in pids:
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(f[11]) + int(f[12])
        except OSError:
            pass
    return total


def rss_kib(pids):
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


class Proxy:
    def __init__(self, name, start, url, port):
        self.name, self._start, self.url, self.port = name, start, url, port
        self.proc = None

    def start(self):
        t0 = time.time()
        self.proc = self._start()
        wait_port(self.port, self.proc)
        self.ready_s = time.time() - t0
        time.sleep(0.3)
        return self

    def pids(self):
        return tree(self.proc.pid)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        time.sleep(0.3)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def span(xs, fmt="{:.0f}"):
    return f"{fmt.format(min(xs))}..{fmt.format(max(xs))}" if xs else "-"
