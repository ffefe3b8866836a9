"""Short deterministic transduction tasks, written as a user's TSV files.

The translation recipe's quality on a user's own pairs is measured on these
(see benchmarks/RESULTS.md): every target follows from its source by a fixed
rule, so a model that learned the task gets every pair exactly right.

- `dates`: an English date in words -> ISO 8601
  ("the third of march nineteen eighty-four" -> "1984-03-03").
- `numbers`: a number from 0 to 999,999 in English words -> its digits
  ("four thousand and twelve" -> "4012").
- `bible`: not a rule but open text, a user's small corpus: `--train` verses
  sampled (seeded) from the Bible's training split, in corpus order, and its
  whole validation and test splits (kseq.data.bible), for the model size
  the recipe chooses from the data's size.

    python benchmarks/user_tasks.py dates /tmp/dates   # train.tsv, valid.tsv, test.tsv
    python benchmarks/user_tasks.py bible /tmp/bible3k --train 3000
    kseq-train translate --train-tsv /tmp/dates/train.tsv \
        --valid-tsv /tmp/dates/valid.tsv --test-tsv /tmp/dates/test.tsv
"""

import argparse
import datetime
import os
import random

ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen").split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
ORDINALS = ("_ first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
            "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth").split()
ORDINAL_TENS = {20: "twentieth", 30: "thirtieth"}
MONTHS = ("january february march april may june july august september october november "
          "december").split()


def below_hundred(n):
    if n < 20:
        return ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens] + ("" if ones == 0 else "-" + ONES[ones])


def below_thousand(n):
    hundreds, rest = divmod(n, 100)
    if not hundreds:
        return below_hundred(rest)
    words = ONES[hundreds] + " hundred"
    return words if rest == 0 else words + " and " + below_hundred(rest)


def number_words(n):
    """0 <= n < 1,000,000 in British-style English words."""
    thousands, rest = divmod(n, 1000)
    if not thousands:
        return below_thousand(rest)
    words = below_thousand(thousands) + " thousand"
    if rest == 0:
        return words
    return words + (" and " if rest < 100 else " ") + below_thousand(rest)


def ordinal_words(day):
    if day < 20:
        return ORDINALS[day]
    tens, ones = divmod(day, 10)
    if ones == 0:
        return ORDINAL_TENS[day]
    return TENS[tens] + "-" + ORDINALS[ones]


def year_words(year):
    """How years are read: 1984 "nineteen eighty-four", 2005 "two thousand
    and five", 1900 "nineteen hundred", 1907 "nineteen oh seven"."""
    if 2000 <= year < 2010:
        return number_words(year)
    high, low = divmod(year, 100)
    if low == 0:
        return below_hundred(high) + " hundred"
    return below_hundred(high) + " " + ("oh " + ONES[low] if low < 10 else below_hundred(low))


def date_pair(rng):
    day = datetime.date(1800, 1, 1) + datetime.timedelta(days=rng.randrange(80000))
    form = rng.randrange(2)
    if form == 0:
        words = f"the {ordinal_words(day.day)} of {MONTHS[day.month - 1]} {year_words(day.year)}"
    else:
        words = f"{MONTHS[day.month - 1]} {ordinal_words(day.day)} {year_words(day.year)}"
    return words, day.isoformat()


def number_pair(rng):
    n = rng.randrange(10 ** rng.randint(1, 6))
    return number_words(n), str(n)


TASKS = {"dates": date_pair, "numbers": number_pair}


def bible_splits(train, seed=0):
    """{split: [(source, target)]}: `train` of the Bible's training verses
    (a seeded sample, in corpus order), its validation and test splits."""
    from kseq.data.bible import load_bible_pairs

    splits = {name: list(zip(*load_bible_pairs(name))) for name in ("train", "valid", "test")}
    if not 0 < train <= len(splits["train"]):
        raise SystemExit(f"--train must be in [1, {len(splits['train'])}] for bible; got {train}")
    order = list(range(len(splits["train"])))
    random.Random(seed).shuffle(order)
    splits["train"] = [splits["train"][index] for index in sorted(order[:train])]
    return {name: [tuple(text.replace("\t", " ") for text in pair) for pair in pairs]
            for name, pairs in splits.items()}


def make_splits(task, seed=0, sizes=(30000, 1000, 1000)):
    """{split: [(source, target)]}, no source in two splits."""
    rng, seen, splits = random.Random(seed), set(), {}
    for name, size in zip(("train", "valid", "test"), sizes):
        pairs = []
        while len(pairs) < size:
            source, target = TASKS[task](rng)
            if source not in seen:
                seen.add(source)
                pairs.append((source, target))
        splits[name] = pairs
    return splits


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(TASKS) + ["bible"])
    parser.add_argument("folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=30000)
    args = parser.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    if args.task == "bible":
        splits = bible_splits(args.train, args.seed)
    else:
        splits = make_splits(args.task, args.seed, (args.train, 1000, 1000))
    for name, pairs in splits.items():
        with open(os.path.join(args.folder, f"{name}.tsv"), "w", encoding="utf-8") as file:
            file.writelines(f"{source}\t{target}\n" for source, target in pairs)
    print(f"{args.task}: {' / '.join(str(len(pairs)) for pairs in splits.values())} pairs in {args.folder}")


if __name__ == "__main__":
    main()
