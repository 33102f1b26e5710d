"""A job's data from Python: (x, y) arrays written as NPY files in the run folder, or file paths passed as they are;
checked in Python before any process starts."""
import os
from typing import Dict, Optional, Tuple

import numpy as np

from .errors import ArgumentError

PathTypes = (str, bytes, os.PathLike)


def _array(value, what: str) -> np.ndarray:
    try:
        import torch
        if isinstance(value, torch.Tensor):
            return value.detach().cpu().numpy()
    except ImportError:  # pragma: no cover
        pass
    try:
        return np.asarray(value)
    except Exception as e:  # noqa: BLE001 - anything numpy cannot take
        raise ArgumentError(f"{what}: not an array ({type(value).__name__}): {e}") from None


def features(value, what: str) -> np.ndarray:
    """Samples as a job reads them from NPY: float32, uint8 or int64 (docs/data.md); float64 and float16 become
    float32, other integers int64."""
    x = _array(value, what)
    if x.ndim < 1 or x.shape[0] == 0:
        raise ArgumentError(f"{what}: no samples (shape {list(x.shape)}): give an array of shape [n, ...]")
    if x.dtype in (np.float32, np.uint8, np.int64):
        return x
    if np.issubdtype(x.dtype, np.floating):
        return x.astype(np.float32)
    if np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_:
        return x.astype(np.int64)
    raise ArgumentError(f"{what}: samples of dtype {x.dtype}: give float32, uint8 or int64 numbers")


def labels(value, n: int, what: str) -> np.ndarray:
    """Class labels (int64 >= 0, shape [n]) or regression targets (float32, shape [n, ...])."""
    y = _array(value, what)
    if y.ndim < 1 or y.shape[0] != n:
        raise ArgumentError(f"{what}: {y.shape[0] if y.ndim else 'no'} labels for {n} samples "
                            f"(shape {list(y.shape)}): give one label per sample")
    if np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_:
        if y.ndim != 1:
            raise ArgumentError(f"{what}: class labels of shape {list(y.shape)}: give one class per sample, "
                                f"shape [{n}]")
        y = y.astype(np.int64)
        if y.min() < 0:
            raise ArgumentError(f"{what}: a negative class label ({int(y.min())}): classes are 0, 1, ...")
        return y
    if np.issubdtype(y.dtype, np.floating):
        return y.astype(np.float32)
    raise ArgumentError(f"{what}: labels of dtype {y.dtype}: give integer classes or float targets")


class Prepared:
    """One data set of a job: its flags (--train_data=... or --test_data=...) and, for arrays, the arrays (to check
    the model on)."""

    def __init__(self, flags: Dict[str, str], x: Optional[np.ndarray] = None, y: Optional[np.ndarray] = None):
        self.flags = flags
        self.x = x
        self.y = y


def check(data, role: str) -> Prepared:
    """Checks `data` ((x, y) arrays or tensors, a file path, or (data_path, labels_path)) for the role `train`,
    `test` or `data`; arrays are converted, not yet written. ArgumentError names what is wrong."""
    if isinstance(data, PathTypes):
        return Prepared({"data": _existing(data, role)})
    if isinstance(data, (tuple, list)) and len(data) == 2:
        x, y = data
        if isinstance(x, PathTypes) and (y is None or isinstance(y, PathTypes)):
            flags = {"data": _existing(x, role)}
            if y is not None:
                flags["labels"] = _existing(y, role + " labels")
            return Prepared(flags)
        xs = features(x, f"{role} x")
        ys = labels(y, xs.shape[0], f"{role} y")
        return Prepared({}, xs, ys)
    raise ArgumentError(f"{role}: give (x, y) arrays or tensors, a file path (NPY, CSV, IDX, TSV, JSONL), or "
                        f"(data_path, labels_path); got {type(data).__name__}")


def write(prepared: Prepared, folder: str, stem: str) -> Dict[str, str]:
    """Writes prepared arrays as FOLDER/STEM_x.npy and STEM_y.npy; returns {'data': path, 'labels': path} (the
    paths' flags for files given as paths)."""
    if prepared.x is None:
        return dict(prepared.flags)
    os.makedirs(folder, exist_ok=True)
    paths = {"data": os.path.join(folder, stem + "_x.npy"), "labels": os.path.join(folder, stem + "_y.npy")}
    np.save(paths["data"], np.ascontiguousarray(prepared.x))
    np.save(paths["labels"], np.ascontiguousarray(prepared.y))
    return paths


def _existing(path, what: str) -> str:
    path = os.fsdecode(path)
    if not os.path.exists(path):
        raise ArgumentError(f"{what}: {path}: no such file")
    return os.path.abspath(path)


def same_sample_shape(train: Prepared, test: Prepared) -> None:
    if train.x is not None and test.x is not None and train.x.shape[1:] != test.x.shape[1:]:
        raise ArgumentError(f"test x: samples of shape {list(test.x.shape[1:])}, train's are "
                            f"{list(train.x.shape[1:])}")


def shape_text(shape: Tuple[int, ...]) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"
