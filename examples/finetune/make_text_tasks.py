#!/usr/bin/python3
"""SpamAssassin as two corpora for the text fine-tuning example (examples/finetune/run.sh --app text).

The corpus came out in two releases, months apart (2002-10 and 2003-02), of other mailboxes: 2002 (the groups easy-ham-1,
hard-ham-1, spam-1) and 2003 (easy-ham-2, spam-2). From the fixed split scripts/setup.sh writes
(/usr/share/datasets/spam-assassin/{train,test}.jsonl), into OUT:
  a_train.jsonl, a_test.jsonl   task A, the pretraining corpus: spam or ham in the 2002 release, every one of its
                                training and test mails
  b_train.jsonl                 task B: spam or ham in the 2003 release, from only its first --b-train training
                                mails (the file is sorted by a hash: spam and ham mixed)
  b_test.jsonl                  task B's test set: every 2003 test mail
Each line: {"text": mail, "label": "spam" | "ham"}.
"""
import argparse
import json
import os


def rows(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def release(mail):
    return "2002" if mail["id"].split("/")[0].endswith("-1") else "2003"


def write(path, mails):
    with open(path, "w", encoding="utf-8") as f:
        for m in mails:
            f.write(json.dumps({"text": m["text"], "label": m["label"]}, ensure_ascii=False) + "\n")
    spam = sum(m["label"] == "spam" for m in mails)
    print(f"{os.path.basename(path)}: {len(mails)} mails, {spam} spam")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default="/usr/share/datasets/spam-assassin")
    p.add_argument("--out", required=True)
    p.add_argument("--b-train", type=int, default=50, help="task B's labelled training mails (default 50)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    train, test = rows(os.path.join(a.corpus, "train.jsonl")), rows(os.path.join(a.corpus, "test.jsonl"))
    of = lambda mails, r: [m for m in mails if release(m) == r]  # noqa: E731
    write(os.path.join(a.out, "a_train.jsonl"), of(train, "2002"))
    write(os.path.join(a.out, "a_test.jsonl"), of(test, "2002"))
    write(os.path.join(a.out, "b_train.jsonl"), of(train, "2003")[:a.b_train])
    write(os.path.join(a.out, "b_test.jsonl"), of(test, "2003"))


if __name__ == "__main__":
    main()
