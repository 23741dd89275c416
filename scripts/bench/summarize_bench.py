"""One markdown table row per `eagle-convert bench --report` JSON: draft, k, τ, acceptance rate, per-position
acceptance, rounds, tok/s with and without speculation, speedup, lossless.
  python scripts/bench/summarize_bench.py REPORT.json..."""

import json
import sys


def row(path: str) -> str:
    r = json.load(open(path))
    o, a = r["overall"], r["overall"]["acceptance"]
    fmt = lambda x, f: "–" if x is None else format(x, f)  # noqa: E731
    lossless = (r.get("lossless") or {}).get("identical")
    return (f"| {path.rsplit('/', 1)[-1].removesuffix('.json')} | {a['k']} | {fmt(a['mean_acceptance_length'], '.3f')} "
            f"| {fmt(a['acceptance_rate'], '.3f')} | {' / '.join(fmt(x, '.3f') for x in a['per_position_rates'])} "
            f"| {a['drafts']} | {fmt(o['tokens_per_s'], '.2f')} | {fmt(o['baseline_tokens_per_s'], '.2f')} "
            f"| {fmt(o['speedup'], '.3f')} | {'–' if lossless is None else lossless} |")


if __name__ == "__main__":
    print("| run | k | τ | acceptance rate | per-position acceptance | rounds | tok/s spec | tok/s plain | speedup "
          "| identical to plain |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in sys.argv[1:]:
        print(row(p))
