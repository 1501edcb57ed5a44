#!/usr/bin/env python3
"""Where a GPU's time goes, kernel by kernel: Nsight Compute's CSV of a short run summed by
kernel name, the heaviest first.

    ncu --metrics gpu__time_duration.sum --print-units base --csv <program> > k.csv
    python3 benches/kernel_summary.py k.csv [TOP]

`benches/gpu_sitting.sh` profiles a `pipeline bench train` this way (`kernel_profile`). The
program's own output is mixed into ncu's stdout, so lines before the CSV's header are skipped.
ncu writes one row per kernel launch and metric ("Metric Name", "Metric Value"; the default
"details" page) or, with `--page raw`, one row per launch with the metric as a column; both are
read. Durations are in nanoseconds (`--print-units base`); a value with thousands separators
is read too.
"""

import csv
import sys
from collections import defaultdict

METRIC = "gpu__time_duration.sum"


def rows(lines):
    """The CSV's rows as dicts, from the header line on (the line naming "Kernel Name")."""
    for k, line in enumerate(lines):
        if '"Kernel Name"' in line or line.startswith("Kernel Name"):
            return csv.DictReader(lines[k:])
    return iter(())


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def durations(lines):
    """(kernel name, nanoseconds) for each launch with a duration."""
    for row in rows(lines):
        name = row.get("Kernel Name")
        if row.get("Metric Name") is not None:
            if row["Metric Name"] != METRIC:
                continue
            ns = number(row.get("Metric Value"))
        else:
            ns = number(row.get(METRIC))  # --page raw: the metric is a column
        if name and ns is not None:
            yield name, ns


def summary(lines, top=40):
    """The summary's text: launches and total device time, then the `top` kernels by time."""
    total = defaultdict(float)
    count = defaultdict(int)
    for name, ns in durations(lines):
        total[name] += ns
        count[name] += 1
    if not total:
        head = "".join(lines[:40])
        return f"no kernel durations in ncu's output; its first lines:\n{head}"
    all_ns = sum(total.values())
    out = [
        f"{sum(count.values())} kernel launches, {len(total)} kernels, "
        f"{all_ns / 1e6:.3f} ms of device time in all",
        f"{'total ms':>10} {'share':>6} {'launches':>8} {'mean us':>9}  kernel",
    ]
    for name in sorted(total, key=total.get, reverse=True)[:top]:
        short = name if len(name) <= 140 else name[:137] + "..."
        out.append(
            f"{total[name] / 1e6:10.3f} {total[name] / all_ns:6.1%} {count[name]:8d} "
            f"{total[name] / count[name] / 1e3:9.1f}  {short}"
        )
    return "\n".join(out)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: kernel_summary.py NCU_CSV [TOP]")
    with open(sys.argv[1], errors="replace") as f:
        lines = f.readlines()
    print(summary(lines, int(sys.argv[2]) if len(sys.argv) == 3 else 40))


if __name__ == "__main__":
    main()
