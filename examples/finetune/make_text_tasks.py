#!/usr/bin/python3
"""SpamAssassin split into two tasks for the text fine-tuning example (examples/finetune/run.sh --app text).

From the fixed split scripts/setup.sh writes (/usr/share/datasets/spam-assassin/{train,test}.jsonl), into OUT:
  a_train.jsonl, a_test.jsonl   task A, the pretraining task: which of the corpus's two releases a mail comes
                                from (label "2002": the groups easy-ham-1, hard-ham-1, spam-1; "2003": easy-ham-2,
                                spam-2), on every training mail, and every test mail
  b_train.jsonl                 task B: spam or ham, from only the first --b-train training mails (the file is
                                sorted by a hash: spam and ham mixed)
  b_test.jsonl                  task B's test set: every test mail, spam or ham
Each line: {"text": mail, "label": ...}.
"""
import argparse
import json
import os


def rows(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def release(mail):
    return "2002" if mail["id"].split("/")[0].endswith("-1") else "2003"


def write(path, mails, label):
    with open(path, "w", encoding="utf-8") as f:
        for m in mails:
            f.write(json.dumps({"text": m["text"], "label": label(m)}, ensure_ascii=False) + "\n")
    print(f"{os.path.basename(path)}: {len(mails)} mails")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default="/usr/share/datasets/spam-assassin")
    p.add_argument("--out", required=True)
    p.add_argument("--b-train", type=int, default=200, help="task B's labelled training mails (default 200)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    train, test = rows(os.path.join(a.corpus, "train.jsonl")), rows(os.path.join(a.corpus, "test.jsonl"))
    write(os.path.join(a.out, "a_train.jsonl"), train, release)
    write(os.path.join(a.out, "a_test.jsonl"), test, release)
    write(os.path.join(a.out, "b_train.jsonl"), train[:a.b_train], lambda m: m["label"])
    write(os.path.join(a.out, "b_test.jsonl"), test, lambda m: m["label"])


if __name__ == "__main__":
    main()
