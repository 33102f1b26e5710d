"""The progress bar of a running job, fed with its `progress` events (docs/events.md)."""
import sys
import time
from typing import Optional

try:  # optional
    import tqdm as _tqdm
except ImportError:  # pragma: no cover - depends on the host
    _tqdm = None


def _eta(seconds: Optional[float]) -> str:
    if seconds is None or seconds < 0:
        return "-"
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds < 3600 else f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


class Progress:
    """Shows step, loss, samples/s, workers and ETA: a tqdm bar when tqdm is installed, else one line (rewritten in
    place on a terminal, at most one every 10 s elsewhere). `enabled=False` shows nothing."""

    def __init__(self, enabled: bool = True, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.bar = None
        self.last_line = 0.0
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.shown = False
        self.start_t: Optional[float] = None  # the first progress event's time

    def update(self, event: dict) -> None:
        """`event`: a `progress` event."""
        if not self.enabled:
            return
        step, steps = event.get("step", 0), event.get("steps", 0)
        loss = event.get("loss")
        rate = event.get("samples_per_s") or 0.0
        workers = event.get("workers", 0)
        if _tqdm is not None:
            if self.bar is None:
                self.bar = _tqdm.tqdm(total=steps, unit="step", file=self.stream, dynamic_ncols=True)
            self.bar.n = step
            self.bar.set_postfix(loss=f"{loss:.4f}" if loss is not None else "-", samples_s=f"{rate:.0f}",
                                 workers=workers, refresh=False)
            self.bar.refresh()
            return
        if self.start_t is None:
            self.start_t, self.start_step = event.get("t", 0.0), step
        elapsed, done = event.get("t", 0.0) - self.start_t, step - self.start_step
        eta = elapsed / done * (steps - step) if done > 0 and elapsed > 0 else None
        line = (f"step {step}/{steps}  loss {loss:.4f}  {rate:.0f} samples/s  workers {workers}  ETA {_eta(eta)}"
                if loss is not None else f"step {step}/{steps}  workers {workers}")
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")
            self.stream.flush()
            self.shown = True
        elif now - self.last_line >= 10 or step == steps:
            self.stream.write(line + "\n")
            self.stream.flush()
            self.last_line = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False
