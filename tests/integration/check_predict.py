#!/usr/bin/python3
"""What Debian's python3-torch computes with an exported model, against `elasticps predict`'s CSV.

    /usr/bin/python3 check_predict.py script MODEL.script.pt IMAGES.gz LABELS.gz LIMIT BATCH PREDICTIONS.csv
    /usr/bin/python3 check_predict.py mlp MODEL.pt IMAGES.gz LABELS.gz LIMIT BATCH PREDICTIONS.csv

`script`: torch.jit.load of the scripted export; `mlp`: torch.load of the state dict into the built-in mlp written
here in Python (models/models.cc's layers and names). Run it with OPENBLAS_NUM_THREADS=1 (as the workers fix
OpenBLAS's pool) for the same floats. Prints one JSON object: rows, the rows whose class differs,
the rows whose probabilities are not the same floats, and the largest difference of a probability.
"""
import csv
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_models import load_idx  # noqa: E402


def builtin_mlp():
    return nn.Sequential(
        __import__("collections").OrderedDict([("flatten", nn.Flatten()), ("fc1", nn.Linear(784, 128)),
                                               ("relu1", nn.ReLU()), ("fc2", nn.Linear(128, 10))]))


def main():
    kind, model_path, images, labels, limit, batch, predictions = sys.argv[1:8]
    torch.set_num_threads(1)
    if kind == "script":
        model = torch.jit.load(model_path)
    else:
        model = builtin_mlp()
        model.load_state_dict(torch.load(model_path))
    model.eval()
    x, _ = load_idx(images, labels, int(limit))
    with torch.no_grad():
        out = torch.cat([model(x[i:i + int(batch)]) for i in range(0, x.shape[0], int(batch))])
    probs = torch.softmax(out, 1)
    with open(predictions) as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    wrong_class, inexact, max_diff = [], [], 0.0
    for i, row in enumerate(rows):
        if int(row[0]) != i or int(row[1]) != int(out[i].argmax()):
            wrong_class.append(i)
        got = torch.tensor([float(v) for v in row[2:]], dtype=torch.float32)
        if got.shape != probs[i].shape or not torch.equal(got, probs[i]):
            inexact.append(i)
        if got.shape == probs[i].shape:
            max_diff = max(max_diff, float((got - probs[i]).abs().max()))
    print(json.dumps({"header": header, "rows": len(rows), "samples": int(x.shape[0]), "wrong_class": wrong_class[:20],
                      "inexact": len(inexact), "max_abs_diff": max_diff}))


if __name__ == "__main__":
    main()
