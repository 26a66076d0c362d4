#!/usr/bin/env python3
"""How a `kvserve serve` binary withstands hostile clients, measured from outside.

Meant to compare two builds of the HTTP layer: run it once per binary and set the tables (or the
--json files) side by side. Every experiment starts its own server on a free loopback port,
stops it with SIGTERM at the end and records the exit code and how long the exit took. RSS is
the server's VmRSS from /proc/PID/status.

Experiments:
  table   15 rows of hostile or odd requests sent with raw sockets (huge headers, slowloris,
          SIGTERM during a trickle, Range abuse, a huge n x logprobs request, pipelining, bad
          Content-Length, ...); per row a short behaviour string, the time it took and the RSS
          before and after.
  crowd   /health latency and streaming TTFT on an idle server, then again while 2,000 idle
          keep-alive connections and 500 slowloris connections are open (one selector thread);
          how many idle connections survived, how often slowloris ones were cut, RSS. The server
          is sent SIGTERM with the crowd still connected.
  honest  32 streaming clients for --seconds, every 4th request cut off abruptly after 3
          events: errors, TTFT p50/p99, tokens/s, an RSS curve, and the KV block gauges once the
          server is idle again (every block must be back).

Usage:
  bench/http_probe.py [--kvserve build/kvserve] [--model M.gguf]
                      [--experiments table,crowd,honest] [--json OUT] [--seconds 180]
                      [--idle-conns 2000] [--slow-conns 500] [--crowd-hold 30] [--log-dir DIR]
                      [-- EXTRA SERVE FLAGS...]

Only flags that old and new servers share are used (--api-key, --log-format, --idle-timeout);
anything after `--` goes to every server started.
"""
import argparse
import collections
import http.client
import json
import os
import random
import resource
import selectors
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import cpu_name, start_serve  # noqa: E402

KEY = "k"  # the table's server runs with --api-key k
HOST = "127.0.0.1"
READ = selectors.EVENT_READ
WRITE = selectors.EVENT_WRITE

WORDS = ("the river map duck house flowers friend morning garden lamp window bread stone bridge "
         "letter basket cloud hill road song boat kite little girl boy dog cat tree sun happy "
         "played found went saw big red blue green small old new forest sky ran jumped").split()


def words(n, seed):
    """N pseudo-words (seeded), so prompts differ and do not hit the prefix cache."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def pct(values, p):
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(p / 100 * len(v) + 0.5)) - 1))]


def ms(x):
    if x is None:
        return "-"
    return f"{1000 * x:.2f}" if x < 0.01 else f"{1000 * x:.1f}"


def mib(kib):
    return None if kib is None else round(kib / 1024, 1)


def fmt_mib(x):
    return "-" if x is None else f"{x:.1f}"


def tally(items):
    """'431x8, reset x1' from a list of outcomes, most common first."""
    return ", ".join(f"{k}x{n}" for k, n in collections.Counter(map(str, items)).most_common())


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class RssSampler:
    """Samples a process's RSS every INTERVAL seconds in a thread (peaks between rows matter)."""

    def __init__(self, pid, interval):
        self.pid, self.interval = pid, interval
        self.samples = []  # (seconds since start, KiB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        t0 = time.monotonic()
        while True:
            kib = rss_kib(self.pid)
            if kib is not None:
                self.samples.append((time.monotonic() - t0, kib))
            if self._stop.wait(self.interval):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def peak_mib(self):
        return mib(max((k for _, k in self.samples), default=None))


