"""Helpers shared by the Python benchmarks in bench/."""


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
