#!/usr/bin/python3
"""A text model from Python: the built-in text_transformer on the SpamAssassin corpus (JSONL; scripts/setup.sh
installs it), then predictions on raw mails.

    /usr/bin/python3 examples/python/text.py [--steps 120] [--workers 2]

The coordinator builds the vocabulary from the training file (RUN_DIR/vocab.json); evaluate and predict tokenize
with it, so a list of raw texts predicts as it is.
"""
import argparse
import os

import numpy as np

import fashion_mnist  # noqa: F401  (puts the tree's python/ on sys.path)
import elasticps

CORPUS = "/usr/share/datasets/spam-assassin"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if not os.path.exists(os.path.join(CORPUS, "train.jsonl")):
        raise SystemExit(f"{CORPUS}/train.jsonl is missing: run scripts/setup.sh as root")

    trainer = elasticps.Trainer("text_transformer", optimizer="adam", lr=1e-3, weight_decay=0.0,
                                virtual_workers=8, batch_per_vw=16, seed=7, seq_len=128, vocab_size=8000,
                                model_dim=64, model_layers=2, model_heads=4, test_limit=600)
    run = trainer.fit(os.path.join(CORPUS, "train.jsonl"), test=os.path.join(CORPUS, "test.jsonl"),
                      steps=args.steps, workers=args.workers)
    print(f"test accuracy {run.test_accuracy:.4f} after {args.steps} steps (digest {run.digest[:16]}...)")
    mails = ["Subject: meeting moved to 3pm\n\nHi all, the design review moves to 3pm in room 2. Thanks, Ann",
             "Subject: $$$ MAKE MONEY FAST $$$\n\nClick here to claim your FREE prize!!! Limited offer, act now",
             ]
    probs = trainer.predict(mails)
    labels = run.labels
    for mail, p in zip(mails, probs):
        print(f"{labels[int(np.argmax(p))]:>5} ({p.max():.3f})  {mail.splitlines()[0]}")


if __name__ == "__main__":
    main()
