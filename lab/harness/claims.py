"""Claims tables: what a notebook or the README claims, the evidence it rests on (results file, n, interval or single
points) and the claim's status. Built from results files by the studies' findings (lab.studies.findings,
lab.studies.findings_claims) and the README generator (lab.pipeline.readme), never typed.

Statuses: *measured here* (this repository's runs), *modelled* (a cost-model prediction, with the model's validation
error), *published* (someone else's number: verified or unverified against its source), *untested* (nothing here ran
it; the qualifier says what was tested instead)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MEASURED, MODELLED, PUBLISHED, UNTESTED = "measured here", "modelled", "published", "untested"
STATUSES = (MEASURED, MODELLED, PUBLISHED, UNTESTED)
MIN_INTERVAL = 5  # n below which no interval is claimed: the single points are listed instead
HEADER = ("| claim | evidence | status |", "|---|---|---|")


@dataclass(frozen=True)
class Claim:
    claim: str  # what is claimed, in words
    evidence: str  # results file (or test file), n, interval or points
    status: str  # one of STATUSES
    qualifier: str = ""  # modelled: its validation error; published: "verified" / "unverified ..."; untested: what ran

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"claim status {self.status!r} is none of {STATUSES}")
        if self.status == MODELLED and not self.qualifier:
            raise ValueError(f"modelled claim {self.claim!r} needs its model's validation error as qualifier")
        if self.status == PUBLISHED and not self.qualifier.startswith(("verified", "unverified")):
            raise ValueError(f"published claim {self.claim!r} needs a qualifier starting 'verified' or 'unverified'")

    def row(self) -> str:
        status = f"*{self.status}*" + (f" ({self.qualifier})" if self.qualifier else "")
        return "| " + " | ".join(cell.replace("|", "/") for cell in (self.claim, self.evidence, status)) + " |"


def verdict(value: float, low: float | None, high: float | None, n: int, above: str, below: str,
            reference: float = 1.0) -> str:
    """What a value with its interval says: `above` / `below` where the interval excludes `reference`, 'no
    difference shown (the interval covers R)' where it covers it, 'no conclusion (n < 5)' without an interval."""
    if n < MIN_INTERVAL or low is None or high is None:
        return f"no conclusion (n = {n} < {MIN_INTERVAL})"
    if low <= reference <= high:
        return f"no difference shown (the interval covers {reference:g})"
    return above if low > reference else below


def evidence(source: str, n: int, value: float, low: float | None = None, high: float | None = None,
             points: Sequence[float] = (), unit: str = "prompts", suffix: str = "x", digits: int = 2) -> str:
    """'`file`, n = 20 prompts, 1.23x [1.10, 1.37]', or the single points where n < MIN_INTERVAL or no interval."""
    fmt = f"{{:.{digits}f}}"
    head = f"`{source}`, n = {n} {unit}, {fmt.format(value)}{suffix}"
    if n >= MIN_INTERVAL and low is not None and high is not None:
        return f"{head} [{fmt.format(low)}, {fmt.format(high)}]"
    if len(points):
        return f"{head} (points: {', '.join(fmt.format(p) for p in points)})"
    return head


def table(claims: Sequence[Claim]) -> str:
    """The claims as a Markdown table (claim | evidence | status)."""
    if not claims:
        return "\n".join([*HEADER, "| (no results yet) | | |"])
    return "\n".join([*HEADER, *(c.row() for c in claims)])
