#!/usr/bin/env python3
"""Who ran on a CPU, from the scheduler's context switches.

Reads `perf script` output of `sched:sched_switch` events on standard
input and prints, for one CPU and a time window: each thread's run time
and number of runs there, and how long THREAD (a thread name, e.g.
flashtree-w0) was off the CPU, split into the times it was preempted
(switched out runnable) and the times it slept. Hardware counters are
not available on this machine, and CPU-clock samples hardly see time the
kernel spends in exits to the hypervisor; context switches do.

Usage (the open loop of `bench commit` on core 0):
  perf record -e sched:sched_switch -o sw.data -- \\
      taskset -c 0 flashtree bench commit --seconds 3 --tasks 256
  perf script -i sw.data -F cpu,time,trace | \\
      python3 scripts/sched-by-thread.py --cpu 0 --thread flashtree-w0
The first run prints THREAD's switch-outs per half second, to find a
phase; then pass its bounds with --from and --to (seconds, as perf
prints them).
"""
import argparse
import collections
import re
import sys

SWITCH = re.compile(
    r"\[(\d+)\]\s+(\d+\.\d+):\s+(?:sched:sched_switch:\s+)?prev_comm=(.+?) prev_pid=(\d+) "
    r"prev_prio=-?\d+ prev_state=(\S+) ==> next_comm=(.+?) next_pid=(\d+)"
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", type=int, required=True)
    ap.add_argument("--thread", required=True, help="thread name (comm)")
    ap.add_argument("--from", dest="t0", type=float, default=None)
    ap.add_argument("--to", dest="t1", type=float, default=None)
    args = ap.parse_args()

    events = []
    for line in sys.stdin:
        m = SWITCH.search(line)
        if m and int(m.group(1)) == args.cpu:
            events.append(
                (float(m.group(2)), m.group(3), int(m.group(4)), m.group(5), m.group(6), int(m.group(7)))
            )
    if not events:
        sys.exit(f"no sched_switch events of CPU {args.cpu} on standard input")
    if args.t0 is None or args.t1 is None:
        per_half_s = collections.Counter(
            int(t * 2) / 2 for t, prev, *_ in events if prev == args.thread
        )
        print(f"{args.thread} switch-outs on CPU {args.cpu} per half second (pick --from/--to):")
        for t in sorted(per_half_s):
            print(f"  {t:.1f}  {per_half_s[t]}")
        return
    t0, t1 = args.t0, args.t1

    run_ms = collections.defaultdict(float)
    runs = collections.Counter()
    on_cpu = None  # (name, since)
    out_since = None  # (time, preempted) when THREAD last left the CPU
    preempted, slept = [], []
    for t, prev, _prev_pid, state, nxt, _next_pid in events:
        if on_cpu is not None and t > t0:
            name, since = on_cpu
            begin, end = max(since, t0), min(t, t1)
            if end > begin:
                run_ms[name] += (end - begin) * 1e3
        if t0 <= t <= t1:
            runs[nxt] += 1
        on_cpu = (nxt, t)
        if prev == args.thread:
            out_since = (t, state.startswith("R"))
        if nxt == args.thread and out_since is not None:
            since, was_preempted = out_since
            if t0 <= since <= t1:
                (preempted if was_preempted else slept).append((t - since) * 1e3)
            out_since = None
    window_ms = (t1 - t0) * 1e3
    print(f"CPU {args.cpu}, {t0:.3f} to {t1:.3f} ({window_ms:.0f} ms):")
    print(f"  {'thread':<28} {'run ms':>9} {'runs':>8}")
    for name, ms in sorted(run_ms.items(), key=lambda x: -x[1])[:12]:
        print(f"  {name:<28} {ms:9.1f} {runs[name]:8d}")
    for label, spans in (("preempted (runnable)", preempted), ("sleeping", slept)):
        if spans:
            print(
                f"{args.thread} off the CPU, {label}: {len(spans)} times, {sum(spans):.1f} ms, "
                f"longest {max(spans):.2f} ms"
            )


if __name__ == "__main__":
    main()
