"""The built-in zoo's networks written in PyTorch (Python), for scripts/ddp_baseline.py's --model.

Each is the C++ network layer for layer, with the same tensor names and shapes (so the same parameter count):
  cnn               models/models.cc: Conv2d(1,16,5,p2) ReLU MaxPool2 Conv2d(16,32,5,p2) ReLU MaxPool2
                    Linear(1568,256) ReLU Dropout(0.25) Linear(256,10);
  resnet            models/resnet.cc: the CIFAR ResNet of depth 6n+2 for 1x28x28 inputs (conv1 bn1 relu, 3 stages
                    of n BasicBlocks at 16/32/64 channels, 1x1 conv + BN shortcuts where the shape changes, average
                    pool, fc), Kaiming-normal (fan_out, ReLU) convolutions;
  text_transformer  models/text_models.cc: token + position embeddings, N TransformerEncoderLayers (post-norm, ReLU,
                    feed-forward 4*dim, dropout 0.1) that mask <pad> (id 0), the mean over non-padding positions,
                    Linear(dim, classes); one module "text" (tensors "text.tok.weight", ...).
Also: the tokenizer of data/text.h (docs/text.md, version 1) over a run dir's vocab.json, and the tensor table of a
safetensors file, to check a network against the model.safetensors a job exported.

Imports torch only inside the functions that need it (ddp_baseline.py's launcher process never does).
"""
import collections
import json
import struct

PAD_ID, UNK_ID, CLS_ID = 0, 1, 2  # data/text.h
MAX_WORD_BYTES = 32


