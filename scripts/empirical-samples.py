#!/usr/bin/env python3
"""Writes the sample measurements under scenarios/empirical/ that the README and the CLI tests
calibrate from: a Prometheus scrape, a kubectl pod list and a kubectl event list. Deterministic
(a fixed seed); run from the repository root: python3 scripts/empirical-samples.py"""
import json
import random
from datetime import datetime, timedelta, timezone

rng = random.Random(20)
out = "scenarios/empirical"

# A report-delay histogram from two nodes: most reports 5 to 30 s (the uniform:5:30),
# a few slower ones past the last finite bucket.
bounds = [0.5, 1, 2.5, 5, 7.5, 10, 15, 20, 25, 30, 45, 60]
lines = [
    "# HELP setpoint_report_delay_seconds Time from a copy's change on its node to the ledger showing it.",
    "# TYPE setpoint_report_delay_seconds histogram",
]
for node in ["node-a", "node-b"]:
    xs = [rng.uniform(5, 30) for _ in range(600)] + [rng.uniform(30, 80) for _ in range(12)]
    for le in bounds:
        lines.append(f'setpoint_report_delay_seconds_bucket{{node="{node}",le="{le}"}} {sum(x <= le for x in xs)}')
    lines.append(f'setpoint_report_delay_seconds_bucket{{node="{node}",le="+Inf"}} {len(xs)}')
    lines.append(f'setpoint_report_delay_seconds_sum{{node="{node}"}} {sum(xs):.3f}')
    lines.append(f'setpoint_report_delay_seconds_count{{node="{node}"}} {len(xs)}')
lines += [
    "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
    "# TYPE process_start_time_seconds gauge",
    "process_start_time_seconds 1.71456e+09",
]
open(f"{out}/report-delay.prom", "w").write("\n".join(lines) + "\n")

t0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
iso = lambda t: t.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
micro = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
pods, events = [], []
for i in range(60):
    created = t0 + timedelta(seconds=i * 13 + rng.uniform(0, 1))
    scheduled = created + timedelta(seconds=rng.uniform(0, 1.5))
    initialized = scheduled + timedelta(seconds=rng.uniform(0.5, 3))
    containers = initialized + timedelta(seconds=rng.uniform(2, 10))
    name = f"web-7c9f8d6b5-{i:03d}"
    restarts = 1 if i == 17 else 0
    pending = i == 42
    conds = [("PodScheduled", scheduled)]
    if not pending:
        conds = [("Initialized", initialized), ("Ready", containers), ("ContainersReady", containers), ("PodScheduled", scheduled)]
    pods.append({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"00000000-0000-0000-0000-{i:012d}",
                     "creationTimestamp": iso(created), "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "example/web:1.4"}], "nodeName": f"node-{'ab'[i % 2]}"},
        "status": {
            "phase": "Pending" if pending else "Running",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": iso(at)} for t, at in conds],
            "containerStatuses": [] if pending else [{"name": "web", "ready": True, "restartCount": restarts, "started": True}],
        },
    })
    obj = {"kind": "Pod", "namespace": "default", "name": name, "uid": f"00000000-0000-0000-0000-{i:012d}"}
    events.append({"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{name}.1", "namespace": "default", "creationTimestamp": iso(scheduled)},
                   "involvedObject": obj, "reason": "Scheduled", "type": "Normal", "eventTime": micro(scheduled),
                   "firstTimestamp": None, "lastTimestamp": None, "message": f"Successfully assigned default/{name}"})
    if not pending:
        started = containers - timedelta(seconds=rng.uniform(0, 1))
        for reason, at in [("Pulled", initialized), ("Created", started), ("Started", started)]:
            events.append({"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{name}.{reason}", "namespace": "default", "creationTimestamp": iso(at)},
                           "involvedObject": obj, "reason": reason, "type": "Normal", "eventTime": None,
                           "firstTimestamp": iso(at), "lastTimestamp": iso(at), "count": 1, "message": reason})
for name, items in [("pods.json", pods), ("events.json", events)]:
    doc = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
    open(f"{out}/{name}", "w").write(json.dumps(doc, indent=4) + "\n")