class Server:
    """One `kvserve serve` with its stderr in a file under the log directory."""

    started = []  # every server, so that none outlives the script when an experiment fails

    def __init__(self, args, flags, name):
        self.log_path = os.path.join(args.log_dir, f"{name}.stderr")
        self.log = open(self.log_path, "w")
        model = ["--model", args.model] if args.model else []
        self.proc, self.url, self.port = start_serve(
            args.kvserve, model + flags + args.server_flags, self.log)
        self.pid = self.proc.pid
        Server.started.append(self)

    def rss(self):
        return mib(rss_kib(self.pid))

    def alive(self):
        return self.proc.poll() is None

    def cpu_s(self):
        """User + system CPU seconds so far: a server that spins on idle or slow clients
        shows here before it shows in latency."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def stop(self, cap=60.0):
        """SIGTERM, then wait up to CAP s; a server that has not exited by then is killed."""
        out = {}
        if not self.alive():
            out = {"exit_code": self.proc.returncode, "exit_s": None,
                   "behaviour": f"had already exited ({self.proc.returncode})"}
        else:
            t0 = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=cap)
                dt = time.monotonic() - t0
                out = {"exit_code": code, "exit_s": round(dt, 3),
                       "behaviour": f"exit {code} after {dt:.2f} s"}
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                out = {"exit_code": None, "exit_s": None,
                       "behaviour": f"no exit within {cap:.0f} s of SIGTERM (killed)"}
        self.proc.stdout.close()
        self.log.close()
        return out


# ---------------------------------------------------------------------------------------------
# Raw HTTP/1.1 over sockets: the rows need to send what no HTTP library would.

class Response:
    def __init__(self, status, reason, headers):
        self.status, self.reason, self.headers = status, reason, headers
        self.body = bytearray()
        self.complete = False

    def header(self, name):
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def json(self):
        try:
            return json.loads(bytes(self.body))
        except ValueError:
            return None

    def error(self):
        """(type, message, param) of an OpenAI-style error body, else Nones."""
        j = self.json()
        e = j.get("error") if isinstance(j, dict) else None
        if isinstance(e, dict):
            return e.get("type"), e.get("message"), e.get("param")
        return None, None, None


class ResponseParser:
    """Incremental parser of the responses on one connection (pipelined ones included)."""

    def __init__(self):
        self.buf = bytearray()
        self.done = []
        self.cur = None
        self.state = "head"
        self.need = 0

    def feed(self, data):
        self.buf += data
        while self._step():
            pass

    def eof(self):
        # A close-delimited body ends here; anything else cut short stays incomplete.
        if self.cur is not None and self.state == "close":
            self._finish()

    def _finish(self):
        self.cur.complete = True
        self.done.append(self.cur)
        self.cur, self.state = None, "head"

    def _step(self):
        if self.state == "head":
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return False
            lines = bytes(self.buf[:i]).decode("latin-1").split("\r\n")
            del self.buf[:i + 4]
            parts = lines[0].split(" ", 2)
            status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
            headers = [(k.strip().lower(), v.strip())
                       for k, _, v in (line.partition(":") for line in lines[1:])]
            self.cur = Response(status, parts[2] if len(parts) > 2 else "", headers)
            te = (self.cur.header("transfer-encoding") or "").lower()
            cl = self.cur.header("content-length")
            if status is not None and (100 <= status < 200 or status in (204, 304)):
                self._finish()
            elif "chunked" in te:
                self.state = "chunk-size"
            elif cl is not None and cl.isdigit():
                self.state, self.need = "body", int(cl)
            else:
                self.state = "close"
            return True
        if self.state == "body":
            if len(self.buf) < self.need:
                return False
            self.cur.body += self.buf[:self.need]
            del self.buf[:self.need]
            self._finish()
            return True
        if self.state == "chunk-size":
            i = self.buf.find(b"\r\n")
            if i < 0:
                return False
            size = int(bytes(self.buf[:i]).split(b";")[0].strip() or b"0", 16)
            del self.buf[:i + 2]
            self.state, self.need = ("trailer", 0) if size == 0 else ("chunk-data", size + 2)
            return True
        if self.state == "chunk-data":
            if len(self.buf) < self.need:
                return False
            self.cur.body += self.buf[:self.need - 2]
            del self.buf[:self.need]
            self.state = "chunk-size"
            return True
        if self.state == "trailer":
            i = self.buf.find(b"\r\n")
            if i < 0:
                return False
            del self.buf[:i + 2]
            if i == 0:
                self._finish()
            return True
        # "close": the body runs to the end of the connection.
        self.cur.body += self.buf
        self.buf.clear()
        return False


class Exchange:
    """What happened on one connection: responses, bytes both ways, how it ended."""

    def __init__(self):
        self.responses = []
        self.sent = 0
        self.received = 0
        self.send_error = None
        self.closed = False   # the server closed (FIN or RST)
        self.reset = False
        self.error = None     # "timeout", "connect: ...", ...
        self.elapsed = None   # until we stopped
        self.answer_s = None  # until the first response byte, or the close if none came

    def first(self):
        return self.responses[0] if self.responses else None

    def outcome(self):
        if self.responses:
            return str(self.responses[0].status)
        if self.reset:
            return "reset"
        if self.closed:
            return "close"
        return self.error or "nothing"


def exchange(port, data, timeout=10.0, responses=1):
    """Sends DATA on a new connection while reading what comes back (a server may answer early,
    e.g. 431 in the middle of huge headers, and close); stops after RESPONSES complete responses,
    the close, or TIMEOUT seconds."""
    ex = Exchange()
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        sock = socket.create_connection((HOST, port), timeout=min(5.0, timeout))
    except OSError as e:
        ex.error = f"connect: {e.strerror or e}"
        ex.elapsed = time.monotonic() - t0
        return ex
    parser = ResponseParser()
    view = memoryview(data)
    writing = len(data) > 0
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, READ | (WRITE if writing else 0))
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                ex.error = "timeout"
                break
            for _, ev in sel.select(deadline - now):
                if ev & READ:
                    try:
                        chunk = sock.recv(1 << 18)
                    except BlockingIOError:
                        chunk = None
                    except ConnectionResetError:
                        ex.reset, chunk = True, b""
                    if chunk == b"":
                        ex.closed = True
                    elif chunk:
                        if ex.answer_s is None:
                            ex.answer_s = time.monotonic() - t0
                        ex.received += len(chunk)
                        parser.feed(chunk)
                if ev & WRITE and writing:
                    try:
                        ex.sent += sock.send(view[ex.sent:ex.sent + (1 << 18)])
                    except BlockingIOError:
                        pass
                    except (BrokenPipeError, ConnectionResetError) as e:
                        ex.send_error = type(e).__name__
                        writing = False
                    if ex.sent >= len(data):
                        writing = False
                    if not writing and not ex.closed:
                        sel.modify(sock, READ)
            if ex.closed:
                parser.eof()
                if ex.answer_s is None:
                    ex.answer_s = time.monotonic() - t0
                break
            if len(parser.done) >= responses:
                break
    finally:
        sel.close()
        sock.close()
    ex.responses = parser.done
    ex.elapsed = time.monotonic() - t0
    return ex


def request(method, path, body=b"", headers=(), key=None, length=True, close=True):
    """The bytes of one request; LENGTH=False leaves Content-Length out."""
    if isinstance(body, str):
        body = body.encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}"]
    if key:
        lines.append(f"Authorization: Bearer {key}")
    if body or method == "POST":
        if not any(h.lower().startswith("content-type:") for h in headers):
            lines.append("Content-Type: application/json")
        if length:
            lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    lines += list(headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def post_json(port, path, obj, key=KEY, timeout=30.0):
    body = obj if isinstance(obj, (str, bytes)) else json.dumps(obj)
    return exchange(port, request("POST", path, body, key=key), timeout)


def get(port, path, key=None, timeout=10.0):
    return exchange(port, request("GET", path, key=key), timeout)


def metric_sum(text, name):
    """Sum of a Prometheus metric's samples over all label sets (None when absent)."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            try:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
            except ValueError:
                pass
    return total if seen else None


def wait_idle(port, timeout):
    """Polls /metrics until no request runs or waits; returns (idle, seconds, metrics text)."""
    t0 = time.monotonic()
    text = ""
    while True:
        r = get(port, "/metrics", timeout=5).first()
        text = bytes(r.body).decode("utf-8", "replace") if r and r.status == 200 else ""
        busy = (metric_sum(text, "kvserve:num_requests_running") or 0) + \
               (metric_sum(text, "kvserve:num_requests_waiting") or 0)
        if text and busy == 0:
            return True, time.monotonic() - t0, text
        if time.monotonic() - t0 >= timeout:
            return False, time.monotonic() - t0, text
        time.sleep(0.2)