def make(name, depth=20, vocab_size=8000, seq_len=128, dim=64, layers=2, heads=4, classes=10):
    """The network `name` (cnn, resnet, text_transformer) with the zoo's sizes; ValueError for sizes the C++ side
    refuses too."""
    import torch
    from torch import nn

    if name == "cnn":
        return nn.Sequential(collections.OrderedDict([
            ("conv1", nn.Conv2d(1, 16, 5, padding=2)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
            ("conv2", nn.Conv2d(16, 32, 5, padding=2)), ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
            ("flatten", nn.Flatten()), ("fc1", nn.Linear(32 * 7 * 7, 256)), ("relu3", nn.ReLU()),
            ("dropout", nn.Dropout(0.25)), ("fc2", nn.Linear(256, classes))]))
    if name == "resnet":
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"--model_depth {depth}: resnet needs 6n+2 with n >= 1 (8, 14, 20, ...)")
        return _resnet(torch, nn, (depth - 2) // 6, classes)
    if name == "text_transformer":
        if dim < 1 or heads < 1 or dim % heads or layers < 1:
            raise ValueError(f"--model_dim {dim} must be a positive multiple of --model_heads {heads}, "
                             f"--model_layers {layers} at least 1")
        return nn.Sequential(collections.OrderedDict(
            text=_text_transformer(torch, nn, vocab_size, seq_len, dim, layers, heads, classes)))
    raise ValueError(f"unknown model '{name}' (have: cnn, resnet, text_transformer)")


def _resnet(torch, nn, n, classes):
    def conv(cin, cout, kernel, stride):
        return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.bn1 = conv(cin, cout, 3, stride), nn.BatchNorm2d(cout)
            self.conv2, self.bn2 = conv(cout, cout, 3, 1), nn.BatchNorm2d(cout)
            self.shortcut = (nn.Sequential(conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))
                             if stride != 1 or cin != cout else None)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))

    def stage(cin, cout, stride):  # blocks named "0", "1", ... as the C++ Stage's
        return nn.Sequential(*[BasicBlock(cin if i == 0 else cout, cout, stride if i == 0 else 1) for i in range(n)])

    model = nn.Sequential(collections.OrderedDict([
        ("conv1", conv(1, 16, 3, 1)), ("bn1", nn.BatchNorm2d(16)), ("relu", nn.ReLU()),
        ("stage1", stage(16, 16, 1)), ("stage2", stage(16, 32, 2)), ("stage3", stage(32, 64, 2)),
        ("pool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()), ("fc", nn.Linear(64, classes))]))
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
    return model


def _text_transformer(torch, nn, vocab_size, seq_len, dim, layers, heads, classes):
    class TextTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab_size, dim)
            self.pos = nn.Embedding(seq_len, dim)
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.1) for _ in range(layers))
            self.head = nn.Linear(dim, classes)

        def forward(self, ids):
            pad = ids.eq(PAD_ID)  # [b, s]
            x = self.tok(ids) + self.pos(torch.arange(ids.size(1), device=ids.device)).unsqueeze(0)
            x = x.transpose(0, 1)  # the layers take [s, b, d]
            for layer in self.layers:
                x = layer(x, src_key_padding_mask=pad)
            x = x.transpose(0, 1)
            keep = pad.logical_not().unsqueeze(-1).to(x.dtype)
            return self.head((x * keep).sum(1) / keep.sum(1))

    return TextTransformer()


def tensor_table(module):
    """{name: shape} of a module's parameters and buffers, as a job exports them."""
    out = {k: list(v.shape) for k, v in module.named_parameters()}
    out.update({k: list(v.shape) for k, v in module.named_buffers()})
    return out


def safetensors_table(path):
    """{name: shape} of the tensors in a safetensors file (its JSON header only)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        n = struct.unpack("<Q", head)[0]
        header = json.loads(f.read(n))
    return {k: list(v["shape"]) for k, v in header.items() if k != "__metadata__"}


def table_differences(mine, theirs):
    """The lines that tell two {name: shape} tables apart ([] when equal)."""
    lines = [f"only in the Python network: {k} {mine[k]}" for k in sorted(set(mine) - set(theirs))]
    lines += [f"only in the file: {k} {theirs[k]}" for k in sorted(set(theirs) - set(mine))]
    lines += [f"{k}: Python {mine[k]}, file {theirs[k]}" for k in sorted(set(mine) & set(theirs))
              if mine[k] != theirs[k]]
    return lines


def words(text, max_words):
    """data/text.h's TokenizeText over a decoded string: runs of ASCII letters and digits and of non-ASCII code
    points other than U+FFFD (and lone surrogates: invalid UTF-8 in the C++ reading), ASCII lowercased, each word cut
    to its first 32 UTF-8 bytes at a code point; at most max_words words."""
    out, cur = [], []

    def flush():
        if cur:
            w, size = [], 0
            for ch in cur:
                size += len(ch.encode("utf-8"))
                if size > MAX_WORD_BYTES:
                    break
                w.append(ch)
            out.append("".join(w))
            cur.clear()

    for ch in text:
        o = ord(ch)
        if o < 128:
            if ch.isascii() and ch.isalnum():
                cur.append(ch.lower())
                continue
        elif o != 0xFFFD and not 0xD800 <= o <= 0xDFFF:
            cur.append(ch)
            continue
        flush()
        if len(out) >= max_words:
            return out
    flush()
    return out[:max_words]


def encode(text, word_ids, seq_len):
    """Vocabulary::Encode: <cls>, the ids of the first seq_len - 1 words (<unk> when absent), <pad> to seq_len."""
    ids = [CLS_ID] + [word_ids.get(w, UNK_ID) for w in words(text, seq_len - 1)]
    return ids + [PAD_ID] * (seq_len - len(ids))


def read_vocab(path):
    """A run dir's vocab.json: ({word: id}, labels in class order, seq_len)."""
    with open(path) as f:
        v = json.load(f)
    if v.get("tokenizer") != "eps-words" or v.get("version") != 1:
        raise ValueError(f"{path}: not an eps-words version 1 vocabulary")
    return {w: i for i, w in enumerate(v["words"])}, v["labels"], int(v["seq_len"])
