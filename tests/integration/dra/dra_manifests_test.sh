#!/usr/bin/env bash
# deploy/dra rendered as `kubectl apply -k deploy/dra` would apply it, and checked against
# tessera-dra itself:
#
# - the objects are there: ServiceAccount, ClusterRole, ClusterRoleBinding and DaemonSet in
#   kube-system, the DeviceClass gpu.tessera.io cluster-scoped (no namespace);
# - the DaemonSet runs /usr/bin/tessera-dra from the image make image builds, and its flags are
#   flags tessera-dra accepts (they are parsed by the binary here);
# - every host directory tessera-dra uses by default is mounted at the same path inside;
# - the ClusterRole grants what tessera-dra calls (src/dra/resource_slices.cc, main.cc) and no more.
#
#   tests/integration/dra/dra_manifests_test.sh SOURCE_DIR TESSERA_DRA_BINARY
#
# Exit 77 (ctest: skipped) without kubectl 1.21+ or python3's yaml module.
set -uo pipefail

source_dir=$(cd "${1:?usage: $0 SOURCE_DIR TESSERA_DRA_BINARY}" && pwd)
binary=$(cd "$(dirname "${2:?usage: $0 SOURCE_DIR TESSERA_DRA_BINARY}")" && pwd)/$(basename "$2")

# shellcheck source=../../support/kustomize_prereqs.sh
source "$source_dir/tests/support/kustomize_prereqs.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! kubectl kustomize "$source_dir/deploy/dra" > "$work/dra.yaml"; then
  echo "FAIL: kubectl kustomize deploy/dra"; exit 1
fi

"$python" - "$work/dra.yaml" "$binary" <<'PY'
import subprocess, sys, yaml

objects = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
binary = sys.argv[2]
failures = []
def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok: failures.append(what)

by = {(o["kind"], o["metadata"]["name"]): o for o in objects}
for kind in ("ServiceAccount", "DaemonSet"):
    o = by.get((kind, "tessera-dra"))
    check(o is not None and o["metadata"].get("namespace") == "kube-system", f"{kind} tessera-dra in kube-system")
for kind in ("ClusterRole", "ClusterRoleBinding"):
    check((kind, "tessera-dra") in by, f"{kind} tessera-dra")
dc = by.get(("DeviceClass", "gpu.tessera.io"))
check(dc is not None and "namespace" not in dc["metadata"], "DeviceClass gpu.tessera.io, cluster-scoped (no namespace)")
check(dc is not None and "device.driver == 'gpu.tessera.io'" in dc["spec"]["selectors"][0]["cel"]["expression"],
      "its selector names the driver")
mig = by.get(("DeviceClass", "mig.tessera.io"))
check(mig is not None and "namespace" not in mig["metadata"] and "== 'mig'" in mig["spec"]["selectors"][0]["cel"]["expression"],
      "DeviceClass mig.tessera.io, cluster-scoped, selecting type mig")

pod = by[("DaemonSet", "tessera-dra")]["spec"]["template"]["spec"]
container = [c for c in pod["containers"] if c["name"] == "tessera-dra"][0]
check(container["image"] == "tessera:latest" and container["command"][0] == "/usr/bin/tessera-dra",
      f"the DaemonSet runs /usr/bin/tessera-dra from tessera:latest ({container['image']})")
# Every flag parses: an error only the validation after parsing gives proves the rest were accepted.
args = container["command"][1:] + container.get("args", [])
run = subprocess.run([binary, *args, "--node-name=n", "--cdi-dir=relative"], capture_output=True, text=True)
check(run.returncode == 2 and "--cdi-dir must be an absolute path" in run.stderr,
      f"tessera-dra accepts the DaemonSet's flags {args} ({run.stderr.strip()})")
env = {e["name"] for e in container.get("env", [])}
check("NODE_NAME" in env, "NODE_NAME comes from the Downward API")

volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
mounts = {m["mountPath"]: volumes.get(m["name"]) for m in container["volumeMounts"]}
for path in ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi",
             "/usr/local/tessera", "/var/lib/tessera/dra-regions"):
    check(mounts.get(path) == path, f"host {path} is mounted at the same path (a default of tessera-dra)")

rules = by[("ClusterRole", "tessera-dra")]["rules"]
granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
needed = {("resource.k8s.io", "resourceslices", v) for v in ("list", "create", "update", "delete")} | \
         {("resource.k8s.io", "resourceclaims", "get"), ("", "nodes", "get")}
check(granted == needed, f"RBAC grants exactly what tessera-dra calls (extra: {sorted(granted - needed)}, "
      f"missing: {sorted(needed - granted)})")
sys.exit(1 if failures else 0)
PY
