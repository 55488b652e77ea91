#!/usr/bin/env bash
# deploy/dra rendered as `kubectl apply -k deploy/dra` would apply it, and checked against
# tessera-dra itself:
#
# - the objects are there: ServiceAccount, ClusterRole, ClusterRoleBinding and DaemonSet in
#   kube-system, the DeviceClass gpu.tessera.io cluster-scoped (no namespace);
# - the DaemonSet runs /usr/bin/tessera-dra from the image make image builds, and its flags are
#   flags tessera-dra accepts (they are parsed by the binary here);
# - every host directory tessera-dra uses by default is mounted at the same path inside;
# - the ClusterRole grants what tessera-dra calls (src/dra/resource_slices.cc, main.cc) and no more;
# - tessera-node's enforcement-only role (enforcer.yaml): its own ServiceAccount and DaemonSet on
#   tessera-dra's nodes, hostPID, /usr/bin/tessera-node with --device-plugin=false and flags the
#   binary accepts (parsed by it here; the same flags with --region-host-dir at the claims' root
#   must be refused), --dra-region-dir and --region-container-dir where tessera-dra writes and
#   mounts (its flags or defaults), that root mounted read-write at the same path, the kubelet's
#   PodResources directory, deploy/node's requests and limits, and a ClusterRole of exactly
#   pods list/watch and events create (the calls themselves: tests/integration/security).
#
#   tests/integration/dra/dra_manifests_test.sh SOURCE_DIR TESSERA_DRA_BINARY TESSERA_NODE_BINARY
#
# Exit 77 (ctest: skipped) without kubectl 1.21+ or python3's yaml module.
set -uo pipefail

source_dir=$(cd "${1:?usage: $0 SOURCE_DIR TESSERA_DRA_BINARY}" && pwd)
usage="usage: $0 SOURCE_DIR TESSERA_DRA_BINARY TESSERA_NODE_BINARY"
binary=$(cd "$(dirname "${2:?$usage}")" && pwd)/$(basename "$2")
node_binary=$(cd "$(dirname "${3:?$usage}")" && pwd)/$(basename "$3")

# shellcheck source=../../support/kustomize_prereqs.sh
source "$source_dir/tests/support/kustomize_prereqs.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! kubectl kustomize "$source_dir/deploy/dra" > "$work/dra.yaml"; then
  echo "FAIL: kubectl kustomize deploy/dra"; exit 1
fi

"$python" - "$work/dra.yaml" "$binary" "$node_binary" "$source_dir" <<'PY'
import subprocess, sys, yaml

objects = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
binary, node_binary, source_dir = sys.argv[2], sys.argv[3], sys.argv[4]
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
         {("resource.k8s.io", "resourceclaims", "get"), ("", "nodes", "get"), ("", "pods", "get")}
check(granted == needed, f"RBAC grants exactly what tessera-dra calls (extra: {sorted(granted - needed)}, "
      f"missing: {sorted(needed - granted)})")

# --- tessera-node's enforcement-only role beside tessera-dra ---
def flag(args, name, default):
    value = default
    for a in args:
        if a.startswith(name + "="): value = a.split("=", 1)[1]
    return value

for kind in ("ServiceAccount", "DaemonSet"):
    o = by.get((kind, "tessera-dra-enforcer"))
    check(o is not None and o["metadata"].get("namespace") == "kube-system", f"{kind} tessera-dra-enforcer in kube-system")
binding = by.get(("ClusterRoleBinding", "tessera-dra-enforcer"))
check(binding is not None and binding["roleRef"]["name"] == "tessera-dra-enforcer" and
      binding["subjects"] == [{"kind": "ServiceAccount", "name": "tessera-dra-enforcer", "namespace": "kube-system"}],
      "ClusterRoleBinding tessera-dra-enforcer binds its ClusterRole to its ServiceAccount only")
enforcer = by[("DaemonSet", "tessera-dra-enforcer")]["spec"]["template"]["spec"]
check(enforcer.get("serviceAccountName") == "tessera-dra-enforcer", "the enforcer runs as tessera-dra-enforcer")
check(enforcer.get("nodeSelector") == pod.get("nodeSelector"),
      f"the enforcer runs on tessera-dra's nodes ({enforcer.get('nodeSelector')})")
check(enforcer.get("hostPID") is True and not pod.get("hostPID"),
      "hostPID for the enforcer (other containers' /proc), not for tessera-dra")
node = [c for c in enforcer["containers"] if c["name"] == "tessera-node"][0]
check(node["image"] == "tessera:latest" and node["command"][0] == "/usr/bin/tessera-node",
      f"the enforcer runs /usr/bin/tessera-node from tessera:latest ({node['image']})")
check(node.get("securityContext", {}).get("privileged") is True, "the enforcer is privileged (NVML, /proc, kills)")
node_args = node["command"][1:] + node.get("args", [])
check("--device-plugin=false" in node_args, "--device-plugin=false: nothing advertised, no inventory")
check({"NODE_NAME"} <= {e["name"] for e in node.get("env", [])}, "the enforcer's NODE_NAME comes from the Downward API")
dra_args = args
claims_root = flag(dra_args, "--region-host-dir", "/var/lib/tessera/dra-regions")
check(flag(node_args, "--dra-region-dir", None) == claims_root,
      f"--dra-region-dir is tessera-dra's --region-host-dir ({claims_root})")
check(flag(node_args, "--region-container-dir", "/tmp/tessera") == flag(dra_args, "--region-container-dir", "/tmp/tessera"),
      "both agents agree where a claim's region is mounted in its containers")
# Every flag parses: with --region-host-dir at the claims' root the binary must refuse the
# configuration for that reason alone (the role's bad input, and proof the rest were accepted).
run = subprocess.run([node_binary, *node_args, "--node-name=n", f"--region-host-dir={claims_root}"],
                     capture_output=True, text=True)
check(run.returncode == 2 and "dra_region_dir must not be region_host_dir" in run.stderr,
      f"tessera-node accepts the enforcer's flags {node_args} and refuses --region-host-dir at "
      f"--dra-region-dir ({run.stderr.strip()})")
node_volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in enforcer["volumes"]}
node_mounts = {m["mountPath"]: (node_volumes.get(m["name"]), m.get("readOnly", False)) for m in node["volumeMounts"]}
check(node_mounts.get(claims_root) == (claims_root, False),
      f"the claims' root {claims_root} is mounted read-write at the same path (host pids go in the regions)")
check(node_mounts.get("/var/lib/kubelet/pod-resources", (None,))[0] == "/var/lib/kubelet/pod-resources",
      "the kubelet's PodResources directory is mounted (claims tied to pods)")
check("/var/lib/kubelet/device-plugins" not in node_mounts, "no device-plugin directory: the role registers nothing")
deploy_node = [d for d in yaml.safe_load_all(open(source_dir + "/deploy/node/daemonset.yaml")) if d]
node_agent = [c for c in deploy_node[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "tessera-node"][0]
check(node.get("resources") == node_agent.get("resources"),
      f"the enforcer's requests and limits are deploy/node's ({node.get('resources')})")
enforcer_rules = by[("ClusterRole", "tessera-dra-enforcer")]["rules"]
granted = {(g, r, v) for rule in enforcer_rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
needed = {("", "pods", "list"), ("", "pods", "watch"), ("", "events", "create")}
check(granted == needed, f"RBAC grants the enforcer pods list/watch and events create (extra: "
      f"{sorted(granted - needed)}, missing: {sorted(needed - granted)})")
sys.exit(1 if failures else 0)
PY
