"""One rank of a launched training run: `accelerate launch ... -m components.training.worker JOB.json`."""

from __future__ import annotations

import sys
from pathlib import Path

from components.training.trainers import TrainJob, train


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m components.training.worker JOB.json")
    train(TrainJob.model_validate_json(Path(argv[0]).read_text()))


if __name__ == "__main__":
    main(sys.argv[1:])
