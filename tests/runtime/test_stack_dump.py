"""Dump signals: every thread's stack, written while the others run and the main thread is
blocked, and the process unharmed.

A worker's main thread waits in a read that never returns to the interpreter, and the
kernel hands a process-directed signal to whichever thread it likes; the dump must come
anyway. The other threads recurse and return without pause, so their frames come and
go while the dumps walk them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

_PROGRAM = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from toolprep.runtime.process.stop_signals import dump_stacks_on_signal

    dump_stacks_on_signal()
    stop = threading.Event()
    release_read, release_write = os.pipe()

    def churn(depth):
        return 0 if depth == 0 else 1 + churn(depth - 1)

    def busy():
        while not stop.is_set():
            churn(60)

    def dumped(signum):
        log = open(sys.argv[1]).read()
        return "in churn" in log and "in blocked_main" in log

    def signaller():
        # Signalled again until a dump shows the main thread blocked: the first may come
        # before it got there.
        for signum in (signal.SIGUSR1, signal.SIGQUIT):
            deadline = time.monotonic() + 60
            while not dumped(signum) and time.monotonic() < deadline:
                open(sys.argv[1], "w").close()
                os.kill(os.getpid(), signum)
                time.sleep(0.5)
            if not dumped(signum):
                os._exit(3)
        os.write(release_write, b"x")

    def blocked_main():
        os.read(release_read, 1)  # returns only when the signaller has seen both dumps

    threads = [threading.Thread(target=busy) for _ in range(3)]
    threads.append(threading.Thread(target=signaller))
    for thread in threads:
        thread.start()
    blocked_main()
    stop.set()
    for thread in threads:
        thread.join()
    dump_stacks_on_signal(install=False)
    print("done")
    """
)


def test_a_dump_comes_while_the_main_thread_is_blocked_and_others_run(tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    with log.open("a") as stderr:  # appending: the signaller empties it between dumps
        done = subprocess.run(
            [sys.executable, "-c", _PROGRAM, str(log)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=150,
        )
    assert done.returncode == 0, log.read_text()[-3000:]
    assert done.stdout == "done\n"
