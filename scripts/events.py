#!/usr/bin/env python3
"""Reads a job's events: the JSON lines the coordinator appends to RUN_DIR/events.jsonl (docs/events.md).

    scripts/events.py wait RUN_DIR KIND [--min-step N] [--timeout S] [--pid P]
        exits 0 once an event of KIND (with "step" >= N) is in the file; 1 after S seconds (default 600),
        or as soon as process P (the job) is gone without one.
    scripts/events.py show RUN_DIR [KIND]
        prints the events (of KIND), one JSON object per line.

Also a module: EventReader follows the file as it grows (tests/integration/harness.py uses it).
"""
import argparse
import json
import os
import sys
import time


class EventReader:
    """Reads a run dir's events.jsonl as it grows: whole lines only, so a line being written is read once it is
    complete; a line torn by a killed coordinator (ended by its successor) is skipped."""

    def __init__(self, run_dir):
        self.path = os.path.join(run_dir, "events.jsonl")
        self.offset = 0
        self.events = []

    def poll(self):
        """Reads what was appended since the last call; returns every event read so far, in order."""
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.offset:  # a fresh job replaced the file
                    self.offset, self.events = 0, []
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return self.events
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass  # torn
        return self.events


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    wait = sub.add_parser("wait")
    wait.add_argument("run_dir")
    wait.add_argument("kind")
    wait.add_argument("--min-step", type=int, default=None)
    wait.add_argument("--timeout", type=float, default=600)
    wait.add_argument("--pid", type=int, default=None)
    show = sub.add_parser("show")
    show.add_argument("run_dir")
    show.add_argument("kind", nargs="?")
    args = parser.parse_args()

    reader = EventReader(args.run_dir)
    if args.command == "show":
        for e in reader.poll():
            if args.kind is None or e["event"] == args.kind:
                print(json.dumps(e))
        return 0

    def found():
        return any(e["event"] == args.kind and (args.min_step is None or e.get("step", -1) >= args.min_step)
                   for e in reader.poll())
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if found():
            return 0
        if args.pid is not None and not alive(args.pid):
            return 0 if found() else 1
        time.sleep(0.05)
    return 1


if __name__ == "__main__":
    sys.exit(main())
