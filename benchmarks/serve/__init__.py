"""``toolprep serve`` under load: what serving ACP over WebSocket costs next to stdio.

The daemon serves the same agent ``toolprep acp`` runs on stdio, but each
connection adds a WebSocket handshake, framing, a sender thread and the
daemon's session pool (frames fanned out once-encoded, kept for replay), and
sessions outlive their connections. This measures what that costs, in the
same run and on the same machine as the stdio figures it is compared with:

1. ``stdio``: ``benchmarks.load``'s ``cli`` run (``toolprep acp --no-persist``
   over two pipes), the baseline;
2. ``serve``: the daemon with ``--no-persist``, ``--sessions`` sessions spread
   round-robin over ``--connections`` WebSocket clients (a reader thread each),
   every session looping prompts against the loopback provider for
   ``--duration`` s after ``--warmup`` s;
3. ``serve+db``: the same with ``--data-dir`` in a temporary directory, so every
   frame and turn is journaled to SQLite.

Per run: provider events/s delivered against offered (``/stats`` deltas),
frames/s, turns/s, preparing-card latency (the provider's send stamp in the
tool-call id -> the frame read off the socket), the daemon's CPU per provider
event and per turn (summed over its process tree from ``/proc``: the front and
its workers), its processes and threads, and RSS per idle session. After the
window (prompts stopped, running turns answered) ~20 sessions are loaded again
on fresh connections: connect -> first replayed frame and -> the load reply.
The persisted run also gives the SQLite cost per turn (its CPU per turn minus
the unpersisted run's) and the database size per turn.

4. ``load``: a ``--load-turns``-turn session is written with ``SessionStore`` and
   ``StoreJournal`` (as ``benchmarks.store`` does), a daemon is started on that
   data directory, and ``session/load`` is timed five times, each on a fresh
   connection (request sent -> reply read, every replayed frame read before
   it). The first load reads the store (cold); after it the session is live in
   the daemon, so the others measure the live path (warm).

The load generator (the clients) shares the machine with the daemon and the
loopback provider; its CPU is printed (``client``) beside the daemon's, and a
run where the provider got fewer than 95 % of the offered events out is
flagged as saturated rather than hidden.

    .venv/bin/python -m benchmarks.serve [--sessions 1000] [--connections 100] [--rate 20]
        [--duration 10] [--warmup 3] [--workers N] [--provider anthropic|openai]
        [--load-turns 500] [--report path]
"""
