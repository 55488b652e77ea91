# Sourced by the tests that render deploy/ with `kubectl kustomize` and read the YAML with Python
# (tests/image/manifests_test.sh, tests/integration/dra/dra_manifests_test.sh). Exits 77 (ctest:
# skipped) with the reason when this machine lacks either; otherwise sets `python` to an
# interpreter with a yaml module.
#
# kubectl must be 1.21 or newer: older kustomize cannot read directories as resources.
if ! command -v kubectl >/dev/null 2>&1; then
  echo "SKIPPED: no kubectl on this machine (the manifests are rendered with kubectl kustomize)"
  exit 77
fi
minor=$(kubectl version --client -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["minor"].rstrip("+"))' 2>/dev/null)
if [ -z "$minor" ] || [ "$minor" -lt 21 ]; then
  echo "SKIPPED: kubectl 1.${minor:-?} is older than 1.21: its kustomize cannot render deploy/"
  exit 77
fi
# Debian's python3 first: python3-yaml (scripts/install-deps.sh) is its yaml module.
python=
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c 'import yaml' 2>/dev/null; then python=$candidate; break; fi
done
if [ -z "$python" ]; then
  echo "SKIPPED: no python3 with a yaml module (Debian: python3-yaml, scripts/install-deps.sh installs it)"
  exit 77
fi
