"""Turns the comparison's JSON lines (one per implementation and loop, from peers.py,
peers.mjs, the Rust driver and compare.sh's reading of `dlock bench --json`) into one
Markdown table, or with --json into one JSON object per table row.

Usage: python3 table.py [--json] < results.jsonl
       python3 table.py --from-bench < bench.jsonl >> results.jsonl
"""

import json
import sys

LOOPS = ("seq", "handoff", "semaphore")


# The table's order: dlock, then the peers as issue 37 names them; others after these.
ORDER = [
    "dlock mutex",
    "dlock fair mutex",
    "dlock mutex (dlock bench)",
    "dlock fair mutex (dlock bench)",
    "redis-py Lock",
    "redis-py Lock, sleep=1ms",
    "python-redis-lock",
    "pottery Redlock",
    "redis-fifo-lock",
    "rslock 0.10.0",
    "redis-semaphore",
    "redis-semaphore, retryInterval 1ms",
]


def rows_of(lines):
    """Merges the lines into one row per implementation, in the table's order."""
    rows = {}
    for line in lines:
        line = line.strip()
        if not line:
            continue
        record = json.loads(line)
        row = rows.setdefault(record["impl"], {"impl": record["impl"]})
        if "failed" in record:
            row["failed"] = record["failed"]
            continue
        loop = record.pop("loop")
        record.pop("impl")
        row[loop] = record
    rank = lambda row: ORDER.index(row["impl"]) if row["impl"] in ORDER else len(ORDER)
    return sorted(rows.values(), key=rank)


def table(rows):
    notes = []  # footnote texts, numbered in order

    def note(text):
        if text not in notes:
            notes.append(text)
        return f"— ({notes.index(text) + 1})"

    def fmt(value, digits):
        return "—" if value is None else f"{value:.{digits}f}"

    def min_max(loop):
        workers = loop.get("per_worker")
        return f"{min(workers)}/{max(workers)}" if workers else "—"

    header = (
        "| implementation | seq cycles/s | seq cmds (scripts)/acq | hand-off acq/s | busy | gap p50 ms "
        "| gap p99 ms | per worker min/max | hand-off cmds (scripts)/acq | semaphore permits busy "
        "| sem. per worker min/max | sem. cmds (scripts)/acq |"
    )
    out = [header, "|" + "---|" * 12]
    for row in rows:
        if "failed" in row:
            failed = f"failed ({note(row['failed'])[3:-1]})"
            out.append(f"| {row['impl']} | {failed} |" + " |" * 10)
            continue
        cells = [row["impl"]]
        seq = row.get("seq", {})
        if "unsupported" in seq:
            cells += [note(seq["unsupported"])] * 2
        else:
            cells += [fmt(seq.get("cycles_per_s"), 0), cmds(seq, note)]
        hand = row.get("handoff", {})
        if "unsupported" in hand:
            cells += [note(hand["unsupported"])] * 6
        else:
            cells += [
                fmt(hand.get("acquisitions_per_s"), 0),
                fmt(hand.get("busy_fraction"), 2),
                fmt(hand.get("gap_p50_ms"), 2),
                fmt(hand.get("gap_p99_ms"), 2),
                min_max(hand),
                cmds(hand, note),
            ]
        sem = row.get("semaphore", {})
        if "unsupported" in sem:
            cells += [note(sem["unsupported"])] * 3
        else:
            cells += [fmt(sem.get("busy_fraction"), 2), min_max(sem), cmds(sem, note)]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    for number, text in enumerate(notes, 1):
        out.append(f"({number}) {text}")
    return "\n".join(out)


def cmds(loop, note):
    if "commands_per_acquisition" in loop:
        scripts = loop.get("scripts_per_acquisition")
        of_them = "" if scripts is None else f" ({scripts:.1f})"
        return f"{loop['commands_per_acquisition']:.1f}{of_them}"
    if loop.get("commands_unknown"):
        return note(loop["commands_unknown"])
    return "—"


BENCH_UNCOUNTED = (
    "dlock bench does not count commands in these loops; the driver's dlock rows run "
    "the same loops and do"
)


def from_bench(lines):
    """The comparison's lines from `dlock bench --json`: its seq (the plain mutex),
    handoff, handoff_fair and handoff_semaphore rows."""
    scenarios = {}
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            record = json.loads(line)
            scenarios[record["scenario"]] = record

    def handoff(name):
        s = scenarios[name]
        loop = {
            "acquisitions_per_s": s["value"],
            "busy_fraction": s["busy_fraction"],
            "per_worker": s["per_worker"],
            "commands_unknown": BENCH_UNCOUNTED,
        }
        for field in ("gap_p50_ms", "gap_p99_ms"):
            if field in s:
                loop[field] = s[field]
        return loop

    mutex, fair = "dlock mutex (dlock bench)", "dlock fair mutex (dlock bench)"
    out = [
        dict(impl=mutex, loop="seq", cycles_per_s=scenarios["seq"]["value"],
             commands_unknown=BENCH_UNCOUNTED),
        dict(impl=mutex, loop="handoff", **handoff("handoff")),
        dict(impl=mutex, loop="semaphore", **handoff("handoff_semaphore")),
        dict(impl=fair, loop="seq",
             unsupported="dlock bench's seq runs the plain mutex only"),
        dict(impl=fair, loop="handoff", **handoff("handoff_fair")),
        dict(impl=fair, loop="semaphore",
             unsupported="dlock has one semaphore: see the dlock mutex rows"),
    ]
    for record in out:
        print(json.dumps(record))


def main():
    if "--from-bench" in sys.argv[1:]:
        from_bench(sys.stdin)
        return
    rows = rows_of(sys.stdin)
    if "--json" in sys.argv[1:]:
        for row in rows:
            print(json.dumps(row))
    else:
        print(table(rows))


if __name__ == "__main__":
    main()
