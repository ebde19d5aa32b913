"""Checks that a metrics JSONL file continues a reference run bit for bit.
  usage: same_losses.py REFERENCE.jsonl RUN.jsonl [FIRST_STEP]
Every step of RUN (from FIRST_STEP on, when given) must have the reference's
loss exactly: JSON numbers are written shortest-round-trip, so equal text is
equal bits. RUN's steps must be consecutive and end where the reference ends."""
import json
import sys

ref = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
run = [json.loads(l) for l in open(sys.argv[2])]
first = int(sys.argv[3]) if len(sys.argv) > 3 else run[0]["step"]
run = [r for r in run if r["step"] >= first]
steps = [r["step"] for r in run]
assert steps == list(range(first, max(ref) + 1)), f"steps {steps[:3]}...{steps[-3:]} != {first}..{max(ref)}"
bad = [(r["step"], r["loss"], ref[r["step"]]) for r in run if r["loss"] != ref[r["step"]]]
assert not bad, f"losses differ (step, run, reference): {bad[:5]}"
print(f"ok: steps {first}..{max(ref)} equal the reference bit for bit")
