# Sourced by the deployment tests (deploy/slurm/test.sh, deploy/container/test.sh).
# run_progress: `bucketrl status --json` on stdin -> "<newest version> <best recent held-out
# accuracy>", or "0 0" while the run has no status yet.
run_progress() {
  python3 -c '
import json, sys
s = json.load(sys.stdin)
print(s.get("version", 0), max([e["accuracy"] for e in s.get("evals", [])] or [0]))' 2>/dev/null || echo "0 0"
}
