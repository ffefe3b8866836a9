"""Fine-tuning a finished translation run on another domain (`--init-from`).

Starts from a finished `recipes/translate.py` run (default: runs/translate,
the README's main job: Bible verses) and its export, and measures on the
English->French interface messages of kseq.data.software_messages:

- before: the Bible export translating the messages' test split;
- after: `translate.py --init-from <run>` on the messages' training split,
  `--max-minutes` of training, its test scores (through its own decoding
  choice, as any run);
- scratch: the same command without `--init-from` (a model sized by the
  recipe for this data), the same budget;
- the Bible test split through the fine-tuned export (what the new domain
  cost the old one), beside the base run's own test score.

    python benchmarks/fine_tune.py --base runs/translate --base-export savedmodels/translate/1 \
        --work /tmp/fine_tune --max-minutes 4

Writes <work>/fine_tune.json (and prints it).
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def export_scores(export, sources, references, batch_size=32):
    """BLEU and chrF of an export's serving_default on `sources`."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the export's text ops)

    from kseq.training.scoring.evaluation import translation_scores

    serve = tf.saved_model.load(export).signatures["serving_default"]
    hypotheses = []
    for start in range(0, len(sources), batch_size):
        output = serve(source=tf.constant(sources[start: start + batch_size]))["translation"]
        hypotheses += [text.decode("utf-8") for text in output.numpy()]
    scores = translation_scores(hypotheses, references)
    return {"bleu": round(scores["bleu"], 2), "chrf": round(scores["chrf"], 2)}


def run_recipe(work, name, splits, minutes, extra=()):
    """translate.py on the messages; its metrics.json and newest export."""
    logdir, exports = os.path.join(work, name), os.path.join(work, f"{name}-export")
    command = [sys.executable, os.path.join(ROOT, "recipes", "translate.py"), "--train-tsv", splits["train"],
               "--valid-tsv", splits["valid"], "--test-tsv", splits["test"], "--max-minutes", str(minutes),
               "--logdir", logdir, "--export-dir", exports, *extra]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)
    with open(os.path.join(logdir, "metrics.json")) as f:
        metrics = json.load(f)
    newest = max(os.listdir(exports), key=int)
    return metrics, os.path.join(exports, newest)


def summary(metrics):
    return {"test_bleu": metrics["test_bleu"], "test_chrf": metrics["test_chrf"], "steps": metrics["steps"],
            "model_size": metrics["model_size"], "train_seconds": metrics["train_seconds"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="runs/translate", help="the finished run to start from")
    parser.add_argument("--base-export", default="savedmodels/translate/1", help="that run's export")
    parser.add_argument("--work", default="/tmp/fine_tune", help="folder for the data, runs and results")
    parser.add_argument("--max-minutes", type=float, default=4.0, help="training budget of each run")
    args = parser.parse_args()

    from kseq.data.bible import load_bible_pairs
    from kseq.data.software_messages import load_message_pairs, write_tsv_splits

    splits = write_tsv_splits(os.path.join(args.work, "messages"))
    messages_test, bible_test = load_message_pairs("test"), load_bible_pairs("test")
    with open(os.path.join(args.base, "metrics.json")) as f:
        base = json.load(f)
    results = {"base": {"run": args.base, "bible_test_bleu": base["test_bleu"], "bible_test_chrf": base["test_chrf"],
                        "messages_test": export_scores(args.base_export, *messages_test)}}
    tuned, tuned_export = run_recipe(args.work, "tuned", splits, args.max_minutes, ["--init-from", args.base])
    results["fine_tuned"] = {**summary(tuned), "bible_test": export_scores(tuned_export, *bible_test)}
    scratch, _ = run_recipe(args.work, "scratch", splits, args.max_minutes)
    results["from_scratch"] = summary(scratch)
    results["messages"] = {split: sum(1 for _ in open(path, encoding="utf-8")) for split, path in splits.items()}
    with open(os.path.join(args.work, "fine_tune.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