def stream(port, path, body, abort_after=None, timeout=60.0, key=None):
    """One streaming request read event by event (http.client: the SSE body is chunked).

    ABORT_AFTER: after that many events with text, the connection is reset (SO_LINGER 0), the
    way a client process that dies or a proxy that gives up leaves. Returns a dict with status,
    ttft (s to the first event with text), events (with text), done ([DONE] seen), usage,
    aborted, error."""
    out = {"status": None, "ttft": None, "events": 0, "done": False, "usage": None,
           "aborted": False, "error": None}
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    t0 = time.monotonic()
    try:
        conn.request("POST", path, json.dumps(body), headers)
        sock = conn.sock  # getresponse() drops it from conn when the server says it will close
        resp = conn.getresponse()
        out["status"] = resp.status
        if resp.status != 200:
            out["error"] = f"HTTP {resp.status}: {resp.read()[:200]!r}"
            return out
        while True:
            line = resp.readline()
            if not line:
                out["error"] = "stream ended without [DONE]"
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                out["done"] = True
                break
            ev = json.loads(data)
            if ev.get("usage"):
                out["usage"] = ev["usage"]
            text = ""
            for c in ev.get("choices") or []:
                text += c.get("text") or (c.get("delta") or {}).get("content") or ""
            if text:
                out["events"] += 1
                if out["ttft"] is None:
                    out["ttft"] = time.monotonic() - t0
            if abort_after and out["events"] >= abort_after:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                resp.close()
                out["aborted"] = True
                break
    except (OSError, http.client.HTTPException, ValueError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return out


def health_latencies(port, n, budget=60.0):
    """Up to N sequential GET /health, each on a new connection (connect + request + response);
    a server that stops answering ends the series after BUDGET seconds, not N timeouts."""
    lat, bad = [], []
    end = time.monotonic() + budget
    for _ in range(n):
        left = end - time.monotonic()
        if left <= 0:
            bad.append("not sent (budget spent)")
            continue
        ex = get(port, "/health", timeout=min(5.0, left))
        r = ex.first()
        if r and r.status == 200:
            lat.append(ex.elapsed)
        else:
            bad.append(ex.outcome())
    return lat, bad


# ---------------------------------------------------------------------------------------------
# Many connections from one selector thread: idle keep-alive ones and slowloris ones.

class Conn:
    __slots__ = ("kind", "sock", "state", "t_open", "out", "parser", "next_send", "pos",
                 "first_line", "rx")

    def __init__(self, kind, sock):
        self.kind, self.sock = kind, sock
        self.state = "connecting"
        self.t_open = time.monotonic()
        self.out = bytearray()
        self.parser = ResponseParser() if kind == "idle" else None
        self.next_send = 0.0
        self.pos = 0
        self.first_line = None
        self.rx = bytearray()


# A header that never ends: slowloris connections trickle it one byte at a time.
SLOW_HEADER = b"X-Slow: 0123456789abcdef\r\n"


class Crowd:
    """N_IDLE keep-alive connections that sent one GET /health, read its answer and stay open,
    and N_SLOW connections that send a request line and then one header byte every SLOW_EVERY
    seconds. With REOPEN a slow connection the server ends is replaced at once (and counted)."""

    def __init__(self, port, n_idle, n_slow, slow_every, reopen, parallel_connects=64):
        self.port, self.n_idle, self.n_slow = port, n_idle, n_slow
        self.slow_every, self.reopen = slow_every, reopen
        # Connects in flight at once: more would overflow the accept backlog and leave SYNs to
        # the kernel's 1 s, 3 s, ... retries, which measures the client instead of the server.
        self.parallel = parallel_connects
        self.sel = selectors.DefaultSelector()
        self.to_open = ["idle"] * n_idle + ["slow"] * n_slow
        self.connecting = 0
        self.conns = set()
        self.idle_ok = 0
        self.idle_failed = collections.Counter()
        self.idle_closed = []        # seconds after open at which the server closed an idle one
        self.slow_ended = []         # (outcome, lifetime s)
        self.slow_connect_failed = collections.Counter()
        self.reopens = 0
        self.unexpected = 0          # bytes an idle connection got without asking
        self.t_start = None
        self.t_opened = None         # when the first wave was fully open
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    # -- public --
    def start(self):
        self.t_start = time.monotonic()
        self._thread.start()

    def wait_opened(self, timeout):
        end = time.monotonic() + timeout
        while self.t_opened is None and time.monotonic() < end and self._thread.is_alive():
            time.sleep(0.05)
        return self.t_opened is not None

    def stop(self):
        """Stops sending and reopening; the sockets stay open until close_all()."""
        self._stop.set()
        self._thread.join()

    def close_all(self):
        for c in list(self.conns):
            self._drop(c)
        self.sel.close()

    def idle_waiting(self):
        """Idle connections still waiting for their /health answer (or for their connect)."""
        return sum(1 for c in list(self.conns)
                   if c.kind == "idle" and c.state in ("connecting", "waiting")) + \
            sum(1 for k in list(self.to_open) if k == "idle")

    def open_counts(self):
        states = collections.Counter((c.kind, c.state) for c in self.conns)
        return states[("idle", "idle")], states[("slow", "trickling")]

    # -- loop --
    def _run(self):
        next_tick = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            while self.to_open and self.connecting < self.parallel:
                self._open(self.to_open.pop())
            if self.t_opened is None and not self.to_open and self.connecting == 0 and \
                    not any(c.state == "waiting" for c in self.conns):
                self.t_opened = now
            if now >= next_tick:
                next_tick = now + 0.1
                for c in self.conns:
                    if c.state == "trickling" and now >= c.next_send:
                        c.next_send += self.slow_every
                        c.out.append(SLOW_HEADER[c.pos % len(SLOW_HEADER)])
                        c.pos += 1
                        self._flush(c)
            for key, ev in self.sel.select(0.05):
                c = key.data
                if c.sock is None:
                    continue
                if ev & WRITE:
                    if c.state == "connecting":
                        self._connected(c)
                    elif c.out:
                        self._flush(c)
                if ev & READ and c.sock is not None:
                    self._readable(c)

    def _open(self, kind):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex((HOST, self.port))
        c = Conn(kind, s)
        if err not in (0, 115):  # 115: EINPROGRESS
            self._fail(c, os.strerror(err))
            s.close()
            return
        self.connecting += 1
        self.conns.add(c)
        self.sel.register(s, WRITE, c)

    def _connected(self, c):
        self.connecting -= 1
        c.state = "connected"  # no longer counted as connecting, whatever comes next
        err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._fail(c, os.strerror(err))
            self._drop(c)
            return
        if c.kind == "idle":
            c.out += request("GET", "/health", close=False, headers=("Connection: keep-alive",))
            c.state = "waiting"
        else:
            c.out += b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            c.state = "trickling"
            c.next_send = time.monotonic() + self.slow_every
        self._flush(c)

    def _flush(self, c):
        try:
            n = c.sock.send(c.out)
            del c.out[:n]
        except BlockingIOError:
            pass
        except OSError:
            pass  # the read side sees the close and records it
        self.sel.modify(c.sock, READ | (WRITE if c.out else 0), c)

    def _readable(self, c):
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = None  # reset
        now = time.monotonic()
        if data:
            if c.kind == "idle":
                if c.state == "waiting":
                    c.parser.feed(data)
                    if c.parser.done:
                        st = c.parser.done[0].status
                        if st == 200:
                            c.state = "idle"
                            self.idle_ok += 1
                        else:
                            self._fail(c, f"HTTP {st}")
                            c.state = "answered-non-200"
                else:
                    self.unexpected += len(data)
            else:
                c.rx += data[:256]
                if c.first_line is None and b"\r\n" in c.rx:
                    c.first_line = bytes(c.rx.split(b"\r\n", 1)[0]).decode("latin-1")
            return
        # Closed by the server (b"") or reset (None).
        how = "close" if data == b"" else "reset"
        if c.kind == "idle":
            if c.state == "idle":
                self.idle_closed.append(now - c.t_open)
            elif c.state == "waiting":
                self._fail(c, how)
        else:
            line = c.first_line or (bytes(c.rx).split(b"\r\n", 1)[0].decode("latin-1")
                                    if c.rx else None)
            status = line.split(" ")[1] if line and len(line.split(" ")) > 1 else None
            self.slow_ended.append((status or how, now - c.t_open))
            if self.reopen and not self._stop.is_set():
                self.reopens += 1
                self.to_open.append("slow")
        self._drop(c)

    def _fail(self, c, why):
        if c.kind == "idle":
            self.idle_failed[why] += 1
        else:
            self.slow_connect_failed[why] += 1

    def _drop(self, c):
        if c.sock is None:
            return
        if c.state == "connecting":
            self.connecting -= 1
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
        c.sock = None
        self.conns.discard(c)


# ---------------------------------------------------------------------------------------------
# Experiment "table"

def error_str(r):
    if r is None:
        return ""
    t, m, p = r.error()
    return f" {t}: {(m or '')[:100]}" if t or m else ""


def row_big_headers(ctx):
    # ~100-byte filler lines up to 50 MB; Authorization goes first so that a server which reads
    # everything before routing would answer 200.
    line = "X-Filler-{:07d}: " + "a" * 80 + "\r\n"
    n = 50 * 1024 * 1024 // len(line.format(0))
    filler = "".join(line.format(i) for i in range(n)).encode()
    head = request("GET", "/v1/models", key=KEY)[:-2]  # without the blank line that ends it
    data = head + filler + b"\r\n"
    outcomes, sent_mb, secs = [], [], []
    with RssSampler(ctx.srv.pid, 0.1) as rs:
        for _ in range(9):
            ex = exchange(ctx.port, data, timeout=20)
            outcomes.append(ex.outcome() + (f" ({ex.send_error})" if ex.send_error else ""))
            sent_mb.append(round(ex.sent / 2**20, 2))
            secs.append(round(ex.elapsed, 3))
    del data, filler
    return {"behaviour": f"{tally(outcomes)}; sent {min(sent_mb)}-{max(sent_mb)} MB of "
                         f"{len(head) / 2**20 + n * len(line.format(0)) / 2**20:.0f}; "
                         f"{min(secs)}-{max(secs)} s each; peak RSS {fmt_mib(rs.peak_mib())} MiB",
            "outcomes": outcomes, "sent_mb": sent_mb, "seconds": secs,
            "rss_peak_mib": rs.peak_mib()}


def row_slowloris(ctx, n=200, every=2.0, cap=40.0):
    crowd = Crowd(ctx.port, 0, n, every, reopen=False)
    crowd.start()
    lat, bad = [], []
    t0 = time.monotonic()
    next_health = t0 + 3.0
    # The /health probes run while the slow connections are open: 10 of them, 3 s apart.
    while time.monotonic() - t0 < cap:
        if len(lat) + len(bad) < 10 and time.monotonic() >= next_health:
            next_health += 3.0
            ex = get(ctx.port, "/health", timeout=10)
            (lat.append(ex.elapsed) if ex.first() and ex.first().status == 200
             else bad.append(ex.outcome()))
        if crowd.t_opened and not crowd.conns and len(lat) + len(bad) >= 10:
            break
        time.sleep(0.05)
    crowd.stop()
    still = len(crowd.conns)
    crowd.close_all()
    ends = [s for _, s in crowd.slow_ended]
    how = tally(o for o, _ in crowd.slow_ended) or "none ended"
    times = (f" after {statistics.median(ends):.1f} s (min {min(ends):.1f}, max {max(ends):.1f})"
             if ends else "")
    return {"behaviour": f"slow conns ended: {how}{times}; still open at "
                         f"{time.monotonic() - t0:.0f} s: {still}; /health during: "
                         f"{len(lat)}/10 ok, max {ms(max(lat, default=None))} ms"
                         + (f", failed {tally(bad)}" if bad else "")
                         + (f"; connect failed {dict(crowd.slow_connect_failed)}"
                            if crowd.slow_connect_failed else ""),
            "ended": crowd.slow_ended, "still_open": still, "health_s": lat,
            "health_failed": bad}


def row_sigterm_trickle(ctx):
    srv = Server(ctx.args, [], "table-sigterm")
    sock = socket.create_connection((HOST, srv.port))
    got = {"seen": None, "at": None}
    stop = threading.Event()
    t_term = [None]

    def trickle():
        data = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + SLOW_HEADER * 100
        i = 0
        sock.settimeout(1.0)
        while not stop.is_set():
            try:
                sock.send(data[i:i + 1])
                i += 1
                r = sock.recv(4096)  # times out after 1 s: that is the 1 byte/s pace
                got["seen"] = r.split(b"\r\n", 1)[0].decode("latin-1") if r else "close"
                break
            except socket.timeout:
                continue
            except OSError as e:
                got["seen"] = type(e).__name__
                break
        if t_term[0] is not None:
            got["at"] = time.monotonic() - t_term[0]

    th = threading.Thread(target=trickle, daemon=True)
    th.start()
    time.sleep(2.5)
    t_term[0] = time.monotonic()
    res = srv.stop(cap=60)
    th.join(timeout=3)  # the exit closes the socket; give the client a moment to see it
    stop.set()
    th.join()
    sock.close()
    client = (f"; client saw {got['seen']} {got['at']:.2f} s after SIGTERM"
              if got["seen"] and got["at"] is not None else "; client saw nothing")
    return {**res, "behaviour": res["behaviour"] + client, "client_saw": got["seen"],
            "client_at_s": got["at"]}


def row_range_metrics(ctx):
    plain = get(ctx.port, "/metrics")
    rng = "Range: bytes=" + ",".join(["0-"] * 2700)
    ex = exchange(ctx.port, request("GET", "/metrics", headers=(rng,)), timeout=15)
    r = ex.first()
    return {"behaviour": f"{ex.outcome()}, {ex.received} B vs {plain.received} B for plain "
                         f"/metrics ({ex.received / max(plain.received, 1):.1f}x)",
            "status": r.status if r else None, "bytes": ex.received, "plain_bytes": plain.received}


def row_range_tokenize(ctx):
    ex = exchange(ctx.port, request("POST", "/tokenize", '{"prompt":"hello"}', key=KEY,
                                    headers=("Range: bytes=0-3",)), timeout=10)
    r = ex.first()
    valid = r is not None and r.json() is not None
    return {"behaviour": f"{ex.outcome()}, body valid JSON: {'yes' if valid else 'no'}"
                         + (f" ({bytes(r.body[:40])!r})" if r and not valid else ""),
            "status": r.status if r else None, "valid_json": valid}


def row_fanout(ctx):
    def body_with(content):
        return json.dumps({"messages": [{"role": "user", "content": content}], "n": 64,
                           "logprobs": True, "top_logprobs": 20, "max_tokens": 1000},
                          separators=(",", ":"))
    # A 136-byte request: how much work and memory a tiny body can ask for.
    body = body_with(("Tell me a long story about a little dog. " * 3)[:136 - len(body_with(""))])
    before = ctx.srv.rss()
    with RssSampler(ctx.srv.pid, 0.1) as rs:
        ex = exchange(ctx.port, request("POST", "/v1/chat/completions", body, key=KEY),
                      timeout=120)
        time.sleep(0.5)  # what the server frees after the answer shows in "after"
    after = ctx.srv.rss()
    return {"behaviour": f"{ex.outcome()}{error_str(ex.first())}, {ex.received / 2**20:.2f} MB "
                         f"in {ex.elapsed:.1f} s ({len(body)} B body); RSS {fmt_mib(before)} -> "
                         f"peak {fmt_mib(rs.peak_mib())} -> {fmt_mib(after)} MiB",
            "status": ex.first().status if ex.first() else None, "bytes": ex.received,
            "seconds": ex.elapsed, "rss_peak_mib": rs.peak_mib()}


def row_pipelined(ctx):
    one = request("GET", "/health", close=False)
    ex = exchange(ctx.port, one + one, timeout=5, responses=2)
    return {"behaviour": f"{len(ex.responses)} of 2 responses ("
                         f"{', '.join(str(r.status) for r in ex.responses) or 'none'})"
                         + (f"; then {ex.error}" if len(ex.responses) < 2 and ex.error else ""),
            "responses": len(ex.responses)}


def row_many_prompts(ctx):
    ex = post_json(ctx.port, "/v1/completions",
                   {"prompt": [f"hello {i}" for i in range(321)], "max_tokens": 1})
    r = ex.first()
    ra = r.header("retry-after") if r else None
    return {"behaviour": f"{ex.outcome()}{error_str(r)}; Retry-After: {ra or 'none'}",
            "status": r.status if r else None, "error": r.error() if r else None,
            "retry_after": ra}


def row_odd_bodies(ctx):
    a = post_json(ctx.port, "/v1/completions", '{"prompt":"hi","max_tokens":1e400}')
    b = post_json(ctx.port, "/v1/chat/completions",
                  {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                   "response_format": {"type": 5}})
    boundary = "probeboundary"
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nhi\r\n"
            f"--{boundary}--\r\n")
    c = exchange(ctx.port, request("POST", "/v1/completions", form, key=KEY, headers=(
        f"Content-Type: multipart/form-data; boundary={boundary}",)), timeout=10)
    return {"behaviour": f"max_tokens 1e400: {a.outcome()}; response_format type 5: "
                         f"{b.outcome()}; multipart: {c.outcome()}",
            "statuses": [x.outcome() for x in (a, b, c)],
            "errors": [x.first().error() if x.first() else None for x in (a, b, c)]}


