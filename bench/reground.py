"""Print how many release EHR questions get a non-empty ground truth on the seeded synthetic databases.

usage: python bench/reground.py --src DIR [--seed 0]   (DIR laid out as the release: <dataset>/<split>_tasks.jsonl)
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from components.common.io import iter_jsonl  # noqa: E402
from components.ehr.reground import reground  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--datasets", default="mimic_iii,eicu,treqs")
    ap.add_argument("--show-failures", type=int, default=0, help="print this many failing queries per dataset")
    args = ap.parse_args()
    print("nonempty/zero: fractions of the possible questions; wall_s: seeding + all queries of the dataset")
    print(
        f"{'dataset':10} {'split':6} {'total':>6} {'imposs':>6} {'nonempty':>9} "
        + f"{'zero':>6} {'errors':>6} {'wall_s':>7}"
    )
    for dataset in args.datasets.split(","):
        files = sorted((args.src / dataset).glob("*_tasks.jsonl"))
        if not files:
            print(f"{dataset:10} (no files under {args.src / dataset})")
            continue
        rows = [(line, obj) for f in files for line, obj in iter_jsonl(f)]
        split_of = [f.name.removesuffix("_tasks.jsonl") for f in files for _ in iter_jsonl(f)]
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            results = reground(rows, dataset, Path(tmp) / f"{dataset}.sqlite", args.seed)
        wall = time.monotonic() - t0
        by_split: dict[str, list] = collections.defaultdict(list)
        for split, (_, row), res in zip(split_of, rows, results, strict=True):
            by_split[split].append((row, res))
        for split, pairs in sorted(by_split.items()):
            possible = [(r, s) for r, s in pairs if not r.get("is_impossible")]
            ok = sum(s.nonempty for _, s in possible)
            zero = sum(s.answer in (["0"], ["0.0"]) for _, s in possible)
            errs = sum(s.error is not None for _, s in pairs)
            print(
                f"{dataset:10} {split:6} {len(pairs):6d} {len(pairs) - len(possible):6d} "
                f"{ok / max(len(possible), 1):9.3f} "
                f"{zero / max(len(possible), 1):6.3f} {errs:6d} {wall:7.1f}"
            )
        shown = 0
        for (_, row), res in zip(rows, results, strict=True):
            if shown >= args.show_failures:
                break
            if not row.get("is_impossible") and not res.nonempty:
                shown += 1
                print(f"  FAIL {res.id} {res.error or res.answer}\n    {res.query}")


if __name__ == "__main__":
    main()
