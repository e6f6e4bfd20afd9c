#!/usr/bin/env python3
"""Off-CPU recording cost (issue 22, item 6): `ntprof record --off-cpu` (as root: switch samples; as an
unprivileged user: switch records + /proc readings) against `perf record -e sched:sched_switch -g` (+ `perf
report`) and `perf record --off-cpu`, on a ping-pong over a pipe that switches about 10,000 times a second.

For each profiler: the workload's wall time (its slowdown against the unprofiled run), the recorder's CPU time
(the rusage of the profiler and what it waited for, minus the workload's own CPU time, which the workload
prints), per context switch and per second of the run; for perf also `perf report --stdio` (its whole job is
record + report; ntprof's report is built inside its run). Medians (min-max) of ROUNDS interleaved rounds.

Usage: python3 benches/offcpu/run.py [--quick]  (needs target/release/ntprof, gcc, perf, setpriv; run as root).
Writes its section of BENCHMARKS.md between `<!-- offcpu:begin -->` and `<!-- offcpu:end -->` (appended when
absent); --quick runs one round and prints the section only."""
import json, os, re, resource, shutil, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUNDS_N = 10000  # round trips: two blocking switch-outs each
WORK_US = "30"    # CPU per message: about 10,000 switches a second here
QUICK = "--quick" in sys.argv
ROUNDS = 1 if QUICK else 3
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]


def children_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def run(cmd, **kw):
    c0 = children_cpu()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    cpu = children_cpu() - c0
    m = re.search(r"pingpong rounds=(\d+) wall_s=([\d.]+) cpu_s=([\d.]+)", p.stderr + p.stdout)
    return p, cpu, m


