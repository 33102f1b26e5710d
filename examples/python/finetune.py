#!/usr/bin/python3
"""Fine-tuning from Python: `init_from` and `freeze` (docs/models.md, "Transfer learning").

    /usr/bin/python3 examples/python/finetune.py [--a-limit 12000] [--b-train 1000] [--steps 60] [--workers 2]

Task A: the CNN of cnn.py on Fashion-MNIST classes 0-4. Task B: classes 5-9 from few labelled images, the same
budget twice: from scratch, and from task A's model with the convolutions frozen and a new head
(init_from=A/model.safetensors, freeze="^conv", reinit="^fc2\\."). Prints both test accuracies. The defaults
take about a minute on two cores, with a task A too short to help much (2026-12-05: 0.9240 from scratch, 0.9145
fine-tuned); --a-limit 0 (task A on every image of classes 0-4, as examples/finetune/run.sh) is the recipe whose
pretrained convolutions pay off there (0.927 against 0.916 with the built-in cnn, docs/models.md).
"""
import argparse

import torch

import fashion_mnist
import elasticps
from cnn import CNN


def subset(x, y, classes, limit):
    keep = (y >= classes[0]) & (y <= classes[1])
    x, y = x[keep][:limit or None], y[keep][:limit or None]
    return x, y - classes[0]  # classes 0..4 either way: the same head size


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a-limit", type=int, default=12000, help="task A's training images (0: all)")
    parser.add_argument("--b-train", type=int, default=1000, help="task B's training images")
    parser.add_argument("--steps", type=int, default=60, help="task B's steps")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    x, y = fashion_mnist.load("train")
    tx, ty = fashion_mnist.load("test")
    a_train, a_test = subset(x, y, (0, 4), args.a_limit), subset(tx, ty, (0, 4), 2000)
    b_train, b_test = subset(x, y, (5, 9), args.b_train), subset(tx, ty, (5, 9), 2000)

    def cnn():
        torch.manual_seed(0)
        net = CNN()
        net.fc2 = torch.nn.Linear(100, 5)
        return net

    options = dict(optimizer="adamw", lr=2e-3, weight_decay=1e-4, schedule="cosine", min_lr=5e-5,
                   virtual_workers=8, batch_per_vw=16)
    a = elasticps.Trainer(cnn(), **options, warmup_steps=20, seed=1).fit(a_train, test=a_test, epochs=1,
                                                                         workers=args.workers)
    print(f"task A (classes 0-4): test accuracy {a.test_accuracy:.4f}")

    scratch = elasticps.Trainer(cnn(), **options, warmup_steps=10, seed=2).fit(
        b_train, test=b_test, steps=args.steps, workers=args.workers)
    tuned = elasticps.Trainer(cnn(), **options, warmup_steps=10, seed=2,
                              init_from=a.file("model.safetensors"), freeze="^conv", reinit=r"^fc2\.").fit(
        b_train, test=b_test, steps=args.steps, workers=args.workers)
    print(f"task B (classes 5-9, {len(b_train[1])} images, {args.steps} steps): from scratch "
          f"{scratch.test_accuracy:.4f}, fine-tuned from task A {tuned.test_accuracy:.4f}")
    # The frozen convolutions are task A's, bit for bit.
    same = torch.equal(tuned.state_dict()["conv1.weight"], a.state_dict()["conv1.weight"])
    print(f"conv1.weight after fine-tuning is task A's: {same}")


if __name__ == "__main__":
    main()
