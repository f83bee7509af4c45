"""Draw docs/mixture_streams.png: per-source streams before and after a mixture change.

Every cell comes from tokenloom's own code (``build_blending_indices`` for the old blend,
``source_consumed`` and ``ContinuedMixture`` after the change), over sources whose sample
``k`` is ``k`` itself, so the figure shows what the library does, not a drawing of it.

    python docs/mixture_streams.py            # writes docs/mixture_streams.png
"""

from __future__ import annotations

import sys
from pathlib import Path

from tokenloom.index import build_blending_indices
from tokenloom.training.mixture import ContinuedMixture, source_consumed

OLD = {"web": 1.0, "code": 1.0}  # the saved run's weights
NEW = {"web": 2.0, "math": 1.0}  # after the resume: code removed, math added
RESUME, AFTER = 8, 12
COLOURS = {"web": "#4c72b0", "code": "#dd8452", "math": "#55a868"}


class Positions:
    """A source whose sample ``k`` is ``k`` (its position in its own order)."""

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, k: int) -> int:
        return k


def streams() -> tuple[list[tuple[str, int]], dict[str, int]]:
    """``[(source, its sample)]`` per global sample, and the per-source consumed counts."""
    names = list(OLD)
    total = sum(OLD.values())
    index, sample = build_blending_indices([OLD[n] / total for n in names], RESUME)
    served = [(names[int(i)], int(k)) for i, k in zip(index, sample)]
    consumed = source_consumed(index, RESUME, names)
    sources = {name: Positions() for name in {*OLD, *NEW}}
    mixture = ContinuedMixture(sources, consumed, NEW, AFTER)
    for j in range(AFTER):
        source, k = mixture.position(j)
        served.append((mixture.names[source], k))
    return served, consumed


def draw(out: Path) -> None:
    """Write the figure to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    served, consumed = streams()
    rows = ["blend", "web", "code", "math"]
    fig, ax = plt.subplots(figsize=(11, 3.4))
    for t, (source, k) in enumerate(served):
        for row in ("blend", source):
            y = len(rows) - 1 - rows.index(row)
            ax.add_patch(plt.Rectangle((t, y + 0.1), 0.92, 0.8, color=COLOURS[source]))
            ax.text(t + 0.46, y + 0.5, f"{source[0]}{k}", ha="center", va="center",
                    color="white", fontsize=8)  # fmt: skip
    ax.axvline(RESUME - 0.04, color="black", linewidth=2)
    ax.text(RESUME, len(rows) + 0.1, " resume: weights web:code 1:1 -> web:math 2:1",
            fontsize=9, va="bottom")  # fmt: skip
    notes = {
        "web": f"continues from its sample {consumed['web']}",
        "code": f"stops after {consumed['code']} samples",
        "math": "starts at its sample 0",
    }
    for row, note in notes.items():
        y = len(rows) - 1 - rows.index(row)
        ax.text(RESUME + AFTER + 0.3, y + 0.5, note, va="center", fontsize=9)
    ax.set_xlim(0, RESUME + AFTER + 7)
    ax.set_ylim(0, len(rows) + 0.6)
    ax.set_yticks([len(rows) - 0.5 - i for i in range(len(rows))], rows)
    ax.set_xticks(range(0, RESUME + AFTER, 2))
    ax.set_xlabel("global sample (Megatron's sequential sampler reads them in this order)")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    draw(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_suffix(".png"))
