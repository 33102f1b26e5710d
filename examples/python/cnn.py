#!/usr/bin/python3
"""A CNN written in PyTorch, trained on Fashion-MNIST by ElasticPS from Python.

    /usr/bin/python3 examples/python/cnn.py [--epochs 1] [--train-limit 12000] [--workers 2] [--servers 1]

Trains on NumPy arrays (written to the run folder as NPY for the workers), shows a progress bar, then reads the
result: the digest of the trained parameters, the test accuracy, the training curve, and the trained module back
in Python. Runs in about a minute on two cores with the defaults; --train-limit 0 --epochs 6 is the demo's job.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import fashion_mnist
import elasticps


class CNN(nn.Module):
    """Two convolutions with pooling, two fully connected layers with dropout: [b, 1, 28, 28] -> [b, 10]."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 100)
        self.fc2 = nn.Linear(100, 10)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.drop(F.relu(self.fc1(torch.flatten(x, 1))))
        return self.fc2(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=float, default=1)
    parser.add_argument("--train-limit", type=int, default=12000, help="training images (0: all 60,000)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args()

    x, y = fashion_mnist.load("train", args.train_limit)
    tx, ty = fashion_mnist.load("test", 2000)
    torch.manual_seed(0)
    trainer = elasticps.Trainer(CNN(), optimizer="adamw", lr=2e-3, weight_decay=1e-4, schedule="cosine",
                                warmup_steps=20, min_lr=5e-5, virtual_workers=8, batch_per_vw=16, seed=1)
    run = trainer.fit((x, y), test=(tx, ty), epochs=args.epochs, workers=args.workers, servers=args.servers,
                      run_dir=args.run_dir)
    print(f"run folder     {run.run_dir}")
    print(f"digest         {run.digest}")
    print(f"test accuracy  {run.test_accuracy:.4f}  (test loss {run.test_loss:.4f})")
    history = run.history_rows()
    print(f"steps          {len(history)}, loss {history[0]['loss']:.3f} -> {history[-1]['loss']:.3f}")

    # The trained module, in Python, and the command line's predictions.
    model = run.model().eval()
    with torch.no_grad():
        mine = model(torch.from_numpy(tx[:8])).argmax(1).numpy()
    probs = trainer.predict(tx[:8])
    print(f"first 8 test images: labels {ty[:8].tolist()}, run.model() says {mine.tolist()}, "
          f"trainer.predict says {np.argmax(probs, 1).tolist()}")


if __name__ == "__main__":
    main()
