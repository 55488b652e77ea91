#!/usr/bin/env bash
# deploy/ rendered as `kubectl apply -k deploy/` would apply it (`kubectl kustomize`), and checked:
#
# - every object the install needs is there, the namespaced ones in kube-system, and no Namespace
#   object (deleting the install must not delete kube-system);
# - every tessera container runs the image `make image` builds (`tessera`, the tag `latest`,
#   pulled only if not present), and an overlay's `images:` entry moves all of them — the init
#   container included — to a registry and tag of its own;
# - tessera-node's init container installs libvgpu.so from the image into the host directory that
#   the agent mounts at the same path (the directory of its default libvgpu_host_path), and its
#   script, run here against two directories, installs the file atomically: a new file renamed over
#   the old, so a process that holds the old one keeps it whole; a second run changes nothing;
# - the webhook fails closed (failurePolicy Fail) and leaves out kube-system, where tessera runs,
#   and nothing else (docs/security.md).
#
#   tests/image/manifests_test.sh SOURCE_DIR
#
# Exit 77 (ctest: skipped) without a kubectl whose kustomize reads directories as resources (1.21+).
set -uo pipefail

source_dir=$(cd "${1:?usage: $0 SOURCE_DIR}" && pwd)
deploy=$source_dir/deploy

# shellcheck source=../support/kustomize_prereqs.sh
source "$source_dir/tests/support/kustomize_prereqs.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! kubectl kustomize "$deploy" > "$work/default.yaml"; then
  echo "FAIL: kubectl kustomize $deploy"; exit 1
fi
# An overlay as docs/install.md describes it: this directory as a resource, images: moves the image.
# (kustomize takes a relative path only.)
mkdir "$work/overlay"
relative=$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$deploy" "$work/overlay")
cat > "$work/overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $relative
images:
  - {name: tessera, newName: registry.example.com/gpu/tessera, newTag: "1.2.3"}
EOF
if ! kubectl kustomize "$work/overlay" > "$work/overlay.yaml"; then
  echo "FAIL: kubectl kustomize of an overlay over $deploy"; exit 1
fi
# The MPS component (deploy/node/mps) in an overlay over the one above, as docs/sharing.md describes it.
mkdir "$work/mps"
component=$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$deploy/node/mps" "$work/mps")
printf '%s\n' "apiVersion: kustomize.config.k8s.io/v1beta1" "kind: Kustomization" \
  "resources: [../overlay]" "components: [$component]" > "$work/mps/kustomization.yaml"
if ! kubectl kustomize "$work/mps" > "$work/mps.yaml"; then
  echo "FAIL: kubectl kustomize of an overlay with the MPS component deploy/node/mps"; exit 1
fi

"$python" - "$work" <<'PY'
import os, re, stat, subprocess, sys, yaml

work = sys.argv[1]
failures = []
def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok: failures.append(what)

def load(name):
    with open(os.path.join(work, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]

def tessera_containers(objects):
    for o in objects:
        spec = o.get("spec", {}).get("template", {}).get("spec")
        if not spec: continue
        for kind in ("initContainers", "containers"):
            for c in spec.get(kind, []):
                if "kube-scheduler" not in c["image"]:
                    yield o, c

objects = load("default.yaml")
by_kind_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
expected = [("ServiceAccount", "tessera-scheduler"), ("ServiceAccount", "tessera-node"),
            ("ClusterRole", "tessera-scheduler"), ("ClusterRole", "tessera-node"),
            ("ClusterRoleBinding", "tessera-scheduler"), ("ClusterRoleBinding", "tessera-node"),
            ("ConfigMap", "tessera-scheduler"), ("ConfigMap", "tessera-node"),
            ("Deployment", "tessera-scheduler"), ("Service", "tessera-scheduler"),
            ("DaemonSet", "tessera-node"), ("MutatingWebhookConfiguration", "tessera-scheduler")]
missing = [f"{k}/{n}" for k, n in expected if (k, n) not in by_kind_name]
check(not missing, f"kubectl kustomize deploy/: {len(objects)} objects, the scheduler's and the node agent's"
      + (f" (missing: {missing})" if missing else ""))
cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "Namespace"}
elsewhere = [f"{o['kind']}/{o['metadata']['name']}" for o in objects
             if o["kind"] not in cluster_scoped and o["metadata"].get("namespace") != "kube-system"]
