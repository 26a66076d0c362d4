"""Helpers shared by the Python benchmarks in bench/."""
import re
import socket
import subprocess


def cpu_name():
    """The CPU's model name from /proc/cpuinfo (figures are quoted per CPU), else "unknown"."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def free_port():
    """A loopback port that was free a moment ago (for servers that need one given)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LISTENING = re.compile(r"^kvserve: listening on (http://127\.0\.0\.1:(\d+))$")


def start_serve(kvserve, serve_args, stderr):
    """Starts `kvserve serve --port 0 SERVE_ARGS` and waits for its listening line.

    Returns (process, base url, port); stderr goes to the given file. Raises RuntimeError, with
    the line it got, when the server does not start.
    """
    proc = subprocess.Popen([kvserve, "serve", "--port", "0"] + serve_args,
                            stdout=subprocess.PIPE, stderr=stderr, text=True)
    line = proc.stdout.readline().strip()
    m = LISTENING.match(line)
    if not m:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"server did not start: {line!r}")
    return proc, m.group(1), int(m.group(2))
