"""The results table of scripts/bench-matrix.sh and scripts/bench-history.sh.

Each run left a JSON report in OUT/<regime>.<build>.<run>.json; the table
has one row per (label, getter[, better]) of each regime: the median and
every run of the two builds, their ratio, and a verdict. better is "lower"
(the default: CPU, latency, memory), "higher" (throughput) or None (no
direction, e.g. a count that must only stay at its cap). The verdict says
"worse" or "better" only when every run of one build is on that side of
every run of the other; otherwise the runs overlap and the difference is
not told apart from the machine's noise.
"""
import json
import statistics
import sys


def fmt(v):
    return "%.3g" % v if abs(v) < 1000 else "{:,.0f}".format(v)


def table(out, runs, regimes, rows, base, new):
    print()
    print("| regime | %s: median (runs) | %s: median (runs) | %s/%s | verdict |" % (base, new, new, base))
    print("|---|---|---|---|---|")
    for r in regimes:
        for row in rows[r]:
            label, get = row[0], row[1]
            better = row[2] if len(row) > 2 else "lower"
            med, runs_of, all_of = {}, {}, {}
            for b in (base, new):
                vals = []
                for i in range(1, runs + 1):
                    try:
                        j = json.load(open("%s/%s.%s.%d.json" % (out, r, b, i)))
                        if j.get("missingDeliveries"):
                            print("note: %s %s run %d missed %d deliveries" % (r, b, i, j["missingDeliveries"]), file=sys.stderr)
                        vals.append(get(j))
                    except (OSError, KeyError, ValueError, TypeError, ZeroDivisionError):
                        pass
                runs_of[b] = ", ".join(fmt(v) for v in vals) or "-"
                all_of[b] = vals
                med[b] = statistics.median(vals) if vals else None
            ratio = "%.2f" % (med[new] / med[base]) if med[base] and med[new] is not None else "-"
            cell = lambda b: ("%s (%s)" % (fmt(med[b]), runs_of[b])) if med[b] is not None else "-"
            print("| %s | %s | %s | %s | %s |" % (label, cell(base), cell(new), ratio, verdict(all_of[base], all_of[new], better)))


def verdict(b, n, better):
    if not b or not n or better is None:
        return ""
    if min(n) > max(b):
        return "worse" if better == "lower" else "better"
    if max(n) < min(b):
        return "better" if better == "lower" else "worse"
    return "overlap"