check(not elsewhere, "every namespaced object is in kube-system" + (f" (not: {elsewhere})" if elsewhere else ""))
check(not any(o["kind"] == "Namespace" for o in objects), "no Namespace object (delete -k must not delete kube-system)")

containers = list(tessera_containers(objects))
names = sorted(f"{o['metadata']['name']}/{c['name']}" for o, c in containers)
check(names == ["tessera-node/install-libvgpu", "tessera-node/tessera-node", "tessera-scheduler/tessera-scheduler",
                 "tessera-scheduler/webhook-certs"],
      f"tessera containers: {names}")
for o, c in containers:
    check(c["image"] == "tessera:latest" and c.get("imagePullPolicy") == "IfNotPresent",
          f"{o['metadata']['name']}/{c['name']} runs image {c['image']} ({c.get('imagePullPolicy')}),"
          " the image make image builds")
binaries = {("tessera-node", "tessera-node"): "/usr/bin/tessera-node",
            ("tessera-scheduler", "tessera-scheduler"): "/usr/bin/tessera-scheduler",
            ("tessera-scheduler", "webhook-certs"): "/usr/bin/tessera"}
for o, c in containers:
    want = binaries.get((o["metadata"]["name"], c["name"]))
    if want:
        check(c.get("command", [None])[0] == want, f"{c['name']} starts {c.get('command', [None])[0]}, in the image at {want}")

moved = list(tessera_containers(load("overlay.yaml")))
images = sorted({c["image"] for _, c in moved})
check(len(moved) == 4 and images == ["registry.example.com/gpu/tessera:1.2.3"],
      f"an overlay's images: entry moves all {len(moved)} tessera containers to {images}")
kube_scheduler = [c["image"] for o in load("overlay.yaml") if o["kind"] == "Deployment"
                  for c in o["spec"]["template"]["spec"]["containers"] if "kube-scheduler" in c["image"]]
check(kube_scheduler == ["registry.k8s.io/kube-scheduler:v1.30.0"], f"and leaves kube-scheduler's image alone: {kube_scheduler}")

# The webhook's certificate: the init container writes it where tessera-scheduler reads it, and
# the manifests leave caBundle to it (a caBundle in them would blank its value at every apply).
pod = by_kind_name[("Deployment", "tessera-scheduler")]["spec"]["template"]["spec"]
certs = [c for c in pod.get("initContainers", []) if c["name"] == "webhook-certs"]
sched = [c for c in pod["containers"] if c["name"] == "tessera-scheduler"][0]
sched_yaml = yaml.safe_load(by_kind_name[("ConfigMap", "tessera-scheduler")]["data"]["tessera-scheduler.yaml"])
cert_dir = os.path.dirname(sched_yaml["server"]["tlsCertFile"])
certs = certs[0] if certs else {"command": [], "volumeMounts": []}
check("webhook-certs" in certs["command"] and f"--write-dir={cert_dir}" in certs["command"],
      f"the init container runs tessera webhook-certs into {cert_dir}, where tlsCertFile is")
pod_volumes = {v["name"]: v for v in pod["volumes"]}
shared = [m["name"] for m in certs["volumeMounts"] if m["mountPath"] == cert_dir
          and any(s["name"] == m["name"] and s["mountPath"] == cert_dir for s in sched["volumeMounts"])]
check(len(shared) == 1 and "emptyDir" in pod_volumes.get(shared[0], {}),
      "and tessera-scheduler mounts the same emptyDir there (no Secret volume the pod would wait for)")
