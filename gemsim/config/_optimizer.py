"""`optimizer:` — the union of every rule block, told apart by `rule:` (a name, or an import
path for a rule outside gemsim). The blocks live by kind: gradient rules
(`_gradient_rule_blocks.py`), model rules (`_model_rule_blocks.py`), round rules
(`_round_rule_blocks.py`), and rules from elsewhere or made of optax transformations
(`_open_rule_blocks.py`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Tag

from gemsim import timing

from ._gradient_rule_blocks import (
    AgnBlock,
    DcasgdBlock,
    DelayAdaptiveBlock,
    DownpourBlock,
    GapAwareBlock,
    GemBlock,
    RingmasterBlock,
    ServerMomentumBlock,
    SoftsyncBlock,
    StalenessBlock,
)
from ._model_rule_blocks import EamsgdBlock, EasgdBlock, FedasyncBlock
from ._open_rule_blocks import ImportRuleBlock, LocalBlock
from ._round_rule_blocks import (
    Ca2flBlock,
    FadasBlock,
    FedbuffBlock,
    FedcompassBlock,
    MaleniaBlock,
    MifaBlock,
    RennalaBlock,
    SyncBlock,
)
from ._windows import static_window

IMPORT_TAG = "import"


def _rule_tag(value: Any) -> str | None:
    rule = value.get("rule") if isinstance(value, dict) else getattr(value, "rule", None)
    if isinstance(rule, str):
        return rule
    return IMPORT_TAG if rule is not None else None


Optimizer = Annotated[
    Annotated[GemBlock, Tag("gem")]
    | Annotated[DownpourBlock, Tag("downpour")]
    | Annotated[StalenessBlock, Tag("staleness")]
    | Annotated[SoftsyncBlock, Tag("softsync")]
    | Annotated[AgnBlock, Tag("agn")]
    | Annotated[EasgdBlock, Tag("easgd")]
    | Annotated[DcasgdBlock, Tag("dcasgd")]
    | Annotated[SyncBlock, Tag("sync")]
    | Annotated[LocalBlock, Tag("local")]
    | Annotated[DelayAdaptiveBlock, Tag("delay_adaptive")]
    | Annotated[RingmasterBlock, Tag("ringmaster")]
    | Annotated[RennalaBlock, Tag("rennala")]
    | Annotated[MaleniaBlock, Tag("malenia")]
    | Annotated[FedbuffBlock, Tag("fedbuff")]
    | Annotated[FadasBlock, Tag("fadas")]
    | Annotated[Ca2flBlock, Tag("ca2fl")]
    | Annotated[MifaBlock, Tag("mifa")]
    | Annotated[FedcompassBlock, Tag("fedcompass")]
    | Annotated[FedasyncBlock, Tag("fedasync")]
    | Annotated[ServerMomentumBlock, Tag("server_momentum")]
    | Annotated[GapAwareBlock, Tag("gap_aware")]
    | Annotated[EamsgdBlock, Tag("eamsgd")]
    | Annotated[ImportRuleBlock, Tag(IMPORT_TAG)],
    Discriminator(_rule_tag),
]


def window_of(block) -> int:
    """Mini-batches per commit (a dynamic window's H, the most a worker takes): the timing
    model needs it before any rule is built."""
    return static_window(getattr(block, "window", 1))


def stops_of(block, n_workers: int) -> timing.Stops | None:
    """The computations in flight the server stops for the rule (`timing.DelayStops` for
    Ringmaster's calculation stops, `timing.BatchRestarts` for Rennala's restarts at every
    step), their threshold or batch resolved for ``n_workers``; None for every other rule."""
    if isinstance(block, RingmasterBlock) and block.stops:
        return timing.DelayStops(block.threshold or n_workers)
    if isinstance(block, RennalaBlock) and block.restarts:
        return timing.BatchRestarts(block.batch or n_workers)
    return None


def stops_field(block) -> str | None:
    """The optimizer field that asks for stops (`optimizer.stops`, `optimizer.restarts`), or
    None."""
    if isinstance(block, RingmasterBlock) and block.stops:
        return "optimizer.stops"
    if isinstance(block, RennalaBlock) and block.restarts:
        return "optimizer.restarts"
    return None
