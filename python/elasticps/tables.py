"""Sparse tables exported as table files: the tables too large to lay out whole in model.safetensors (docs/models.md,
"Large embedding tables").

    tables = elasticps.load_tables("run/model.safetensors")
    emb = tables["dlrm.emb.weight"]
    emb[[3, 1 << 30]]          # rows as a float32 array [2, dim]: stored ones from the file, the others initial
    emb.ids, emb.values        # the stored rows (numpy memmaps), ids ascending

A table file holds the rows a step changed (or --init_from seeded); every other row is its initial value, a pure
function of (seed, table, row) that `initial_row` computes bit for bit as the shards do (common/row_init.h). Needs
numpy.
"""
import json
import math
import os
import struct

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _finalize(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _mix(z):
    return _finalize((z + _GOLDEN) & _MASK)


def _unit(u):
    return float(u >> 11) * 2.0 ** -53


def _log(x):
    """The initializer's own natural logarithm (frexp and a fixed atanh series): the bits depend on no libm."""
    m, e = math.frexp(x)
    if m < 0.7071067811865476:
        m = m * 2
        e = e - 1
    s = (m - 1) / (m + 1)
    s2 = s * s
    p = 1.0 / 29
    for k in range(13, -1, -1):
        p = p * s2 + 1.0 / (2 * k + 1)
    return float(e) * 0.6931471805599453 + 2 * s * p


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def initial_row(seed, table, row, dim, kind="normal", mean=0.0, stddev=1.0, low=-1.0, high=1.0):
    """Row `row` of table `table` (its index among the model's sparse tables) of a job of `seed` before any step
    touched it: `dim` floats (Python floats holding float32 values), exactly as InitialRow computes them."""
    state = _mix(_mix(_mix(seed) ^ table) ^ row)

    def draw():
        nonlocal state
        state = (state + _GOLDEN) & _MASK
        return _finalize(state)

    out = []
    if kind == "uniform":
        return [_f32(low + (high - low) * _unit(draw())) for _ in range(dim)]
    while len(out) < dim:
        while True:
            a = 2 * _unit(draw()) - 1
            b = 2 * _unit(draw()) - 1
            s = a * a + b * b
            if 0 < s < 1:
                break
        f = math.sqrt(-2 * _log(s) / s)
        out.append(_f32(mean + stddev * a * f))
        if len(out) < dim:
            out.append(_f32(mean + stddev * b * f))
    return out


class Table:
    """One sparse table of an export: `name`, `rows` x `dim`, the stored rows `ids` (uint64, ascending) and
    `values` (float32 [len(ids), dim]), both memory-mapped from the table file. A table of unbounded keys has
    `rows` 0 and `unbounded` set: any id below 2^63 - 1 is one of its rows."""

    def __init__(self, name, meta, folder):
        import numpy as np
        self.name = name
        self.rows, self.dim = int(meta["rows"]), int(meta["dim"])
        self.unbounded = self.rows == 0
        self._bound = (1 << 63) - 1 if self.unbounded else self.rows
        self.seed, self.table = int(meta["seed"]), int(meta["table"])
        self.ids = np.load(os.path.join(folder, meta["ids"]), mmap_mode="r")
        self.values = np.load(os.path.join(folder, meta["values"]), mmap_mode="r")
        if self.ids.shape != (int(meta["stored"]),) or self.values.shape != (len(self.ids), self.dim):
            raise ValueError(f"the table file of {name} does not hold its {meta['stored']} rows of {self.dim}")

    def __len__(self):
        return self.rows

    def __getitem__(self, rows):
        """Rows `rows` (an int or a sequence of ints within the table) as float32 [len(rows), dim]."""
        import numpy as np
        single = isinstance(rows, (int, np.integer))
        wanted = np.asarray([rows] if single else rows, dtype=np.uint64)
        if wanted.size and (wanted.max() >= self._bound):
            raise IndexError(f"row {int(wanted.max())} is beyond {self.name}'s {self._bound} rows")
        out = np.empty((len(wanted), self.dim), dtype=np.float32)
        at = np.searchsorted(self.ids, wanted)
        for k, (row, i) in enumerate(zip(wanted.tolist(), at.tolist())):
            if i < len(self.ids) and int(self.ids[i]) == row:
                out[k] = self.values[i]
            else:
                out[k] = initial_row(self.seed, self.table, row, self.dim)
        return out[0] if single else out


def load_tables(model):
    """The tables a job exported as table files, by tensor name ({} when every table is in the safetensors file):
    `model` is a model.safetensors (or its run folder)."""
    path = os.path.join(model, "model.safetensors") if os.path.isdir(model) else model
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    files = json.loads(header.get("__metadata__", {}).get("table_files", "{}"))
    folder = os.path.dirname(os.path.abspath(path))
    return {name: Table(name, meta, folder) for name, meta in files.items()}