hooks = by_kind_name[("MutatingWebhookConfiguration", "tessera-scheduler")]["webhooks"]
check(all("caBundle" not in h["clientConfig"] for h in hooks), "the webhook configuration lists no caBundle")
# A dead webhook (docs/security.md, "The webhook when it is down"): pod creation it covers fails
# closed, so no GPU pod is created without the webhook's mutation (tessera's scheduler and limits);
# the namespaces tessera itself runs in (kube-system) are never sent to it, so neither they nor
# tessera's own restart wait for it; and nothing a user can set (a namespace or pod label) opens
# another way around it.
own = sorted({o["metadata"]["namespace"] for o in objects if o["kind"] in ("Deployment", "DaemonSet")})
for h in hooks:
    check(h.get("failurePolicy") == "Fail",
          f"{h['name']}: failurePolicy Fail, written out (a dead webhook lets no pod past it): {h.get('failurePolicy')}")
    covers = [r for r in h.get("rules", []) if "pods" in r.get("resources", []) and "CREATE" in r.get("operations", [])]
    check(len(covers) == 1, f"{h['name']}: it covers pod CREATE")
    selector = h.get("namespaceSelector", {})
    names = [e for e in selector.get("matchExpressions", [])
             if e.get("key") == "kubernetes.io/metadata.name" and e.get("operator") == "NotIn"]
    excluded = {v for e in names for v in e.get("values", [])}
    check({"kube-system", *own} <= excluded,
          f"{h['name']}: kube-system and tessera's own namespaces {own} are left out of it (excluded: {sorted(excluded)})")
    loopholes = [e for e in selector.get("matchExpressions", []) if e not in names] + list(selector.get("matchLabels", {}))
    check(excluded <= {"kube-system", *own} and not loopholes and not h.get("objectSelector"),
          f"{h['name']}: and nothing else: no other namespace, no label selector a user could satisfy "
          f"(excluded {sorted(excluded)}, other terms {loopholes}, objectSelector {h.get('objectSelector')})")
    check(0 < h.get("timeoutSeconds", 10) <= 10,
          f"{h['name']}: a hung webhook holds a pod creation for at most {h.get('timeoutSeconds', 10)} s")
role = by_kind_name.get(("Role", "tessera-webhook-certs"), {"rules": []})
check(any("secrets" in r["resources"] and "create" in r["verbs"] for r in role["rules"])
      and ("ClusterRole", "tessera-webhook-certs") in by_kind_name,
      "RBAC lets the scheduler's service account keep the Secret and the caBundle")

# The init container and the agent share the host's libvgpu directory.
ds = by_kind_name[("DaemonSet", "tessera-node")]["spec"]["template"]["spec"]
node_yaml = yaml.safe_load(by_kind_name[("ConfigMap", "tessera-node")]["data"]["node.yaml"]) or {}
libvgpu_host_path = node_yaml.get("libvgpu_host_path", "/usr/local/tessera/libvgpu.so")  # src/node/config.h
libvgpu_dir = os.path.dirname(libvgpu_host_path)
volumes = {v["name"]: v for v in ds["volumes"]}
init = [c for c in ds.get("initContainers", []) if c["name"] == "install-libvgpu"]
agent = [c for c in ds["containers"] if c["name"] == "tessera-node"][0]
check(len(init) == 1, "tessera-node has the init container install-libvgpu")
init = init[0] if init else {"volumeMounts": [], "command": []}
def host_dir(mount):
    v = volumes.get(mount["name"], {})
    return v.get("hostPath", {}).get("path")
init_mounts = [m for m in init["volumeMounts"] if host_dir(m) == libvgpu_dir]
agent_mounts = [m for m in agent["volumeMounts"] if host_dir(m) == libvgpu_dir]
check(len(init_mounts) == 1 and not init_mounts[0].get("readOnly"),
      f"install-libvgpu mounts the host's {libvgpu_dir} writable"
      + (f" at {init_mounts[0]['mountPath']}" if init_mounts else ""))