def row_tiny_temperature(ctx):
    texts, outs = [], []
    for _ in range(3):
        ex = post_json(ctx.port, "/v1/completions", {"prompt": "Once upon a time",
                                                     "max_tokens": 16, "temperature": 1e-40})
        outs.append(ex.outcome())
        j = ex.first().json() if ex.first() else None
        try:
            texts.append(j["choices"][0]["text"])
        except (TypeError, KeyError, IndexError):
            texts.append(None)
    same = len(set(texts)) == 1 and texts[0] is not None
    return {"behaviour": f"{tally(outs)}; identical: {'yes' if same else 'no'}"
                        + (f" {texts[0]!r}" if same else f" {texts!r}"),
            "statuses": outs, "texts": texts, "identical": same}


def row_connects(ctx, n=200):
    seq, seq_bad = [], []
    for _ in range(n):
        ex = get(ctx.port, "/health", timeout=10)
        (seq.append(ex.elapsed) if ex.first() and ex.first().status == 200
         else seq_bad.append(ex.outcome()))
    conc, conc_bad = [], []
    barrier = threading.Barrier(n)
    lock = threading.Lock()

    def one():
        barrier.wait()
        ex = get(ctx.port, "/health", timeout=15)
        with lock:
            (conc.append(ex.elapsed) if ex.first() and ex.first().status == 200
             else conc_bad.append(ex.outcome()))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def part(name, lat, bad):
        return (f"{name}: max {ms(max(lat, default=None))} p99 {ms(pct(lat, 99))} "
                f"p50 {ms(pct(lat, 50))} ms" + (f", failed {tally(bad)}" if bad else ""))
    return {"behaviour": part("sequential", seq, seq_bad) + "; " + part("concurrent", conc,
                                                                        conc_bad),
            "sequential_s": {"max": max(seq, default=None), "p99": pct(seq, 99),
                             "failed": seq_bad},
            "concurrent_s": {"max": max(conc, default=None), "p99": pct(conc, 99),
                             "failed": conc_bad}}


