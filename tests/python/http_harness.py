"""What the HTTP client tests (openai_client_test.py, anthropic_client_test.py) share: a server
process started on port 0, plain JSON over urllib, the router's readiness, and a printing check.
Standard library only, so a test that imports it needs no client package for it.
"""
import json
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

START_TIMEOUT_S = 60
MODEL_DIR = "models/demo"


class Server:
    """A server process started with port 0; it prints 'listening on HOST:PORT' first."""

    def __init__(self, argv, log_path):
        self.log = open(log_path, "wb")
        self.log_path = log_path
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log)
        self.lines = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        line = self.wait_line("listening on ")
        if line is None:
            self.proc.kill()
            raise RuntimeError(f"{argv[0]} did not start; see {log_path}")
        self.address = line.strip().replace("0.0.0.0", "127.0.0.1")

    def _read(self):
        for raw in self.proc.stdout:
            with self.cond:
                self.lines.append(raw.decode())
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)
            self.cond.notify_all()

    def wait_line(self, prefix, timeout=START_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    if line is None:
                        return None
                    if line.startswith(prefix):
                        return line[len(prefix):]
                left = deadline - time.monotonic()
                if left <= 0 or not self.cond.wait(left):
                    return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class HttpCluster:
    """A CPU prefill worker, decode worker and router on the demo model, each on port 0, the
    router's HTTP API ready at `base` (http://host:port); `router_flags` add to the router's
    (its --metrics-port among them). Logs under `logs`, the router's at `router_log`. A context
    manager: the processes stop on leaving it, and if starting fails."""

    def __init__(self, args, logs, router_flags):
        self.servers = []
        self.router_log = f"{logs}/router.log"
        common = ["--insecure", "--listen", "127.0.0.1:0", "--model", MODEL_DIR, "--backend", "cpu",
                  "--metrics-port", "-1"]
        try:
            prefill = self._start([args.prefill_bin] + common, f"{logs}/prefill.log")
            decode = self._start([args.decode_bin] + common, f"{logs}/decode.log")
            router = self._start([args.router_bin, "--insecure", "--listen", "127.0.0.1:0",
                                  "--admin-listen", "127.0.0.1:0", "--model", MODEL_DIR,
                                  "--http-port", "0", "--poll-interval-ms", "100",
                                  "--tool-call-parser", "deepseek_v31"] + router_flags +
                                 ["--prefill", prefill.address, "--decode", decode.address], self.router_log)
            http = router.wait_line("http listening on ")
            if http is None:
                raise RuntimeError(f"no 'http listening on' line; see {self.router_log}")
            self.base = "http://" + http.strip().replace("0.0.0.0", "127.0.0.1")
            wait_ready(self.base)
        except BaseException:
            self.stop()
            raise

    def _start(self, argv, log_path):
        server = Server(argv, log_path)
        self.servers.append(server)
        return server

    def stop(self):
        for s in reversed(self.servers):
            s.stop()
        self.servers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def http_get(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def http_post_json(url, body, timeout=30, headers=None):
    """(status, parsed JSON body) of a POST of `body`; `headers` add to the JSON content type."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_ready(base, deadline_s=START_TIMEOUT_S):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if http_get(base + "/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)  # polling /health against a deadline
    raise RuntimeError("router not ready")


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what)
