"""The results table of scripts/bench-matrix.sh and scripts/bench-history.sh.

Each run left a JSON report in OUT/<regime>.<build>.<run>.json; the table
has one row per (label, getter) of each regime: the median and every run
of the two builds, and their ratio.
"""
import json
import statistics
import sys


def fmt(v):
    return "%.3g" % v if abs(v) < 1000 else "{:,.0f}".format(v)


def table(out, runs, regimes, rows, base, new):
    print()
    print("| regime | %s: median (runs) | %s: median (runs) | %s/%s |" % (base, new, new, base))
    print("|---|---|---|---|")
    for r in regimes:
        for label, get in rows[r]:
            med, runs_of = {}, {}
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
                med[b] = statistics.median(vals) if vals else None
            ratio = "%.2f" % (med[new] / med[base]) if med[base] and med[new] is not None else "-"
            cell = lambda b: ("%s (%s)" % (fmt(med[b]), runs_of[b])) if med[b] is not None else "-"
            print("| %s | %s | %s | %s |" % (label, cell(base), cell(new), ratio))
