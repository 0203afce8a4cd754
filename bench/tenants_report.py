"""bench/tenants.py's report: Markdown, the targets table and the chart."""
from __future__ import annotations

from pathlib import Path

from bench.tenants_plan import COLD_TARGET_MS, MULTI_MIX, MULTI_REF, SINGLE, fmt



# ---------------------------------------------------------------- report

def render_markdown(report: dict) -> str:
    m, p = report["machine"], report["plan"]
    lines = [f"# Many KBs in one `faq serve` process ({report['created_at']})", "",
             f"Command: `{report['command']}`", "",
             f"Machine: {m['cpu_model']}, {m['cpus']} CPUs; load average before {m['load_avg_before']}, "
             f"after {m['load_avg_after']}. Encoder MiniLM (runtime from the build manifest), Annoy "
             f"n_trees {p['n_trees']}, query cache off.",
             f"KBs: {p['kbs']} ({', '.join(f'{k}: {v}' for k, v in p['sources'].items())}), "
             f"{p['phrasings_total']:,} phrasings, {p['size_min']}–{p['size_max']} per KB (median "
             f"{p['size_median']}); build: {report['build']}.", ""]
    targets = report.get("targets") or []
    if targets:
        lines += ["| target | measured | met |", "|---|---|---|"]
        lines += [f"| {t['target']} | {t['measured']} | {t['met']} |" for t in targets]
        lines.append("")
    perf = report.get("perf")
    if perf:
        ref = perf["reference"]
        lines += [f"Latency: the single-KB deployment of {ref['name']} ({ref['source']}, {ref['n_faqs']} FAQs, "
                  f"{ref['n_phrasings']} phrasings, {ref['n_queries']} queries) against the {p['kbs']}-KB process "
                  f"with every KB resident (FAQ_MAX_RESIDENT_KBS={perf['budget']}), {report['settings']['rounds']} "
                  f"interleaved rounds of {report['settings']['requests']} requests, latencies pooled:", "",
                  "| system | clients | p50 ms | p90 ms | p99 ms | req/s | errors | top-1 | server total p50 | "
                  "encode p50 | per-round p50 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for run in perf["runs"].values():
            lat, srv = run["latency_ms"], run["server_timings_ms_median"]
            lines.append(f"| {run['system']} | {run['concurrency']} | {fmt(lat['p50'], 2)} | {fmt(lat['p90'], 2)} | "
                         f"{fmt(lat['p99'], 2)} | {fmt(run['throughput_rps'])} | {run['errors']} | "
                         f"{fmt(run['top1_accuracy'], 3)} | {fmt(srv.get('total'), 2)} | {fmt(srv.get('encode'), 2)} | "
                         f"{', '.join(fmt(x, 2) for x in run['per_round_p50'])} |")
        lines += ["", "| against the single KB | clients | p50 ratio | p99 ratio | throughput ratio |",
                  "|---|---|---|---|---|"]
        lines += [f"| {c['system']} | {c['concurrency']} | {fmt(c['p50_ratio'], 3)} | {fmt(c['p99_ratio'], 3)} | "
                  f"{fmt(c['throughput_ratio'], 3)} |" for c in perf["comparisons"]]
        lines.append("")
    colds = [c for c in (report.get("cold"), ) if c]
    if colds or perf:
        lines += ["First request to a KB that is not resident (one client unless said; ms):", "",
                  "| server | pass | requests | failed | p50 | p90 | max | over 300 ms | server load p50 / max | "
                  "its /match total p50 |", "|---|---|---|---|---|---|---|---|---|---|"]
        rows = [(c["budget"], label, s) for c in colds for label, s in c["passes"].items()]
        if perf:
            rows.append((perf["budget"], "never loaded", perf["never_loaded"]))
        for budget, label, s in rows:
            lines.append(f"| budget {budget} | {label} | {s['n']} | {s['failed']} | {fmt(s['p50_ms'])} | "
                         f"{fmt(s['p90_ms'])} | {fmt(s['max_ms'])} | {s['over_target']} | "
                         f"{fmt(s['server_load_ms_p50'], 0)} / {fmt(s['server_load_ms_max'], 0)} | "
                         f"{fmt(s['match_total_ms_p50'])} |")
        lines += ["", "Server load = the server's own `loaded KB <name> in N ms` log line (open the KB's index and "
                  "pipeline); its /match total = the first request's `timings_ms.total`. The client's time also holds "
                  "the HTTP round trip and the hand-off of the load to a worker thread."]
        lines.append("")
    if colds or perf:
        lines += ["Server RSS (MB; resident counts the default KB):", "",
                  "| server | at start | after 1 KB | at 20 resident | all touched once | after each later pass | "
                  "end | peak | max resident seen |", "|---|---|---|---|---|---|---|---|---|"]
        for c in colds:
            r = c["rss_mb"]
            later = ", ".join(fmt(v, 0) for v in r["after_each_pass"][1:]) or "–"
            lines.append(f"| budget {c['budget']} | {fmt(r['start'], 0)} | {fmt(r['after_1_kb'], 0)} | "
                         f"{fmt(r['at_20_resident'], 0)} | {fmt(r['after_all_touched'], 0)} | {later} | "
                         f"{fmt(r['end'], 0)} | {fmt(r['peak'], 0)} | {fmt(c['max_resident_seen'], 0)} |")
        if perf:
            r = perf["rss_mb"]
            lines.append(f"| budget {perf['budget']} | {fmt(r['multi_start'], 0)} | {fmt(r['after_1_kb'], 0)} | "
                         f"{fmt(r['at_20_resident'], 0)} | {fmt(r['after_all_touched'], 0)} | – | "
                         f"{fmt(r['multi_after_load'], 0)} | – | {fmt(perf['resident_after_touch'], 0)} |")
            lines.append(f"| single KB | {fmt(r['single_ready'], 0)} (ready) | | | | | "
                         f"{fmt(r['single_after_load'], 0)} | | 1 |")
            lines += ["", f"Memory per resident KB (all touched once − after 1 KB, over the other KBs): "
                          f"{fmt(r['per_resident_kb'], 2)} MB."]
        for part in [*colds, *([perf] if perf else [])]:
            f = part.get("first_load")
            if f:
                lines.append(f"First KB loaded (budget {part['budget']}): {f['kb']}, {fmt(f['client_ms'])} ms at the "
                             f"client, {fmt(f['server_load_ms'], 0)} ms server load, RSS +{fmt(f['rss_added_mb'], 0)} MB.")
        lines.append("")
    swap = report.get("swap")
    if swap:
        lines += [f"Hot swap of {swap['kb']} while one client per KB queries {', '.join(swap['kbs'])} without pause "
                  f"(FAQ_KB_POLL_SECONDS=1): {swap['requests']:,} requests, {swap['failed']} failed.", "",
                  "| step | CLI s | served after s | notes |", "|---|---|---|---|"]
        for e in swap["steps"]:
            after = e.get("applied_after_s", e.get("served_after_s"))
            notes = []
            if "version" in e:
                notes.append(f"version {e['version']}")
            if "reload_status" in e:
                body = e.get("reload_body")
                swapped = body.get("swapped") if isinstance(body, dict) else None
                notes.append(f"reload answered {e['reload_status']}" + (
                    "" if swapped is None else ", swapped" if swapped else ", nothing to swap: the poller was first"))
            if "new_faq_still_matched" in e:
                notes.append(f"new FAQ still matched: {e['new_faq_still_matched']}")
            lines.append(f"| {e['step']} | {fmt(e['cli_s'], 1)} | {fmt(after, 2)} | {'; '.join(notes)} |")
        lines += ["", "| KB | requests | statuses | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|---|"]
        for kb, s in swap["per_kb"].items():
            lat = s["latency_ms_200"]
            lines.append(f"| {kb}{' (swapped)' if s['swapped'] else ''} | {s['requests']} | {s['status']} | "
                         f"{fmt(lat['p50'])} | {fmt(lat['p99'])} | {fmt(lat['max'])} |")
        lines.append("")
    lines += ["Timings on a shared 2-core machine are noisy, and the load generator shares the cores with the "
              "server: compare within one run.", ""]
    return "\n".join(lines)


def targets_table(report: dict) -> list[dict]:
    out = []
    perf, cold, swap = report.get("perf"), report.get("cold"), report.get("swap")
    if perf:
        for c in perf["comparisons"]:
            if c["system"] in (MULTI_REF, MULTI_MIX):
                run = perf["runs"][f"{c['system']} c{c['concurrency']}"]["latency_ms"]
                base = perf["runs"][f"{SINGLE} c{c['concurrency']}"]["latency_ms"]
                what = "the reference KB" if c["system"] == MULTI_REF else "every KB in turn"
                out.append({"target": f"resident KBs' /match within 10% of one KB: {what}, "
                                      f"{c['concurrency']} client(s)",
                            "measured": f"p50 {run['p50']:.2f} vs {base['p50']:.2f} ms ({c['p50_ratio']:.3f}x), "
                                        f"p99 {run['p99']:.2f} vs {base['p99']:.2f} ms ({c['p99_ratio']:.3f}x)",
                            "met": "yes" if c["p50_within_10pct"] else "no"})
    colds = [(f"budget {cold['budget']}, {label}", s) for label, s in cold["passes"].items()] if cold else []
    if perf:
        colds.append((f"budget {perf['budget']}, never loaded", perf["never_loaded"]))
    for label, s in colds:
        out.append({"target": f"first query to a cold KB <= 300 ms ({label})",
                    "measured": f"p50 {fmt(s['p50_ms'])}, p90 {fmt(s['p90_ms'])}, max {fmt(s['max_ms'])} ms over "
                                f"{s['n']} KBs; {s['over_target']} over 300 ms, {s['failed']} failed",
                    "met": "yes" if s["over_target"] == 0 and s["failed"] == 0 else "no"})
    if cold:
        r = cold["rss_mb"]
        out.append({"target": f"faq_kbs_resident never above FAQ_MAX_RESIDENT_KBS={cold['budget']}",
                    "measured": f"max seen {fmt(cold['max_resident_seen'], 0)} over {fmt(cold['kb_loads'], 0)} KB loads",
                    "met": "yes" if cold["budget_kept"] else "no"})
        all_resident = f"; all {perf['budget'] - 1} KBs resident: {fmt(perf['rss_mb']['multi_after_load'], 0)} MB" \
            if perf else ""
        out.append({"target": f"RSS bounded by FAQ_MAX_RESIDENT_KBS={cold['budget']} (every pass ends <= 1.05 x RSS "
                              "at the budget)",
                    "measured": f"at the budget {fmt(r['at_budget'], 0)} MB; after each pass over all {cold['kbs']} "
                                f"KBs {', '.join(fmt(v, 0) for v in r['after_each_pass'])}, end {fmt(r['end'], 0)}, "
                                f"peak {fmt(r['peak'], 0)} MB{all_resident}",
                    "met": "yes" if cold["rss_bounded"] else "no"})
    if swap:
        out.append({"target": "hot swap of one KB under load: 0 failed requests",
                    "measured": f"{swap['failed']} failed of {swap['requests']:,} on {len(swap['kbs'])} KBs",
                    "met": "yes" if swap["failed"] == 0 else "no"})
    return out


def plot(report: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    parts = [report[key] for key in ("cold", "perf") if report.get(key)]
    if not parts:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for part in parts:
        rows = [r for r in part["touches"] if r.get("rss_mb") is not None]
        ax1.plot(range(1, len(rows) + 1), [r["rss_mb"] for r in rows], label=f"FAQ_MAX_RESIDENT_KBS={part['budget']}")
    ax1.set_xlabel(f"requests to a KB, one client, KB after KB ({report['plan']['kbs']} per pass)")
    ax1.set_ylabel("server RSS (MB)")
    ax1.set_title("RSS of the one faq serve process")
    ax1.legend()
    for part in parts:
        by_pass: dict[str, list[float]] = {}
        for r in part["touches"]:
            if r["status"] == 200:
                by_pass.setdefault(r["pass"], []).append(r["ms"])
        for label, values in by_pass.items():
            values = sorted(values)
            ax2.plot(values, [(i + 1) / len(values) for i in range(len(values))],
                     label=f"budget {part['budget']}: {label}")
    ax2.axvline(COLD_TARGET_MS, color="grey", linestyle=":", label="300 ms")
    ax2.set_xscale("log")
    ticks = [t for t in (5, 10, 20, 50, 100, 200, 300, 500, 1000, 2000)
             if t <= max(COLD_TARGET_MS, *(r["ms"] for part in parts for r in part["touches"]))]
    ax2.set_xticks(ticks, [str(t) for t in ticks])
    ax2.minorticks_off()
    ax2.set_xlabel("first request to a KB that is not resident (ms)")
    ax2.set_ylabel("share of KBs")
    ax2.set_title("Cold KB latency")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


