"""Counts per buffer of a scan JSON: proved, counterexample (reachable / latent / routing
undecided: no host entry point was shown to reach or to mask it), unknown,
unsupported, unreachable; the latent findings with their masking routing condition; the host
limits; the counterexamples not proven minimal; the most common undecided reasons.

    python3 benchmarks/verdict_counts.py scan.json
"""
import json, sys, collections
d = json.load(open(sys.argv[1]))
cnt = collections.defaultdict(collections.Counter)
latent = collections.Counter(); lims = collections.Counter(); reasons = collections.Counter()
not_minimal = []
for k in d["kernels"]:
    for c in k["checks"]:
        v = c["verdict"]
        if v == "counterexample":
            reach = (c.get("routing") or {}).get("reachable")
            v = {False: "cex-latent", True: "cex-reachable"}.get(reach, "cex-routing-undecided")
            if not (c.get("counterexample") or {}).get("minimal"):
                not_minimal.append(f"{k['kernel']} {c['buffer']}/{c['layout']} {c.get('property', 'address')}")
            if v == "cex-latent":
                latent[(c["buffer"], c["layout"], c.get("cause"), "; ".join(m.split(" [")[0] for m in c["routing"]["masked_by"]))] += 1
        cnt[c["buffer"]][v] += 1
        if v in ("unknown", "unsupported", "unreachable"):
            reasons[(c["buffer"], v, (c.get("reason") or "")[:90])] += 1
    for l in k.get("host_limits") or []:
        lims[(l["argument"], l["layout"], l["boundary"])] += 1
print("kernels", len(d["kernels"]), "skipped", len(d.get("skipped", [])), "errors", len(d.get("errors", [])))
for b, c in sorted(cnt.items()):
    print(f"  {b}: " + ", ".join(f"{n} {v}" for v, n in sorted(c.items())))
print("latent:")
for x, n in latent.most_common(): print("  ", n, x)
print("host limits:")
for x, n in lims.most_common(): print("  ", n, x)
print("counterexamples not proven minimal:", len(not_minimal))
for x in not_minimal[:12]: print("  ", x)
print("undecided reasons:")
for x, n in reasons.most_common(12): print("  ", n, x)
