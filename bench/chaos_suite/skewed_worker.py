"""`agent-memory` as a skewed worker runs it, under libfaketime with only the wall
clock faked (DONT_FAKE_MONOTONIC), as on a machine whose clock is off.

Debian 12's libfaketime (0.9.10) then mistranslates an absolute sleep on the
monotonic clock (`clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`, which
Python 3.11's `time.sleep` calls): it subtracts the faked wall-clock start from a
monotonic deadline, hands the kernel a negative time and `time.sleep` raises
EINVAL (upstream libfaketime issue 426). A skewed machine's sleeps are not
skewed, so `time.sleep` here waits on a lock with a timeout instead, which is
the same monotonic wait (`sem_clockwait`) that libfaketime leaves alone. The wall
clock stays faked for everything else in the process (Python, libpq, gRPC).
"""

from __future__ import annotations

import json
import sys
import threading
import time


def monotonic_sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    threading.Event().wait(seconds)


def probe() -> dict[str, float]:
    """What the suite checks before it trusts the fault: this process's wall clock
    (to compare with the suite's own) and how long a 0.1 s sleep and a 0.1 s wait
    on an event last by the monotonic clock."""
    wall = time.time()
    began = time.monotonic()
    time.sleep(0.1)
    slept = time.monotonic() - began
    began = time.monotonic()
    threading.Event().wait(0.1)
    return {"wall": wall, "slept": slept, "waited": time.monotonic() - began}


if __name__ == "__main__":
    time.sleep = monotonic_sleep  # before anything imports it by name
    if sys.argv[1:] == ["--probe"]:
        print(json.dumps(probe()))
        sys.exit(0)
    from services.cli.main import main

    sys.exit(main(sys.argv[1:]))
