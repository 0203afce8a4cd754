"""A build's expected-precision table (threshold -> expected precision / answer rate) as the KB serves it,
and its curve as a PNG: shown by `faq index build` / `faq index list` and by the console's builds page."""
from __future__ import annotations

from pathlib import Path

#: the curve's file in a build's folder
CURVE_FILE = "expected_precision.png"


def served_table_for(manifest: dict, settings) -> list[dict] | None:
    """The build's replayed table for the (pool, answer weight) `settings` serve it with (the rules of
    `Pipeline.served_pool` / `served_answer_weight`, read off the manifest); None without one."""
    from index.answers import nearest_weight
    from index.decision import served_table

    if settings.scoring != "model":
        return None
    used = (manifest.get("answers") or {}).get("used") and settings.answer_weight > 0
    weight = nearest_weight(settings.answer_weight) if used else 0.0
    return served_table(manifest, settings.pool_variants or (1 if used else 2), weight, settings.oos_share)


def plot_expected_precision(manifest: dict, settings, out: Path) -> bool:
    """The build's threshold -> expected precision / answer rate curve as a PNG; False when it has no table."""
    table = served_table_for(manifest, settings)
    if not table:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["threshold"] for r in table]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(t, [r["expected_precision"] for r in table], marker="o", label="expected precision")
    ax.plot(t, [r["answer_rate"] for r in table], marker="s", label="answer rate")
    ax.axvline(settings.default_threshold, color="grey", lw=1, ls="--")
    ax.set_xlabel("threshold")
    ax.set_ylim(0, 1)
    ax.set_title(f"{manifest['version']} ({settings.oos_share:.0%} out of scope assumed)", fontsize=9)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return True
