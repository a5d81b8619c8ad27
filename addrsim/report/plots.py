"""`addrsim crosscheck --plot FILE.png`: which LSE rows each (batch_id, head_id) reads.

One panel per layout, for one shape of that layout (a failing case when there is one, small
enough to draw every slice): each slice is a horizontal bar over the LSE rows (flat element
index of the fp32 [batch, nhead_q, seqlen_q] buffer) the kernel's address function reads,
drawn over the rows it should read (grey).  Reads outside the buffer, or refused by the V#
range check, are red (they return 0).  SBHD batches that alias batch 0's rows show at a
glance as bars stacked over the same rows.  Uses matplotlib (Agg backend, no screen).
"""
from __future__ import annotations

from typing import Dict, List, Optional

MAX_SLICES = 32


def pick_shapes(cases) -> Dict[str, dict]:
    """layout -> {"shape", "label"} to draw, in the cases' layout order: the failing case
    with the most slices up to MAX_SLICES, else such a case of any prediction."""
    out: Dict[str, dict] = {}
    for lay in dict.fromkeys(c.layout for c in cases):
        fit = [c for c in cases if c.layout == lay and c.shape["batch"] * c.shape["nhead_q"] <= MAX_SLICES]
        pick = sorted(fit, key=lambda c: (c.predicted != "fail", -c.shape["batch"] * c.shape["nhead_q"]))
        if pick:
            c = pick[0]
            out[lay] = {"shape": c.shape, "label": f"predicted {c.predicted}: {c.why}"}
    return out


def plot_rows(af, shapes: Dict[str, dict], path: str, buffer: str = "lse", title: Optional[str] = None) -> str:
    """Draw the rows read per slice for each layout of ``shapes`` (layout -> {"shape",
    "label"}) into the PNG ``path``; returns ``path``.  ``af`` is an
    :class:`addrsim.commands.crosscheck.AddressFunction`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lays = list(shapes)
    rows = [shapes[l]["shape"]["batch"] * shapes[l]["shape"]["nhead_q"] for l in lays]
    fig, axes = plt.subplots(len(lays), 1, figsize=(10, sum(1.3 + 0.26 * max(r, 2) for r in rows)),
                             squeeze=False, gridspec_kw={"height_ratios": [max(r, 2) + 4 for r in rows]})
    for ax, lay in zip(axes[:, 0], lays):
        sh = shapes[lay]["shape"]
        B, H, S = sh["batch"], sh["nhead_q"], sh["seqlen_q"]
        numel = B * H * S
        labels: List[str] = []
        for i, (b, h) in enumerate((b, h) for b in range(B) for h in range(H)):
            want = (b * H + h) * S
            ax.barh(i, S, left=want, height=0.8, color="0.82", edgecolor="0.6")
            off, ok = af.slice_offset(lay, buffer, sh, b, h)
            if off is None:
                ax.plot([want, want + S], [i, i], color="red", lw=2)
            else:
                start = off // 4
                inside = ok and 0 <= start and start + S <= numel
                ax.barh(i, S, left=start, height=0.38, color="tab:blue" if inside else "red",
                        alpha=0.9)
            labels.append(f"b{b} h{h}")
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(min(0, ax.get_xlim()[0]), max(numel, ax.get_xlim()[1]))
        ax.axvline(numel, color="k", lw=0.8, ls=":")
        ax.set_xlabel(f"{buffer.upper()} row (flat element of [batch, nhead_q, seqlen_q] fp32)", fontsize=8)
        shape_txt = " ".join(f"{k}={sh[k]}" for k in ("batch", "nhead_q", "seqlen_q"))
        ax.set_title(f"{lay.upper()}  {shape_txt}  ({shapes[lay]['label']})", fontsize=9)
    fig.suptitle(title or "rows read (blue; red: out of range, read as 0) vs rows it should read (grey)", fontsize=10)
    top = 1 - 0.45 / fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, 0, 1, top))
    from addrsim.files import atomic_open
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, dpi=110, format=str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else "png")
    plt.close(fig)
    return path
