"""The GPU's state in smi.sh's sample files: busy SM clock, power cap, peak power.

Imported by ab-bench.sh's and targets.sh's summaries.
"""
import statistics


def summary(paths):
    """(median SM MHz, % of samples under the software power cap, peak W)
    over the samples drawing more than 300 W (busy), or None without any."""
    busy = []
    for path in paths:
        try:
            with open(path) as f:
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            try:
                mhz, w, why = [v.strip() for v in line.split(",")]
                busy.append((float(mhz), float(w), int(why, 16)))
            except ValueError:
                pass
    busy = [b for b in busy if b[1] > 300]
    if not busy:
        return None
    capped = 100 * sum(b[2] & 4 != 0 for b in busy) / len(busy)
    return statistics.median(b[0] for b in busy), capped, max(b[1] for b in busy)