def main():
    tmp = tempfile.mkdtemp(prefix="ntprof-offcpu-bench-")
    os.chmod(tmp, 0o777)
    prog = os.path.join(tmp, "pingpong")
    subprocess.run(["gcc", "-O2", "-g", "-o", prog, os.path.join(ROOT, "benches/offcpu/pingpong.c")], check=True)
    ntprof = os.path.join(ROOT, "target/release/ntprof")
    local = os.path.join(tmp, "ntprof")
    shutil.copy(ntprof, local)
    os.chmod(local, 0o755)
    args = [prog, str(ROUNDS_N), WORK_US]
    perf_data = os.path.join(tmp, "perf.data")
    rows = {k: [] for k in ["base", "ntprof-root", "ntprof-user", "perf-sched"]}
    perf_offcpu_note = None
    for _ in range(ROUNDS):
        p, cpu, m = run(args)
        rows["base"].append(dict(wall=float(m[2]), wcpu=float(m[3]), rec=0.0, switches=2 * ROUNDS_N))
        for key, prefix in [("ntprof-root", []), ("ntprof-user", NOBODY)]:
            # A machine format goes to a file (-o): written as a temporary file in the folder, then renamed,
            # so the folder must let nobody write too.
            out_json = os.path.join(tmp, key + ".json")
            p, cpu, m = run(prefix + [local, "record", "-q", "--off-cpu", "-g", "--format", "json", "-o", out_json,
                                      "--"] + args)
            assert p.returncode == 0, p.stderr
            with open(out_json) as f:
                rep = json.load(f)
            off = rep["off_cpu"]
            rows[key].append(dict(wall=float(m[2]), wcpu=float(m[3]), rec=cpu - float(m[3]),
                                  own=rep["run"]["recorder_cpu_ms"] / 1e3, switches=off["switches"],
                                  mechanism=off["mechanism"], unread=off["unread_ns"],
                                  total=off["voluntary_ns"] + off["preempted_ns"]))
        p, cpu, m = run(["perf", "record", "-q", "-e", "sched:sched_switch", "-g", "-o", perf_data, "--"] + args)
        assert p.returncode == 0, p.stderr
        r0 = children_cpu()
        subprocess.run(["perf", "report", "--stdio", "-i", perf_data], capture_output=True)
        report = children_cpu() - r0
        rows["perf-sched"].append(dict(wall=float(m[2]), wcpu=float(m[3]), rec=cpu - float(m[3]), report=report,
                                       switches=2 * ROUNDS_N))
        if perf_offcpu_note is None:
            p = subprocess.run(["perf", "record", "--off-cpu", "-o", perf_data + ".off", "--"] + args,
                               capture_output=True, text=True)
            w = [l.strip() for l in p.stderr.splitlines() if "off-cpu" in l or "BPF" in l]
            perf_offcpu_note = w[0] if w else f"exit status {p.returncode}"
            perf_offcpu_note = re.sub(r"(BUILD_BPF_SKEL=1).*", r"\1", perf_offcpu_note)

    def med(key, f):
        v = [f(r) for r in rows[key]]
        return statistics.median(v), min(v), max(v)

    def fmt(t, unit, scale=1.0, digits=1):
        m, lo, hi = t
        return f"{m*scale:.{digits}f} {unit} ({lo*scale:.{digits}f}–{hi*scale:.{digits}f})"

    base_wall = med("base", lambda r: r["wall"])[0]
    lines = []
    lines.append("<!-- offcpu:begin -->")
    lines.append("## Off-CPU recording: ntprof record --off-cpu against perf")
    lines.append("")
    lines.append(
        f"Generated by `python3 benches/offcpu/run.py` ({ROUNDS} interleaved round(s), median (min–max)). The "
        f"workload is `benches/offcpu/pingpong.c {ROUNDS_N} {WORK_US}`: two processes pass a byte over two pipes "
        f"{ROUNDS_N} times, each burning {WORK_US} µs of CPU before answering, so each blocks once per round trip "
        f"({2*ROUNDS_N} voluntary switch-outs; the switch rate is in the table). *Recorder CPU* is the rusage of "
        "the profiler and what it waited for minus the workload's own CPU time (which the workload prints): for "
        "ntprof it includes building its report (stacks unwound, symbolized); for perf record it is the "
        "recording only, and `perf report --stdio` is its own column. *Slowdown* is the workload's wall time "
        "against the unprofiled run of the same round. The machine is shared by other jobs, so wall times vary.")
    lines.append("")
    lines.append("| profiler | mechanism | switches/s (unprofiled run) | workload wall s | slowdown | recorder CPU s | per switch | per second of run | report CPU s | whole job CPU s |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    b = med("base", lambda r: r["wall"])
    rate = 2 * ROUNDS_N / b[0]
    lines.append(f"| unprofiled | - | {rate:.0f} | {fmt(b, '', 1, 3)} | - | - | - | - | - | - |")
    for key, name in [("ntprof-root", "ntprof record --off-cpu -g (root)"),
                      ("ntprof-user", "ntprof record --off-cpu -g (unprivileged)"),
                      ("perf-sched", "perf record -e sched:sched_switch -g")]:
        wall = med(key, lambda r: r["wall"])
        rec = med(key, lambda r: r["rec"])
        per_sw = med(key, lambda r: r["rec"] / max(r["switches"], 1))
        per_s = med(key, lambda r: r["rec"] / r["wall"])
        slow = med(key, lambda r: r["wall"] / base_wall)
        mech = rows[key][0].get("mechanism", "sched_switch tracepoint, kernel frame-pointer callchains")
        report = med(key, lambda r: r.get("report", 0.0))
        whole = med(key, lambda r: r["rec"] + r.get("report", 0.0))
        rep_txt = fmt(report, "", 1, 3) if key == "perf-sched" else "(inside)"
        lines.append(f"| {name} | {mech} | - | {fmt(wall, '', 1, 3)} | {fmt(slow, '×', 1, 2)} | {fmt(rec, '', 1, 3)} | "
                     f"{fmt(per_sw, 'µs', 1e6, 1)} | {fmt(per_s, 'ms/s', 1e3, 0)} | {rep_txt} | {fmt(whole, '', 1, 3)} |")
    u = rows["ntprof-user"]
    lines.append("")
    lines.append(
        f"`perf record --off-cpu` could not run here: `{perf_offcpu_note}` (this perf is built without its BPF "
        "programs; it records cpu-cycles instead). Unprivileged, ntprof saw "
        f"{statistics.median([r['switches'] for r in u]):.0f} switch-outs; the waits whose stack was not read "
        f"in time (`[wait not read]`) were {statistics.median([r['unread'] / max(r['total'], 1) for r in u]) * 100:.1f} % "
        "of the off-CPU time (ping-pong waits are a few tens of microseconds: the unprivileged watcher reads only "
        "threads switched out for 100 µs or more, in rounds of about a millisecond, so as not to take the CPU "
        "from the threads it profiles).")
    lines.append("<!-- offcpu:end -->")
    section = "\n".join(lines) + "\n"
    print(section)
    if QUICK:
        return
    path = os.path.join(ROOT, "BENCHMARKS.md")
    text = open(path).read()
    if "<!-- offcpu:begin -->" in text:
        text = re.sub(r"<!-- offcpu:begin -->.*?<!-- offcpu:end -->\n", lambda _: section, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    open(path, "w").write(text)


main()