check(len(agent_mounts) == 1 and agent_mounts[0]["mountPath"] == libvgpu_dir,
      f"tessera-node mounts the same host directory at the same path, {libvgpu_dir}")
check(ds.get("initContainers", [{}])[0].get("image") == agent["image"], "install-libvgpu runs the agent's image")

# Run the init container's script here: the image's libvgpu.so and the host directory are two
# directories of this test, substituted for the paths the script names.
script = init["command"][-1] if init["command"] else ""
mount_path = init_mounts[0]["mountPath"] if init_mounts else "/nonexistent"
image_libvgpu = "/usr/local/tessera/libvgpu.so"  # where image/build.sh puts it
check(image_libvgpu in script and mount_path + "/libvgpu.so" in script,
      f"the script copies {image_libvgpu} to {mount_path}/libvgpu.so")
image_dir, host = os.path.join(work, "image"), os.path.join(work, "host")
os.makedirs(image_dir); os.makedirs(host)
local = script.replace(mount_path, host).replace(image_libvgpu, os.path.join(image_dir, "libvgpu.so"))
def run():
    r = subprocess.run(["/bin/sh", "-c", local], capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()
def write(path, text):
    with open(path, "w") as f: f.write(text)
def read(path):
    with open(path) as f: return f.read()
dst = os.path.join(host, "libvgpu.so")

write(os.path.join(image_dir, "libvgpu.so"), "libvgpu v1")
rc, out = run()
check(rc == 0 and read(dst) == "libvgpu v1" and stat.S_IMODE(os.stat(dst).st_mode) == 0o755,
      f"first run installs libvgpu.so, mode 0755 ({out!r})")
check(sorted(os.listdir(host)) == ["libvgpu.so"], f"and leaves no temporary file: {sorted(os.listdir(host))}")
held = os.path.join(work, "held")  # a second name for the installed file: what a running container keeps
os.link(dst, held)
inode = os.stat(dst).st_ino
rc, out = run()
check(rc == 0 and os.stat(dst).st_ino == inode, f"a second run with the same file changes nothing ({out!r})")
write(os.path.join(image_dir, "libvgpu.so"), "libvgpu v2, longer")
rc, out = run()
check(rc == 0 and read(dst) == "libvgpu v2, longer", f"an upgrade installs the new file ({out!r})")
check(os.stat(dst).st_ino != inode and read(held) == "libvgpu v1",
      "by rename: the old file is untouched for those who hold it (not overwritten in place)")
check(sorted(os.listdir(host)) == ["libvgpu.so"], f"and leaves no temporary file: {sorted(os.listdir(host))}")

# The MPS component: hostIPC and mps_root at the same path, for tessera-node only.
def node_pod(objects):
    ds = [o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "tessera-node"]
    return ds[0]["spec"]["template"]["spec"]
default_node, mps_node = node_pod(load("default.yaml")), node_pod(load("mps.yaml"))
check(not default_node.get("hostIPC"), "the default install leaves tessera-node out of the host's IPC namespace")
check(mps_node.get("hostIPC") is True, "with deploy/node/mps, tessera-node shares the host's IPC namespace")
mps_volume = [v for v in mps_node["volumes"] if v.get("hostPath", {}).get("path") == "/run/tessera/mps"]
agent_container = [c for c in mps_node["containers"] if c["name"] == "tessera-node"][0]
mps_mounts = [m for m in agent_container["volumeMounts"] if m["mountPath"] == "/run/tessera/mps"]
check(len(mps_volume) == 1 and len(mps_mounts) == 1 and mps_mounts[0]["name"] == mps_volume[0]["name"],
      "and mounts the host's /run/tessera/mps (mps_root) at the same path")
others = [o for o in load("mps.yaml") if o["kind"] != "DaemonSet"]
check(others == [o for o in load("overlay.yaml") if o["kind"] != "DaemonSet"], "and changes nothing else")

sys.exit(1 if failures else 0)
PY
