#!/usr/bin/env bash
# deploy/monitoring checked with Debian's promtool (scripts/install-deps.sh installs it with the
# prometheus package):
#  1. the rule files (the `spec` of each PrometheusRule) pass `promtool check rules`;
#  2. `promtool test rules` runs rules_test.yaml: each alert fires on series that should make it
#     fire and stays quiet on the others; the HAMi-name recording rules give HAMi's labels;
#  3. every PromQL expression of the Grafana dashboard, its variables substituted, parses
#     (`promtool check rules` over a file with one recording rule per panel target);
#  4. the dashboard's targets name only metrics tessera exports or the HAMi rules record;
#  5. deploy/monitoring renders with `kubectl kustomize` (when kubectl is installed), the
#     ConfigMap carrying the dashboard file unchanged.
# Exit 77 (ctest: skipped) without promtool or python3-yaml.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
monitoring="$root/deploy/monitoring"
if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIPPED: no promtool (Debian package prometheus; scripts/install-deps.sh)"; exit 77
fi
if ! python3 -c 'import yaml' 2>/dev/null; then
  echo "SKIPPED: no python3-yaml"; exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. The rule files inside the PrometheusRule objects.
python3 - "$monitoring" "$work" <<'PY'
import sys, yaml
src, out = sys.argv[1], sys.argv[2]
for name in ("prometheus-rules", "hami-compat-rules"):
    doc = yaml.safe_load(open(f"{src}/{name}.yaml"))
    assert doc["kind"] == "PrometheusRule", f"{name}.yaml: kind is {doc['kind']}"
    yaml.safe_dump(doc["spec"], open(f"{out}/{name}.yml", "w"), sort_keys=False)
PY
promtool check rules "$work/prometheus-rules.yml" "$work/hami-compat-rules.yml" || fail "promtool check rules"

# 2. The unit tests, beside the extracted files they name.
cp "$here/rules_test.yaml" "$work/"
promtool test rules "$work/rules_test.yaml" || fail "promtool test rules"

# 3 and 4. The dashboard's expressions.
python3 - "$monitoring/grafana-dashboard.json" "$root" "$work" <<'PY' || fail "dashboard expressions"
import json, re, sys, yaml, glob
dashboard, root, work = sys.argv[1], sys.argv[2], sys.argv[3]
d = json.load(open(dashboard))
exprs = []
def walk(panels):
    for p in panels:
        for t in p.get("targets", []):
            exprs.append((p["title"], t["expr"]))
        walk(p.get("panels", []))
walk(d["panels"])
assert len(exprs) >= 20, f"only {len(exprs)} targets"
# The variables Grafana substitutes.
def substitute(e):
    return e.replace("$__rate_interval", "5m").replace('"$node"', '".*"')
rules = [{"record": f"dashboard:panel_{i}", "expr": substitute(e)} for i, (_, e) in enumerate(exprs)]
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(f"{work}/dashboard.yml", "w"))
leftover = [e for _, e in exprs if "$" in substitute(e)]
assert not leftover, f"unsubstituted variables in {leftover}"
# Names the exporters define (PrometheusText Describe / the scheduler's table) or the HAMi rules record.
exported = set()
for path in glob.glob(f"{root}/src/node/metrics.cc") + glob.glob(f"{root}/src/scheduler/scheduler.cc"):
    exported |= set(re.findall(r'"(tessera_[a-z_]+)"', open(path).read()))
for name in set(re.findall(r"\b(tessera_[a-z_]+)\b", " ".join(e for _, e in exprs))):
    assert name in exported, f"the dashboard reads {name}, which tessera does not export"
for title, e in exprs:
    print(f"  {title}: {substitute(e)}")
PY
promtool check rules "$work/dashboard.yml" || fail "a dashboard expression does not parse"

# Every alert's metrics are exported too.
python3 - "$work/prometheus-rules.yml" "$root" <<'PY' || fail "alert metric names"
import re, sys, yaml
rules, root = sys.argv[1], sys.argv[2]
exported = set()
for path in (f"{root}/src/node/metrics.cc", f"{root}/src/scheduler/scheduler.cc"):
    exported |= set(re.findall(r'"(tessera_[a-z_]+)"', open(path).read()))
for g in yaml.safe_load(open(rules))["groups"]:
    for r in g["rules"]:
        for name in re.findall(r"\b(tessera_[a-z_]+)\b", r["expr"]):
            assert name in exported, f"{r['alert']} reads {name}, which tessera does not export"
PY

# 5. The kustomization.
if command -v kubectl >/dev/null 2>&1; then
  kubectl kustomize "$monitoring" > "$work/rendered.yaml" || fail "kubectl kustomize deploy/monitoring"
  python3 - "$work/rendered.yaml" "$monitoring/grafana-dashboard.json" <<'PY' || fail "rendered deploy/monitoring"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted(d["kind"] for d in docs)
assert kinds == ["ConfigMap", "PodMonitor", "PodMonitor", "PrometheusRule"], kinds
cm = next(d for d in docs if d["kind"] == "ConfigMap")
assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
assert json.loads(cm["data"]["grafana-dashboard.json"]) == json.load(open(sys.argv[2]))
PY
else
  echo "kubectl not installed: the kustomization is not rendered"
fi
echo "PASS: deploy/monitoring's rules, unit tests and dashboard expressions"
