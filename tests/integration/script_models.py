#!/usr/bin/python3
"""TorchScript models for the tests of user models (docs/models.md), written with Debian's python3-torch.

    /usr/bin/python3 script_models.py OUT_DIR [NAME ...]

writes OUT_DIR/NAME.pt for each model named (all of them by default). Also imported by the tests' own Python
(Net, load_idx) to load an exported model.pt into the original module.
"""
import gzip
import os
import struct
import sys
from typing import Dict

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    """conv + BatchNorm + dropout: the user's model of the tests."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(16 * 7 * 7, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


class WithLoss(Net):
    """Net with its own loss: label smoothing, which the default cross-entropy does not have."""

    @torch.jit.export  # torch.jit.script compiles forward and what it calls; other methods need this
    def loss(self, output, target):
        return F.cross_entropy(output, target, label_smoothing=0.1)


class NonScalarLoss(Net):
    @torch.jit.export  # torch.jit.script compiles forward and what it calls; other methods need this
    def loss(self, output, target):
        return F.cross_entropy(output, target, reduction="none")


class BadShape(nn.Module):
    """Expects 100 features per sample: fails on 28x28 images."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(100, 10)

    def forward(self, x):
        return self.fc(torch.flatten(x, 1))


class Nondeterministic(nn.Module):
    """Its output depends on how often it ran: a counter that no buffer restore resets."""

    calls: int

    def __init__(self):
        super().__init__()
        self.net = Net()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.net(x) * float(self.calls)


class Tabular(nn.Module):
    """6 float features, 3 classes: rows of a table (NPY or CSV), not images."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Regressor(nn.Module):
    """6 float features to 2 float targets: the default loss is then the mean squared error."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 2)

    def forward(self, x):
        return self.fc(x)


class Tokens(nn.Module):
    """int64 token ids [b, 12] (a vocabulary of 50) to 2 classes: the features reach forward as int64."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(self.emb(x).mean(1))


class SparseTokens(Tokens):
    """Tokens with its table as PyTorch's large tables are made: EmbeddingBag(sparse=True), a sparse gradient."""

    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(50, 8, mode="sum", sparse=True)

    def forward(self, x):
        return self.fc(self.emb(x))


class LazyTokens(SparseTokens):
    """SparseTokens naming the rows a batch reads (table_ids): a worker may look its table up, in lazy memory."""

    @torch.jit.export
    def table_ids(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"emb.weight": x}


class CompactTokens(LazyTokens):
    """LazyTokens that also rewrites its ids (with_table_ids): looked up into a compact table of the batch's rows."""

    @torch.jit.export
    def with_table_ids(self, x: torch.Tensor, ids: Dict[str, torch.Tensor]) -> torch.Tensor:
        return ids["emb.weight"]


class KeyedTokens(CompactTokens):
    """CompactTokens over a table of 0 rows: unbounded keys, any int64 id but the largest a row."""

    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(0, 8, mode="sum", sparse=True)


class MisplacedTokens(LazyTokens):
    """A with_table_ids that puts the ids into the wrong samples (rows a forward can read, the wrong ones): a worker
    must refuse it."""

    @torch.jit.export
    def with_table_ids(self, x: torch.Tensor, ids: Dict[str, torch.Tensor]) -> torch.Tensor:
        return ids["emb.weight"].flip(0)


class Wide(nn.Module):
    """An MLP of 0.41 M parameters: a file of about 1.6 MB, larger than a 1 MiB message (test_model_files)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 512)
        self.fc2 = nn.Linear(512, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def shufflenet():
    """torchvision's ShuffleNetV2 x0.5 for 10 classes, its first convolution taking 1 channel."""
    import torchvision
    m = torchvision.models.shufflenet_v2_x0_5(num_classes=10)
    m.conv1[0] = nn.Conv2d(1, 24, 3, 2, 1, bias=False)
    return m


def make(name):
    torch.manual_seed(0)
    if name == "net":
        return torch.jit.script(Net())
    if name == "net_loss":
        return torch.jit.script(WithLoss())
    if name == "five_classes":
        return torch.jit.script(Net(classes=5))
    if name == "nonscalar_loss":
        return torch.jit.script(NonScalarLoss())
    if name == "bad_shape":
        return torch.jit.script(BadShape())
    if name == "nondeterministic":
        return torch.jit.script(Nondeterministic())
    if name == "shufflenet":
        return torch.jit.script(shufflenet())
    if name == "wide":
        return torch.jit.script(Wide())
    kinds = {"tabular": Tabular, "regressor": Regressor, "tokens": Tokens, "sparse_tokens": SparseTokens,
             "lazy_tokens": LazyTokens, "compact_tokens": CompactTokens, "keyed_tokens": KeyedTokens,
             "misplaced_tokens": MisplacedTokens}
    if name in kinds:
        return torch.jit.script(kinds[name]())
    raise SystemExit(f"unknown model {name}")


ALL = ["net", "net_loss", "five_classes", "nonscalar_loss", "bad_shape", "nondeterministic", "shufflenet", "tabular",
       "regressor", "tokens", "sparse_tokens", "lazy_tokens", "compact_tokens", "keyed_tokens", "misplaced_tokens",
       "wide"]


def load_idx(images_path, labels_path, limit):
    """Fashion-MNIST IDX files as the workers read them: float32 (p/255 - mean)/std, [n, 1, 28, 28]; int64
    labels."""
    with gzip.open(images_path) as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        n = min(n, limit) if limit > 0 else n
        pixels = torch.frombuffer(bytearray(f.read(n * rows * cols)), dtype=torch.uint8)
    with gzip.open(labels_path) as f:
        f.read(8)
        labels = torch.frombuffer(bytearray(f.read(n)), dtype=torch.uint8).to(torch.int64)
    x = (pixels.to(torch.float32) / 255.0 - 0.2860) / 0.3530
    return x.reshape(n, 1, rows, cols), labels


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[2:] or ALL:
        if name == "state_dict":  # torch.save of a state dict: not TorchScript
            torch.manual_seed(0)
            torch.save(Net().state_dict(), os.path.join(out, "state_dict.pt"))
            continue
        if name == "shufflenet":
            try:
                import torchvision  # noqa: F401
            except ImportError:
                continue
        make(name).save(os.path.join(out, name + ".pt"))