def row_content_length(ctx):
    # Heads only, sockets left open: a server that waits for a body it will never get shows
    # it as the time until its answer. The three run at once to keep the row under ~35 s.
    cases = [("CL -5", ("Content-Length: -5",)),
             ("CL 1e20", ("Content-Length: 99999999999999999999",)),
             ("no CL", ())]
    res = {}

    def one(name, extra):
        head = request("POST", "/v1/completions", key=KEY, length=False, close=False,
                       headers=extra)
        res[name] = exchange(ctx.port, head, timeout=35)

    threads = [threading.Thread(target=one, args=c) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    parts = []
    for name, _ in cases:
        ex = res[name]
        when = "no answer in 35 s" if ex.answer_s is None else f"{ex.answer_s:.2f} s"
        parts.append(f"{name}: {ex.outcome()}{error_str(ex.first())[:70]} ({when})")
    return {"behaviour": "; ".join(parts),
            "cases": {n: {"outcome": res[n].outcome(), "answer_s": res[n].answer_s}
                      for n, _ in cases}}


def row_two_lengths(ctx):
    body = b'{"prompt":"hello"}'
    head = request("POST", "/tokenize", key=KEY, length=False, headers=(
        f"Content-Length: {len(body)}", f"Content-Length: {len(body) + 5}"))
    ex = exchange(ctx.port, head + body, timeout=10)
    return {"behaviour": f"{ex.outcome()}{error_str(ex.first())}",
            "status": ex.first().status if ex.first() else None}


def row_repetition_penalty(ctx):
    ex = post_json(ctx.port, "/v1/completions", '{"prompt":"hi","max_tokens":4,'
                                                 '"repetition_penalty":1e-320}')
    r = ex.first()
    _, msg, param = r.error() if r else (None, None, None)
    return {"behaviour": f"{ex.outcome()}, param={param!r}" + (f" ({msg[:60]})" if msg else ""),
            "status": r.status if r else None, "param": param}


def row_access_log(ctx):
    srv = Server(ctx.args, ["--api-key", KEY, "--log-format", "json"], "table-log")
    reqs = [request("GET", "/health"), request("GET", "/metrics"),
            request("GET", "/v1/models", key=KEY),
            request("POST", "/tokenize", '{"prompt":"hello"}', key=KEY),
            request("POST", "/v1/completions", '{"prompt":"hi","max_tokens":2}', key=KEY),
            request("GET", "/v1/models")]  # no key: a 401 is a request to log as well
    outs = [exchange(srv.port, r, timeout=10).outcome() for r in reqs]
    time.sleep(0.5)  # loggers may write from another thread
    stop = srv.stop()
    lines = json_lines = 0
    with open(srv.log_path, errors="replace") as f:
        for line in f:
            if "status" in line:
                lines += 1
                try:
                    json_lines += isinstance(json.loads(line), dict)
                except ValueError:
                    pass
    return {"behaviour": f"{lines} access lines ({json_lines} JSON) for {len(reqs)} requests "
                         f"({tally(outs)}); {stop['behaviour']}",
            "access_lines": lines, "json_lines": json_lines, "requests": len(reqs),
            "exit": stop}


TABLE_ROWS = [
    (1, "50 MB headers x9", row_big_headers),
    (2, "slowloris x200", row_slowloris),
    (3, "SIGTERM + trickle", row_sigterm_trickle),
    (4, "Range x2700 /metrics", row_range_metrics),
    (5, "Range on /tokenize", row_range_tokenize),
    (6, "n=64 x top_logprobs", row_fanout),
    (7, "pipelined x2", row_pipelined),
    (8, "321 prompts", row_many_prompts),
    (9, "odd bodies", row_odd_bodies),
    (10, "temperature 1e-40", row_tiny_temperature),
    (11, "200 connects", row_connects),
    (12, "bad Content-Length", row_content_length),
    (13, "two Content-Lengths", row_two_lengths),
    (14, "rep. penalty 1e-320", row_repetition_penalty),
    (15, "access log (json)", row_access_log),
]


class TableCtx:
    def __init__(self, args):
        self.args = args
        self.srv = None
        self.port = None

    def start(self):
        self.srv = Server(self.args, ["--api-key", KEY], "table")
        self.port = self.srv.port


def exp_table(args):
    ctx = TableCtx(args)
    ctx.start()
    rows = []
    print(f"\n== table: {args.kvserve} ==")
    print(f"{'#':>2}  {'row':<21} {'s':>6} {'CPU s':>6}  {'RSS MiB':>13}  behaviour",
          flush=True)
    for num, name, fn in TABLE_ROWS:
        if args.rows and num not in args.rows:
            continue
        note = ""
        if not ctx.srv.alive():
            # A crash in an earlier row must not hide what the later rows would show.
            note = f"[server had exited with {ctx.srv.proc.returncode}; restarted] "
            ctx.srv.stop()
            ctx.start()
        idle, _, _ = wait_idle(ctx.port, 10)
        if not idle:
            note += "[server still busy from the row before] "
        before, cpu0 = ctx.srv.rss(), ctx.srv.cpu_s()
        t0 = time.monotonic()
        try:
            res = fn(ctx)
        except Exception as e:  # noqa: BLE001 -- a row's failure is its result
            res = {"behaviour": f"exception {type(e).__name__}: {e}"}
        res["seconds"] = round(time.monotonic() - t0, 2)
        res["rss_before_mib"], res["rss_after_mib"] = before, ctx.srv.rss()
        cpu1 = ctx.srv.cpu_s()
        res["server_cpu_s"] = round(cpu1 - cpu0, 2) if cpu0 is not None and cpu1 is not None \
            else None
        res["server_alive_after"] = ctx.srv.alive()
        if not res["server_alive_after"]:
            note += f"[server exited with {ctx.srv.proc.returncode}] "
        res["behaviour"] = note + res["behaviour"]
        res.update(row=num, name=name)
        rows.append(res)
        rss = f"{fmt_mib(before)}->{fmt_mib(res['rss_after_mib'])}"
        cpu = "-" if res["server_cpu_s"] is None else f"{res['server_cpu_s']:.2f}"
        print(f"{num:>2}  {name:<21} {res['seconds']:>6.1f} {cpu:>6}  {rss:>13}  "
              f"{res['behaviour']}", flush=True)
    stop = ctx.srv.stop()
    print(f"table server: {stop['behaviour']}")
    return {"rows": rows, "exit": stop}


# ---------------------------------------------------------------------------------------------
# Experiment "crowd"

def ttft_runs(port, seeds, budget=60.0):
    out, bad = [], []
    end = time.monotonic() + budget
    for s in seeds:
        left = end - time.monotonic()
        if left <= 0:
            bad.append("not sent (budget spent)")
            continue
        r = stream(port, "/v1/completions", {"prompt": words(200, s), "max_tokens": 16,
                                            "stream": True}, timeout=min(20.0, left))
        (out.append(r["ttft"]) if r["ttft"] is not None and not r["error"]
         else bad.append((r["error"] or "no text")[:60]))
    return out, bad


def exp_crowd(args):
    srv = Server(args, ["--idle-timeout", "600"], "crowd")
    port = srv.port
    print(f"\n== crowd: {args.kvserve}: {args.idle_conns} idle keep-alive + {args.slow_conns} "
          f"slowloris connections ==", flush=True)
    # Warm-up, not counted: the first request of a fresh server pays one-off costs.
    health_latencies(port, 1)
    ttft_runs(port, [-1])
    rss0 = srv.rss()
    h0, h0_bad = health_latencies(port, 50)
    t0, t0_bad = ttft_runs(port, range(5))
    crowd = Crowd(port, args.idle_conns, args.slow_conns, 5.0, reopen=True)
    cpu0, tc0 = srv.cpu_s(), time.monotonic()
    crowd.start()
    # A server that gives each connection a thread may never answer the later ones: 60 s.
    opened = crowd.wait_opened(timeout=60)
    open_s = (crowd.t_opened - crowd.t_start) if opened else None
    idle_open_at_start = crowd.idle_ok
    unanswered = crowd.idle_waiting()
    rss1 = srv.rss()
    h1, h1_bad = health_latencies(port, 50)
    t1, t1_bad = ttft_runs(port, range(100, 105))  # other prompts: no prefix-cache hits
    # Hold the crowd long enough for header timeouts to cut (and the crowd to reopen) slowloris
    # connections, then count what survived.
    while time.monotonic() - (crowd.t_opened or crowd.t_start) < args.crowd_hold:
        time.sleep(0.2)
    rss2 = srv.rss()
    cpu1, tc1 = srv.cpu_s(), time.monotonic()
    crowd_cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
    crowd.stop()  # first: the loop thread must not change the connection set while we count
    idle_open, slow_open = crowd.open_counts()
    stop = srv.stop()  # with the crowd still connected: shutdown must not wait on them
    crowd.close_all()

    def med(x):
        return statistics.median(x) if x else None

    def ratio(a, b):
        return f"{b / a:.2f}x" if a and b else "-"
    print(f"{'':<22}{'idle server':>14}{'with crowd':>14}{'ratio':>8}")
    print(f"{'/health median ms':<22}{ms(med(h0)):>14}{ms(med(h1)):>14}"
          f"{ratio(med(h0), med(h1)):>8}")
    print(f"{'/health p90 ms':<22}{ms(pct(h0, 90)):>14}{ms(pct(h1, 90)):>14}"
          f"{ratio(pct(h0, 90), pct(h1, 90)):>8}")
    print(f"{'TTFT median ms':<22}{ms(med(t0)):>14}{ms(med(t1)):>14}{ratio(med(t0), med(t1)):>8}")
    print(f"{'RSS MiB':<22}{fmt_mib(rss0):>14}{fmt_mib(rss1):>14}")
    if h0_bad or h1_bad or t0_bad or t1_bad:
        print(f"failed: /health {tally(h0_bad)} | {tally(h1_bad)}; TTFT {tally(t0_bad)} | "
              f"{tally(t1_bad)}")
    print(f"opening the crowd: {'-' if open_s is None else f'{open_s:.2f}'} s; idle connections "
          f"answered 200: {idle_open_at_start}/{args.idle_conns}"
          + (f", failed: {dict(crowd.idle_failed)}" if crowd.idle_failed else "")
          + (f", no answer within 60 s: {unanswered}" if unanswered else ""))
    print(f"at the end: idle connections still open {idle_open}/"
          f"{args.idle_conns} (server closed {len(crowd.idle_closed)}); slowloris open "
          f"{slow_open}/{args.slow_conns}, cut {len(crowd.slow_ended)} times ("
          f"{tally(o for o, _ in crowd.slow_ended) or 'never'}"
          + (f", median after {statistics.median(s for _, s in crowd.slow_ended):.1f} s"
             if crowd.slow_ended else "")
          + f"), reopened {crowd.reopens}"
          + (f", reconnects failed: {dict(crowd.slow_connect_failed)}"
             if crowd.slow_connect_failed else "") + f"; RSS {fmt_mib(rss2)} MiB")
    if crowd_cpu is not None:
        print(f"server CPU while the crowd was open: {crowd_cpu:.2f} s in {tc1 - tc0:.1f} s "
              f"(loaded measurements included)")
    print(f"crowd server: {stop['behaviour']} (SIGTERM with the crowd connected)")
    return {"idle_conns": args.idle_conns, "slow_conns": args.slow_conns,
            "baseline": {"health_s": h0, "ttft_s": t0, "rss_mib": rss0,
                         "failed": h0_bad + t0_bad},
            "loaded": {"health_s": h1, "ttft_s": t1, "rss_mib": rss1,
                       "failed": h1_bad + t1_bad},
            "health_median_ratio": (med(h1) / med(h0)) if h0 and h1 else None,
            "ttft_median_ratio": (med(t1) / med(t0)) if t0 and t1 else None,
            "open_s": open_s, "idle_answered": idle_open_at_start,
            "idle_unanswered": unanswered,
            "idle_failed": dict(crowd.idle_failed), "idle_still_open": idle_open,
            "idle_closed_by_server_after_s": crowd.idle_closed, "slow_still_open": slow_open,
            "slow_ended": crowd.slow_ended, "slow_reopens": crowd.reopens,
            "slow_connect_failed": dict(crowd.slow_connect_failed),
            "unexpected_bytes_on_idle": crowd.unexpected, "rss_end_mib": rss2,
            "server_cpu_s_crowd": crowd_cpu, "crowd_wall_s": tc1 - tc0, "exit": stop}


# ---------------------------------------------------------------------------------------------
# Experiment "honest"

def exp_honest(args, clients=32):
    srv = Server(args, [], "honest")
    port = srv.port
    print(f"\n== honest: {args.kvserve}: {clients} streaming clients for {args.seconds:.0f} s ==",
          flush=True)
    results = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(k):
        i = 0
        while not stop.is_set():
            body = {"messages": [{"role": "user", "content": words(100, k * 100000 + i)}],
                    "max_tokens": 64, "temperature": i % 2, "stream": True,
                    "stream_options": {"include_usage": True}}
            r = stream(port, "/v1/chat/completions", body,
                       abort_after=3 if i % 4 == 3 else None, timeout=120)
            with lock:
                results.append(r)
            i += 1

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    t0 = time.monotonic()
    cpu0 = srv.cpu_s()
    with RssSampler(srv.pid, 1.0) as rs:
        for t in threads:
            t.start()
        time.sleep(args.seconds)
        stop.set()
        for t in threads:
            t.join(timeout=130)
        wall = time.monotonic() - t0
        cpu1 = srv.cpu_s()
        idle, idle_s, metrics = wait_idle(port, 10)
    rss = [k / 1024 for _, k in rs.samples]
    exit_ = srv.stop()

    completed = [r for r in results if r["done"] and not r["error"]]
    aborted = [r for r in results if r["aborted"]]
    errors = [r for r in results if r["error"] and not r["aborted"]]
    ttfts = [r["ttft"] for r in completed if r["ttft"] is not None]
    events = sum(r["events"] for r in results)
    usage_tokens = sum((r["usage"] or {}).get("completion_tokens", 0) for r in completed)
    curve = [rss[min(len(rss) - 1, int(round(p / 10 * (len(rss) - 1))))] for p in range(11)] \
        if rss else []
    block_lines = [line for line in metrics.splitlines()
                   if "block" in line and not line.startswith("#")]
    def blocks(state):
        return metric_sum("\n".join(line for line in block_lines if f'state="{state}"' in line),
                          "kvserve:kv_cache_blocks")
    in_use, free, cached = blocks("in_use"), blocks("free"), blocks("cached")
    total = metric_sum(metrics, "kvserve:kv_cache_blocks_total")
    all_back = in_use == 0 and free is not None and cached is not None and free + cached == total

    print(f"requests: {len(results)} ({len(completed)} completed, {len(aborted)} cut off by us, "
          f"{len(errors)} errors" + (f": {tally(e['error'][:60] for e in errors)}" if errors
                                     else "") + ")")
    print(f"TTFT ms: p50 {ms(pct(ttfts, 50))}  p99 {ms(pct(ttfts, 99))}  (over completed)")
    server_cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
    print(f"generated: {events / wall:.1f} tokens/s (text events over {wall:.1f} s; usage of "
          f"completed: {usage_tokens} tokens); server CPU {server_cpu or 0:.1f} s")
    if rss:
        print(f"RSS MiB: min {min(rss):.1f}  median {statistics.median(rss):.1f}  "
              f"max {max(rss):.1f};  at 0%,10%..100%: " + " ".join(f"{v:.0f}" for v in curve))
    print(f"after the clients stopped: {'idle' if idle else 'NOT idle'} after {idle_s:.1f} s; "
          f"block gauges:")
    for line in block_lines:
        print(f"  {line}")
    print(f"blocks in use once idle: {in_use if in_use is None else int(in_use)}; free + cached "
          f"= total: {'yes, every block is back' if all_back else 'NO'}")
    print(f"honest server: {exit_['behaviour']}")
    return {"clients": clients, "seconds": wall, "requests": len(results),
            "completed": len(completed), "aborted": len(aborted), "errors": len(errors),
            "error_samples": [e["error"] for e in errors[:10]],
            "ttft_p50_s": pct(ttfts, 50), "ttft_p99_s": pct(ttfts, 99),
            "tokens_per_s": events / wall, "usage_completion_tokens": usage_tokens,
            "server_cpu_s": server_cpu,
            "rss_mib": rss, "rss_curve_mib": curve, "idle_after_s": idle_s if idle else None,
            "block_lines": block_lines, "blocks_in_use_idle": in_use, "all_blocks_back": all_back,
            "exit": exit_}


# ---------------------------------------------------------------------------------------------

EXPERIMENTS = {"table": exp_table, "crowd": exp_crowd, "honest": exp_honest}


def main():
    argv = sys.argv[1:]
    server_flags = []
    if "--" in argv:
        i = argv.index("--")
        argv, server_flags = argv[:i], argv[i + 1:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 usage="%(prog)s [options] [-- EXTRA SERVE FLAGS]")
    ap.add_argument("--kvserve", default=os.path.join(root, "build", "kvserve"))
    ap.add_argument("--model", default=None, help="GGUF (default: the embedded model)")
    ap.add_argument("--experiments", default="table,crowd,honest")
    ap.add_argument("--json", default=None, help="write all results here")
    ap.add_argument("--seconds", type=float, default=180, help="honest: duration")
    ap.add_argument("--idle-conns", type=int, default=2000, help="crowd: idle connections")
    ap.add_argument("--slow-conns", type=int, default=500, help="crowd: slowloris connections")
    ap.add_argument("--crowd-hold", type=float, default=30,
                    help="crowd: seconds the crowd stays open before it is counted")
    ap.add_argument("--rows", default="", help="table: only these rows, e.g. 1,4,7")
    ap.add_argument("--log-dir", default=None,
                    help="keep the servers' stderr here (default: a temporary directory)")
    args = ap.parse_args(argv)
    args.server_flags = server_flags
    args.rows = {int(x) for x in args.rows.split(",") if x}
    names = [e for e in args.experiments.split(",") if e]
    for e in names:
        if e not in EXPERIMENTS:
            ap.error(f"unknown experiment {e!r} (have: {', '.join(EXPERIMENTS)})")
    if not os.access(args.kvserve, os.X_OK):
        ap.error(f"not an executable: {args.kvserve}")
    temp_logs = args.log_dir is None
    args.log_dir = args.log_dir or tempfile.mkdtemp(prefix="http_probe_")
    os.makedirs(args.log_dir, exist_ok=True)

    # Thousands of sockets on both ends: the servers inherit this limit from us, so both
    # binaries get the same one.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    print(f"kvserve: {args.kvserve}; model: {args.model or 'embedded'}; extra flags: "
          f"{' '.join(server_flags) or 'none'}; CPU: {cpu_name()} x{os.cpu_count()}; "
          f"RLIMIT_NOFILE {hard}")
    out = {"kvserve": args.kvserve, "model": args.model, "server_flags": server_flags,
           "cpu": cpu_name(), "cpus": os.cpu_count(), "nofile": hard, "experiments": {}}
    try:
        for e in names:
            try:
                out["experiments"][e] = EXPERIMENTS[e](args)
            except Exception as ex:  # noqa: BLE001 -- the other experiments still run
                print(f"{e}: failed: {type(ex).__name__}: {ex}", flush=True)
                out["experiments"][e] = {"failed": f"{type(ex).__name__}: {ex}"}
    finally:
        for s in Server.started:
            if s.alive():
                s.proc.kill()
                s.proc.wait()
        if temp_logs:
            shutil.rmtree(args.log_dir, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
        print(f"\nresults: {args.json}")


if __name__ == "__main__":
    main()
