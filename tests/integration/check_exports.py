#!/usr/bin/python3
"""Loads a run dir's exports the way a user would, with Debian's python3-torch, and prints what they compute as JSON:

    check_exports.py RUN_DIR TEST_IMAGES TEST_LABELS LIMIT BATCH

model.pt goes through torch.load into the original Python module (script_models.Net) with load_state_dict; the
test set is evaluated in batches of BATCH like the workers do (eval mode, cross-entropy summed); model.script.pt
goes through torch.jit.load and must give the very same outputs."""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_models import Net, load_idx  # noqa: E402

run_dir, images, labels, limit, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(1)
state = torch.load(os.path.join(run_dir, "model.pt"))
net = Net()
net.load_state_dict(state)  # strict: every parameter and buffer, no other
net.eval()
scripted = torch.jit.load(os.path.join(run_dir, "model.script.pt"))
scripted.eval()
x, y = load_idx(images, labels, limit)
correct, loss_sum, same = 0, 0.0, True
with torch.no_grad():
    for first in range(0, len(y), batch):
        xb, yb = x[first:first + batch], y[first:first + batch]
        out = net(xb)
        loss_sum += F.cross_entropy(out, yb, reduction="sum").item()
        correct += int(out.argmax(1).eq(yb).sum())
        same = same and torch.equal(scripted(xb), out)
print(json.dumps({"state_dict_keys": list(state.keys()), "count": len(y), "correct": correct, "loss_sum": loss_sum,
                  "scripted_outputs_equal": same}))
