"""Patient time lines shared by the MIMIC-III and eICU builders: visits (hospital stays) holding one unit/ICU stay.

EHRSQL fixes "now" at 2105-12-31 23:59:00, so every time lies in 2100-2105 and no closed stay ends after NOW.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

NOW = datetime(2105, 12, 31, 23, 59, 0)
EPOCH = datetime(2100, 1, 1, 0, 0, 0)
H = timedelta(hours=1)
D = timedelta(days=1)


def fmt(t: datetime | None) -> str | None:
    return None if t is None else t.strftime("%Y-%m-%d %H:%M:%S")


@dataclass
class Visit:
    hid: int  # hadm_id (MIMIC-III) or patienthealthsystemstayid (eICU)
    uid: int  # icustay_id or patientunitstayid
    start: datetime
    end: datetime | None  # None: still in hospital (EHRSQL's "current hospital visit")
    careunit: str = ""
    wardid: int = 0
    admit_source: str = ""
    extra_careunits: list[str] = field(default_factory=list)

    def unit_start(self) -> datetime:
        return self.start + H

    def unit_end(self) -> datetime | None:
        return None if self.end is None else self.end - H

    def contains(self, t: datetime) -> bool:
        return self.start <= t and (self.end is None or t <= self.end)

    def clip(self, t: datetime) -> datetime | None:
        """`t` if it lies inside the visit (and not after NOW), else None."""
        return t if self.contains(t) and t <= NOW else None


def random_time(rng: random.Random, lo: datetime, hi: datetime) -> datetime:
    span = int((hi - lo).total_seconds() // 60)
    return lo + timedelta(minutes=rng.randint(0, max(span, 0)))


def free_slot(
    visits: list[Visit], t: datetime, before: timedelta, after: timedelta
) -> tuple[datetime, datetime] | None:
    """A closed visit interval around `t` that overlaps no existing visit, or None when there is no room."""
    prev_end, next_start = EPOCH, NOW - timedelta(minutes=10)
    for v in visits:
        if v.contains(t):
            return None
        if v.end is not None and v.end < t:
            prev_end = max(prev_end, v.end + 6 * H)
        if v.start > t:
            next_start = min(next_start, v.start - 6 * H)
    start, end = max(prev_end, t - before), min(next_start, t + after)
    if not (start <= t < end) or end - start < 3 * H:
        return None
    return start, end


def base_intervals(rng: random.Random, n_closed: int, open_current: bool) -> list[tuple[datetime, datetime | None]]:
    """Non-overlapping stays in 2100-2105, in time order; the open one (if any) starts in the last two weeks."""
    out: list[tuple[datetime, datetime | None]] = []
    cursor = EPOCH + timedelta(days=rng.randint(0, 300))
    horizon = NOW - 16 * D
    for i in range(n_closed):
        remaining = n_closed - i
        span = (horizon - cursor) / max(remaining, 1)
        start = random_time(rng, cursor, cursor + span * 0.7)
        end = start + timedelta(hours=rng.randint(30, 24 * 12))
        end = min(end, horizon)
        if end <= start + 6 * H:
            break
        out.append((start, end))
        cursor = end + D
    if open_current:
        out.append((random_time(rng, NOW - 14 * D, NOW - 3 * D), None))
    return out
