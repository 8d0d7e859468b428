#!/usr/bin/env python3
"""Checks a Chrome trace-event JSON file written by eg_profiler_write_trace against what
Perfetto's JSON importer needs: a traceEvents array whose events all have name, ph, ts, pid and
tid; "X" events a dur; "C" counter events numeric args; "M" thread_name events args.name.
Also that the trace has op spans with input shapes, "step" ranges, a memory counter and a named
main thread.

    check_trace.py TRACE.json [MIN_STEPS]
"""
import json
import sys


def fail(message):
    print(f"check_trace.py: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) not in (2, 3):
        fail("usage: check_trace.py TRACE.json [MIN_STEPS]")
    min_steps = int(sys.argv[2]) if len(sys.argv) == 3 else 1
    with open(sys.argv[1], encoding="utf-8") as f:
        trace = json.load(f)
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list) or not events:
        fail("no traceEvents array")
    phases = {}
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            fail(f"event {i} is not an object")
        for key in ("name", "ph", "ts", "pid", "tid"):
            if key not in e:
                fail(f"event {i} ({e.get('name')}) has no {key!r}")
        if not isinstance(e["name"], str) or not isinstance(e["ph"], str):
            fail(f"event {i}: name and ph must be strings")
        for key in ("ts", "pid", "tid"):
            if not isinstance(e[key], (int, float)) or e[key] < 0:
                fail(f"event {i}: {key} must be a non-negative number")
        ph = e["ph"]
        phases.setdefault(ph, []).append(e)
        if ph == "X":
            if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
                fail(f"X event {i} ({e['name']}) has no non-negative dur")
        elif ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args:
                fail(f"C event {i} has no args")
            if not all(isinstance(v, (int, float)) for v in args.values()):
                fail(f"C event {i}: counter values must be numbers")
        elif ph == "M":
            if e["name"] == "thread_name" and not isinstance(e.get("args", {}).get("name"), str):
                fail(f"M event {i}: thread_name without args.name")
        else:
            fail(f"event {i}: unexpected phase {ph!r}")
    spans = phases.get("X", [])
    ops = [e for e in spans if e.get("cat") == "op"]
    if not ops:
        fail("no op spans")
    if not any(e["name"] == "matmul" for e in ops):
        fail("no matmul span")
    for e in ops:
        args = e.get("args", {})
        if not isinstance(args.get("inputs"), list) or "output" not in args:
            fail(f"op span {e['name']} lacks args.inputs / args.output")
    steps = [e for e in spans if e.get("cat") == "range" and e["name"] == "step"]
    if len(steps) < min_steps:
        fail(f"{len(steps)} step ranges, expected at least {min_steps}")
    if not phases.get("C"):
        fail("no counter events")
    names = [e["args"]["name"] for e in phases.get("M", []) if e["name"] == "thread_name"]
    if "main" not in names:
        fail(f"no thread named main (names: {names})")
    print(f"check_trace.py: ok: {len(events)} events, {len(ops)} op spans, {len(steps)} steps, "
          f"threads {names}")


if __name__ == "__main__":
    main()
