"""Reads a run dir's metrics.csv: one row per completed training step, written by the coordinator
(docs/operations.md, "Training curves").

    from metrics import read_metrics
    rows = read_metrics(run_dir)   # [{"step": 1, "epoch": 0.04, "loss": 2.3, ..., "vws_per_worker": {0: 4, 2: 4}}, ...]

Empty fields are None: loss (no shard reported it), test_accuracy and test_loss (not evaluated at that step),
samples_per_s (the first step, and the first after a rollback or a coordinator restart).

scripts/plot_run.py draws them; tests/integration/harness.py reads them for the tests.
"""
import csv
import os

COLUMNS = ("step", "epoch", "loss", "lr", "test_accuracy", "test_loss", "samples_per_s", "workers", "vws_per_worker",
           "wall_time")
# The columns that are the same bits in every placement; the others describe the placement.
TRAINING_COLUMNS = ("step", "epoch", "loss", "lr", "test_accuracy", "test_loss")


class MetricsError(Exception):
    """metrics.csv is missing or not in the coordinator's format; the message names the file and the line."""


def _optional_float(text):
    return None if text == "" else float(text)


def _vws_per_worker(text):
    """'w0:4 w2:4' -> {0: 4, 2: 4}."""
    out = {}
    for item in text.split():
        worker, sep, count = item.partition(":")
        if not worker.startswith("w") or not sep:
            raise ValueError(f"'{item}' is not w<id>:<count>")
        out[int(worker[1:])] = int(count)
    return out


PARSERS = {"step": int, "epoch": float, "loss": _optional_float, "lr": float, "test_accuracy": _optional_float,
           "test_loss": _optional_float, "samples_per_s": _optional_float, "workers": int,
           "vws_per_worker": _vws_per_worker, "wall_time": float}


def read_metrics(run_dir):
    """The rows of RUN_DIR/metrics.csv in file order, each a dict of COLUMNS with typed values (None for an empty
    field). Raises MetricsError."""
    path = os.path.join(run_dir, "metrics.csv")
    try:
        with open(path, newline="") as f:
            lines = list(csv.reader(f))
    except FileNotFoundError:
        raise MetricsError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise MetricsError(f"{path}: cannot be read: {e}") from None
    if not lines:
        raise MetricsError(f"{path}: empty (no header)")
    if tuple(lines[0]) != COLUMNS:
        raise MetricsError(f"{path}: line 1: the header is not {','.join(COLUMNS)}")
    rows = []
    for number, fields in enumerate(lines[1:], start=2):
        if len(fields) != len(COLUMNS):
            raise MetricsError(f"{path}: line {number}: {len(fields)} fields, expected {len(COLUMNS)}")
        row = {}
        for name, text in zip(COLUMNS, fields):
            try:
                row[name] = PARSERS[name](text)
            except ValueError as e:
                raise MetricsError(f"{path}: line {number}: column {name}: '{text}' is malformed ({e})") from None
        rows.append(row)
    return rows
