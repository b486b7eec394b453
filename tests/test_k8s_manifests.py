"""The Kubernetes manifests in deploy/kubernetes/, validated offline.

* Core kinds (Namespace, ServiceAccount, ConfigMap, DaemonSet, Deployment,
  Service, Role, RoleBinding) against the Kubernetes OpenAPI schemas with
  ``kubernetes-validate`` (PyPI; the schemas of every release ship inside the
  wheel, so nothing is fetched at test time), in strict mode: an unknown field
  is an error, as ``kubectl apply --validate=strict`` would make it.
* The ServiceMonitor (a CRD) against prometheus-operator v0.93.0's CRD schema,
  vendored in tests/schemas/ (source in tests/schemas/README.md), made strict
  the same way (the API server would silently prune an unknown field).
* The NodeFeatureRule against Node Feature Discovery's CRD schema, and the
  DaemonSet's node selector against the labels NFD gives a node with a CXL
  memory device, by NFD's own rules: both restated in tests/nfd_rules.py from
  NFD's source at a named commit.
* The ConfigMap's cxlctl.toml with the daemon's own configuration loader.
* The vLLM Deployment: its entrypoint arguments are accepted by ``cxlctl launch
  vllm`` (a dry run on a recorded tree with GPUs, a fake vLLM), it asks for no
  privilege and no host path, and it schedules on labels the daemon writes.
* The Containerfile: targets, build-context paths, and the commands the
  manifests run.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import re
import subprocess
from typing import Any, Dict, Iterator, List, Tuple

import jsonschema
import kubernetes_validate
import pytest
import yaml

from cxlctl.cli import run
from cxlctl.config import ConfigError, load
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.k8s import kvpool, nfd
from tests import nfd_rules
from tests.kit import REPO, cli, copy_fixture, fixture_roots
from tests.launch_support import Fakes, add_gpu, write_status

DEPLOY = os.path.join(REPO, "deploy", "kubernetes")
SCHEMAS = os.path.join(REPO, "tests", "schemas")
#: the oldest Kubernetes minor still supported upstream when this was written, and the newest the validator knows
K8S_VERSIONS = ("1.32.0", "1.37.0")


#: test digests for render.sh's placeholders (each image its own, so a swapped one shows)
DIGESTS = {
    "CXLCTL_IMAGE_DIGEST": "sha256:" + "c" * 64,
    "KUBE_RBAC_PROXY_IMAGE_DIGEST": "sha256:" + "b" * 64,
    "VLLM_CXL_IMAGE_DIGEST": "sha256:" + "f" * 64,
}


def _render(env: Dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [os.path.join(DEPLOY, "render.sh")],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


_RENDERED: List[Tuple[str, Dict[str, Any]]] = []


def _docs() -> Iterator[Tuple[str, Dict[str, Any]]]:
    """Every manifest as render.sh gives it to kubectl (the images pinned by the test digests)."""
    if not _RENDERED:
        p = _render(DIGESTS)
        assert p.returncode == 0, p.stderr
        name = ""
        for doc_text in re.split(r"^---\n", p.stdout, flags=re.M):
            m = re.match(r"# (\S+\.yaml)\n", doc_text)
            if m:
                name = m.group(1)
            for doc in yaml.safe_load_all(doc_text):
                if doc is not None:
                    _RENDERED.append((name, doc))
        files = {os.path.basename(f) for f in glob.glob(os.path.join(DEPLOY, "*.yaml"))}
        assert {n for n, _ in _RENDERED} == files
    yield from _RENDERED


def _find(kind: str, name: str) -> Dict[str, Any]:
    for _, d in _docs():
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"no {kind} {name}")


def test_every_manifest_is_known_and_complete() -> None:
    kinds = sorted(f"{f}:{d['kind']}" for f, d in _docs())
    assert kinds == sorted(
        [
            "cxlctl-daemonset.yaml:Namespace",
            "cxlctl-daemonset.yaml:ServiceAccount",
            "cxlctl-daemonset.yaml:ClusterRole",
            "cxlctl-daemonset.yaml:ClusterRoleBinding",
            "cxlctl-daemonset.yaml:ConfigMap",
            "cxlctl-daemonset.yaml:DaemonSet",
            "cxlctl-nodefeaturerule.yaml:NodeFeatureRule",
            "cxlctl-openshift-scc.yaml:Role",
            "cxlctl-openshift-scc.yaml:RoleBinding",
            "cxlctl-servicemonitor.yaml:Service",
            "cxlctl-servicemonitor.yaml:ServiceAccount",
            "cxlctl-servicemonitor.yaml:Secret",
            "cxlctl-servicemonitor.yaml:ClusterRole",
            "cxlctl-servicemonitor.yaml:ClusterRoleBinding",
            "cxlctl-servicemonitor.yaml:ServiceMonitor",
            "vllm-deployment.yaml:Deployment",
        ]
    )


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_manifests_validate_against_the_kubernetes_schemas(version: str) -> None:
    n = 0
    for _, doc in _docs():
        if doc["apiVersion"].startswith(("monitoring.coreos.com/", "nfd.k8s-sigs.io/")):
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        n += 1
    assert n == 14


def test_the_validator_catches_a_typo() -> None:
    ds = copy.deepcopy(_find("DaemonSet", "cxlctl"))
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSIONS[-1], strict=True)
    dep = copy.deepcopy(_find("Deployment", "vllm-cxl"))
    dep["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] = {"x": 1}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_VERSIONS[-1], strict=True)


# --------------------------------------------------------------------------- ServiceMonitor (CRD)


def _strict(schema: Any) -> Any:
    """The CRD's structural schema, with unknown fields refused where the CRD lists the known ones."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _servicemonitor_schema() -> Dict[str, Any]:
    with open(os.path.join(SCHEMAS, "monitoring.coreos.com_servicemonitors.yaml")) as f:
        crd = yaml.safe_load(f)
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: Dict[str, Any] = _strict(v1["schema"]["openAPIV3Schema"])
    # apiVersion/kind/metadata are the API server's; the CRD leaves metadata open
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def test_servicemonitor_validates_against_the_prometheus_operator_crd() -> None:
    sm = _find("ServiceMonitor", "cxlctl")
    schema = _servicemonitor_schema()
    jsonschema.validate(sm, schema)
    bad = copy.deepcopy(sm)
    bad["spec"]["endpoints"][0]["intervall"] = "60s"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    # it selects the Service that exposes the DaemonSet's port
    svc = _find("Service", "cxlctl-metrics")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    ds = _find("DaemonSet", "cxlctl")
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    ports = [p for c in ds["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])]
    assert [p["containerPort"] for p in ports if p["name"] == "metrics"] == [9860]


# --------------------------------------------------------------------------- the NodeFeatureRule (NFD's CRD)

#: what nfd-worker reads of a CXL type-3 memory device: the kernel's cxl_pci binds PCI class 0x0502
#: with programming interface 0x10 (drivers/cxl/pci.c, cxl_mem_pci_tbl), so its sysfs ``class`` is
#: 0x050210; QEMU's emulated device has vendor 0x8086. A GPU (class 0x030200) for the negative case.
CXL_DEVICE = {"class": "0x050210\n", "vendor": "0x8086\n", "device": "0x0d93\n"}
GPU_DEVICE = {"class": "0x030200\n", "vendor": "0x10de\n", "device": "0x2330\n"}


def _pci(dev: Dict[str, str]) -> Dict[str, str]:
    return {k: nfd_rules.pci_attribute(k, v) for k, v in dev.items()}


def test_nodefeaturerule_validates_against_nfds_crd() -> None:
    nfr = _find("NodeFeatureRule", "cxlctl-cxl-memory-device")
    assert nfr["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    schema = nfd_rules.NODEFEATURERULE_SCHEMA
    jsonschema.validate(nfr, schema)
    assert "namespace" not in nfr["metadata"], "the CRD is cluster-scoped"
    bad = copy.deepcopy(nfr)
    bad["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"]["class"]["op"] = "Equals"  # not an op
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = copy.deepcopy(nfr)
    bad["spec"]["rules"][0]["label"] = bad["spec"]["rules"][0].pop("labels")  # a typo
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_daemonset_selects_on_the_label_the_rule_makes_nfd_write() -> None:
    """Issue 35 row 10: with stock NFD the old selector (pci-0502.present) matched no node: the pci
    source labels no class 05 device and names one class_vendor. The rule's label is what NFD sets on
    a node with a CXL memory device, by its own rules, and only there; nfd-master accepts it."""
    ds = _find("DaemonSet", "cxlctl")
    selector = ds["spec"]["template"]["spec"]["nodeSelector"]
    rule, _pool_rule = _find("NodeFeatureRule", "cxlctl-cxl-memory-device")["spec"]["rules"]
    cxl_node = {"pci.device": [_pci(GPU_DEVICE), _pci(CXL_DEVICE)]}
    gpu_node = {"pci.device": [_pci(GPU_DEVICE)]}
    assert _pci(CXL_DEVICE)["class"] == "0502"
    got = nfd_rules.rule_labels(rule, cxl_node)
    assert selector.items() <= got.items(), (selector, got)
    assert nfd_rules.rule_labels(rule, gpu_node) == {}
    for k, v in got.items():
        assert nfd_rules.label_problem(k, v) == "", k
    # stock nfd-worker's own PCI labels for the same node: the GPU only, and never the selector
    stock = nfd_rules.pci_labels(cxl_node["pci.device"])
    assert stock == ["feature.node.kubernetes.io/pci-0302_10de.present"]
    assert "feature.node.kubernetes.io/pci-0502.present" not in nfd_rules.pci_labels(
        cxl_node["pci.device"], whitelist=["0502"]
    ), "even with 0502 whitelisted the default fields name it pci-0502_8086"
    assert not set(selector) & set(stock)


def _pool(root: str) -> Dict[str, Any]:
    """What the DaemonSet's kv-pool container would set up on this node (``--dry-run``: nothing mounted)."""
    init = {c["name"]: c for c in _daemon_pod()["initContainers"]}["kv-pool"]
    argv = _cxlctl_argv(init)
    out: Dict[str, Any] = json.loads(cli("--root", root, *argv[1:], "--dry-run", "--json", check=True).stdout)
    return out


def _cxlctl_argv(container: Dict[str, Any]) -> List[str]:
    """The cxlctl command an init container runs (``sh -c 'cxlctl ... || ...'``: a node without CXL
    memory for it must not keep the daemon from starting), as words."""
    import shlex

    cmd = container["command"]
    assert cmd[:2] == ["sh", "-c"] and len(cmd) == 3, cmd
    words = shlex.split(cmd[2])
    return words[: words.index("||")]


def test_nri_config_is_resolved_on_each_node(tmp_path: Any) -> None:
    """Issue 42: the agent's init container writes the plugin's classes on each node from that node's
    topology; the same command on two recorded nodes whose CXL memory has other ids gives each its own."""
    from cxlctl.k8s import nri

    spec = _daemon_pod()
    init = {c["name"]: c for c in spec["initContainers"]}["nri-config"]
    argv = _cxlctl_argv(init)
    assert argv[:3] == ["cxlctl", "k8s", "nri-config"] and argv[argv.index("--output") + 1] == nri.NODE_FILE
    sc = init["securityContext"]
    assert "privileged" not in sc and sc["capabilities"] == {"drop": ["ALL"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    (m,) = [m for m in init["volumeMounts"] if nri.NODE_FILE.startswith(m["mountPath"] + "/")]
    assert vols[m["name"]]["hostPath"]["path"] == os.path.dirname(nri.NODE_FILE)
    got = {}
    for name in ("single-region", "hmat2-region"):
        t = copy_fixture(fixture_roots(f"linux-6.12/{name}")[0], str(tmp_path / name))
        cli("--root", t, *argv[1:], check=True)
        with open(t + nri.NODE_FILE) as f:
            doc = yaml.safe_load(f)
        got[name] = {c["name"]: c["policy"]["nodes"] for c in doc["classes"]}
    assert got["single-region"]["cxlctl-kv-cxl"] == "1" and got["hmat2-region"]["cxlctl-kv-cxl"] == "2-3"
    assert set(got["single-region"]) == set(got["hmat2-region"]), "one class name, resolved per node"


def test_the_kv_pool_is_a_resource_the_scheduler_counts() -> None:
    """Issue 42: the feature file the agent writes for a recorded node becomes, by NFD's rules, the
    extended resource the Deployment asks for -- a capacity fixed by the pool, not a label changing
    at every rescan -- and no label; Kubernetes counts the name as an extended resource."""
    root = fixture_roots("linux-6.12/hmat2-region")[0]
    pool = _pool(root)
    assert pool["nodes"] == [2, 3] and pool["mpol"] == "bind:2-3"
    feats = nfd_rules.local_feature_file(pool["feature_file"])
    assert feats["local.label"] == {}, "a feature, not a label"
    _, rule = _find("NodeFeatureRule", "cxlctl-cxl-memory-device")["spec"]["rules"]
    got = nfd_rules.rule_extended_resources(rule, feats)
    assert got == {kvpool.RESOURCE: str(pool["size"] >> 20)} and int(got[kvpool.RESOURCE]) == 504
    assert nfd_rules.rule_extended_resources(rule, {"local.feature": {}}) == {}, "no pool, no resource"
    # Kubernetes: an extended resource is a qualified name outside kubernetes.io (IsExtendedResourceName)
    name = kvpool.RESOURCE
    assert "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")
    _, c = _vllm()
    assert name in c["resources"]["limits"] and name not in c["resources"].get("requests", {})
    # the same rule set the feature file of the agent's own code, whatever the node
    assert kvpool.FEATURE_REF == rule["extendedResources"][name]


def _entrypoint_dry_run(tree: str, fakes: Fakes) -> Dict[str, Any]:
    """The pod's entrypoint with its manifest arguments (the size a thousand times smaller: 256G ->
    256M) as ``--dry-run --json``, run as uid 65534 with no capability: what the pod's cxlctl plans."""
    _, c = _vllm()
    args = [re.sub(r"^--kv-size=(\d+)G$", r"--kv-size=\1M", a) for a in c["args"]]
    assert "--kv-size=256M" in args
    env = {**fakes.env(), "HOME": "/tmp"}
    p = cli("--root", tree, *c["command"][1:], "--dry-run", "--json", *args, env=env, nobody=True, check=True)
    plan: Dict[str, Any] = json.loads(p.stdout)
    return plan


def test_pod_entrypoint_places_the_offload_on_cxl_without_privileges(tmp_path: Any) -> None:
    """Issue 42 item 4. On the recorded hmat2 node (CXL nodes 2 and 3, kernel zone), as uid 65534:
    without the pool the plan says most of the 256 MiB lands on DRAM; with the node's KV pool at
    /dev/shm (the mountinfo a 6.12 guest showed inside a mount namespace whose /dev/shm is a bind
    of the pool's directory, after the agent mounted it: fixtures/kubernetes/README.md) every byte
    is on the pool's CXL nodes and nothing is mounted by the pod."""
    import shutil

    from tests.kit import readable_copy

    tree = readable_copy(fixture_roots("linux-6.12/hmat2-region")[0])
    add_gpu(tree, "0000:17:00.0", 0)
    add_gpu(tree, "0000:18:00.0", 0)
    write_status(tree, "0,2-3")
    base = os.path.dirname(tree)
    fakes = Fakes(os.path.join(base, "fakes"))
    fakes.for_anyone()
    from tests.kit import _world_readable

    _world_readable(base)
    os.chmod(fakes.base, 0o777)  # the fake vLLM counts its --help calls there, as uid 65534
    before = _entrypoint_dry_run(tree, fakes)["kv_offload"]
    assert before["mechanism"] == "policy" and before["on_cxl"] is False
    dram = int(before["expected_bytes_per_node"].get("0", 0))
    assert dram > 0, before  # the interleave's DRAM share (the issue saw 63 % under other weights)
    assert "CAP_SYS_ADMIN" in before["why_not_on_cxl"]
    # the node's KV pool, as the agent plans it for this node, at the pod's /dev/shm
    pool = _pool(tree)
    shutil.copy(os.path.join(REPO, "fixtures", "kubernetes", "container-mountinfo.txt"), f"{tree}/proc/self/mountinfo")
    os.chmod(f"{tree}/proc/self/mountinfo", 0o644)
    with open(f"{tree}/proc/self/mountinfo") as f:
        shm = [ln for ln in f if " /dev/shm " in ln][-1]  # over the guest's own /dev/shm
    assert "mpol=" + pool["mpol"] in shm, (shm, pool["mpol"])
    plan = _entrypoint_dry_run(tree, fakes)
    kv = plan["kv_offload"]
    assert kv["mechanism"] == "shm-mount" and kv["on_cxl"] is True, kv
    assert kv["nodes"] == pool["nodes"] == [2, 3]
    got = {int(n): int(b) for n, b in kv["expected_bytes_per_node"].items()}
    assert set(got) <= {2, 3} and sum(got.values()) == 256 << 20, got
    assert plan["tmpfs"] is None, "the pod mounts nothing"
    assert kv["pinned"] is True and kv["pin_moved_bytes_per_node"] == {}, "kernel-zone CXL: the pin keeps it"
    checks = {c["name"]: c for c in plan["checks"]}
    assert "kv-tmpfs-cpuset" not in checks and plan["ok"] is True, checks
    # a pod whose cpuset.mems lacks the pool's nodes: mpol_shared_policy_init() would give the file no
    # policy at all; the entrypoint's pre-flight says so and launches nothing
    write_status(tree, "0")
    _, c = _vllm()
    args = [re.sub(r"^--kv-size=(\d+)G$", r"--kv-size=\1M", a) for a in c["args"]]
    p = cli(
        "--root", tree, "launch", "vllm", "--dry-run", "--json", *args, env={**fakes.env(), "HOME": "/tmp"}, nobody=True
    )
    assert p.returncode == 1, p.stderr
    bad = {c["name"]: c for c in json.loads(p.stdout)["checks"] if c["status"] == "fail"}
    assert "mpol_shared_policy_init()" in bad["kv-tmpfs-cpuset"]["message"], bad


# --------------------------------------------------------------------------- the DaemonSet and its ConfigMap


def test_configmap_parses_with_the_daemons_loader(tmp_path: Any) -> None:
    """cxlctl.toml with the daemon's loader (the web configuration it names placed under a root, its
    certificate files not: they come from a Secret), and web.yml with the daemon's web-config parser."""
    from cxlctl.webconfig import parse

    data = _find("ConfigMap", "cxlctl-config")["data"]
    root = tmp_path / "root"
    (root / "etc" / "cxlctl").mkdir(parents=True)
    p = root / "etc" / "cxlctl" / "cxlctl.toml"
    p.write_text(data["cxlctl.toml"])
    from cxlctl.config import validate
    from cxlctl.hostio import toml

    cfg = validate(str(p), toml.loads(data["cxlctl.toml"]))
    assert cfg.profile == "inference-bandwidth"
    assert (cfg.drift_interval, cfg.drift_action) == (60, "reapply")
    assert cfg.metrics_listen == ("127.0.0.1", 9861) and cfg.metrics_allow_remote is False, "loopback only"
    assert cfg.metrics_web_config == "/etc/cxlctl/web.yml" and cfg.ready_file == "/run/cxlctl-ready/ready"
    assert cfg.nfd_enabled and cfg.nfd_dir == "/etc/kubernetes/node-feature-discovery/features.d"
    web = parse("/etc/cxlctl/web.yml", data["web.yml"])
    assert web.tls and web.cert_file == "/etc/cxlctl/tls/tls.crt" and web.key_file == "/etc/cxlctl/tls/tls.key"
    # and the real loader refuses it while the certificate is missing: the endpoint never opens without TLS
    (root / "etc" / "cxlctl" / "web.yml").write_text(data["web.yml"])
    with pytest.raises(ConfigError) as e:
        load(Host(str(root)), str(p), web=True)
    assert e.value.key == "metrics.web_config"


def test_daemonset_runs_the_daemon_on_the_configmap() -> None:
    ds = _find("DaemonSet", "cxlctl")
    spec = ds["spec"]["template"]["spec"]
    c = spec["containers"][0]
    assert c["command"] == ["cxlctl", "daemon", "run", "--config", "/etc/cxlctl/cxlctl.toml"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    cfg = mounts["/etc/cxlctl/cxlctl.toml"]
    assert cfg["subPath"] == "cxlctl.toml"
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols[cfg["name"]]["configMap"]["name"] == "cxlctl-config"
    assert spec["serviceAccountName"] == "cxlctl" and spec["automountServiceAccountToken"] is False
    sa = _find("ServiceAccount", "cxlctl")
    assert sa["metadata"]["namespace"] == ds["metadata"]["namespace"]
    ns = _find("Namespace", "cxlctl")
    # the level's name: hostNetwork, hostPath and CAP_SYS_ADMIN are beyond "baseline" (the pod is not privileged)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


# --------------------------------------------------------------------------- the vLLM Deployment


def _vllm() -> Tuple[Dict[str, Any], Dict[str, Any]]:
    dep = _find("Deployment", "vllm-cxl")
    spec: Dict[str, Any] = dep["spec"]["template"]["spec"]
    return spec, spec["containers"][0]


def test_deployment_is_unprivileged_with_the_kv_pool_as_dev_shm() -> None:
    """Issue 42: the pod's /dev/shm is its own directory of the node's KV pool (the one host path), which
    the DaemonSet's kv-pool init container mounts on the host, where the kubelet's bind mount finds it."""
    from cxlctl.hostio.paths import KV_POOL_DIR, NFD_DIR

    spec, c = _vllm()
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False and sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_NICE"]}
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    (shm,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert shm["subPathExpr"] == "$(POD_UID)" and not shm.get("readOnly") and not shm.get("mountPropagation")
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    host = [v for v in spec["volumes"] if "hostPath" in v]
    assert [v["name"] for v in host] == [shm["name"]], "/sys and /proc are the runtime's; the pool is the one host path"
    assert host[0]["hostPath"] == {"path": KV_POOL_DIR, "type": "Directory"}
    # the agent's side: the same host directory, mounted there by the init container and propagated to the host
    ds = _daemon_pod()
    init = {c["name"]: c for c in ds["initContainers"]}["kv-pool"]
    assert _cxlctl_argv(init) == ["cxlctl", "k8s", "kv-pool"] and init["securityContext"]["privileged"] is True
    vols = {v["name"]: v for v in ds["volumes"]}
    (pool,) = [m for m in init["volumeMounts"] if m["mountPath"] == KV_POOL_DIR]
    assert vols[pool["name"]]["hostPath"]["path"] == KV_POOL_DIR and pool["mountPropagation"] == "Bidirectional"
    mounts = {m["mountPath"]: vols[m["name"]] for m in init["volumeMounts"]}
    assert mounts["/var/lib/kubelet/pods"]["hostPath"]["path"] == kvpool.KUBELET_PODS
    assert mounts[NFD_DIR]["hostPath"]["path"] == NFD_DIR


def test_deployment_schedules_on_labels_the_daemon_writes() -> None:
    spec, _ = _vllm()
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    written = set(nfd.labels(scan(Host(fixture_roots("linux-6.12/single-region")[0])), None, tiering="none"))
    written.add("feature.node.kubernetes.io/cxl.health")  # written when the health probe has device data
    assert keys <= written, keys - written


def test_deployment_entrypoint_is_a_valid_launch(capsys: Any, tmp_path: Any) -> None:
    """Its arguments go through `cxlctl launch vllm --dry-run` on a recorded tree with two GPUs."""
    _, c = _vllm()
    assert c["command"] == ["cxlctl", "launch", "vllm"]
    args: List[str] = list(c["args"])
    # the recorded CXL node holds 512 MiB: the same request a thousand times smaller (256G -> 256M)
    args = [re.sub(r"^--kv-size=(\d+)G$", r"--kv-size=\1M", a) for a in args]
    assert "--kv-size=256M" in args
    t = copy_fixture(fixture_roots("linux-6.12/single-region")[0], str(tmp_path / "t"))
    add_gpu(t, "0000:17:00.0", 0)
    add_gpu(t, "0000:18:00.0", 0)
    write_status(t, "0-1")
    fakes = Fakes(str(tmp_path / "fakes"))
    old = dict(os.environ)
    os.environ.update(fakes.env())
    try:
        capsys.readouterr()
        rc = run(["--root", t, "launch", "vllm", "--dry-run", "--json", *args])
    finally:
        os.environ.clear()
        os.environ.update(old)
    out = capsys.readouterr()
    assert rc == 0, out.err
    plan = json.loads(out.out)
    assert plan["argv"][:2] == ["vllm", "serve"] and "--kv-offloading-size" in plan["argv"]
    assert plan["argv"][plan["argv"].index("--kv-offloading-size") + 1] == "0.25"  # GiB: the 256M asked
    assert plan["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"


_QUANTITY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def _quantity(q: str) -> int:
    """A Kubernetes binary-suffixed quantity in bytes (the manifests use Ki/Mi/Gi/Ti only)."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)", q)
    assert m, f"{q!r}: use a binary suffix"
    return int(m.group(1)) * _QUANTITY[m.group(2)]


def test_deployment_kv_size_fits_the_pods_own_limits() -> None:
    """Issue 35 row 11: --kv-size=auto took the node's free CXL memory, which on a node bigger than
    the manifest assumed exceeded the /dev/shm emptyDir and the memory limit (the pod is killed).
    The offload has a fixed size: it fits in /dev/shm, /dev/shm fits in the limit with room for the
    engine, and the node selector asks for at least that much free CXL memory."""
    from cxlctl.launch.kvsize import parse_size_arg

    spec, c = _vllm()
    kv = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--kv-size=")]
    assert len(kv) == 1 and kv[0].lower() != "auto", "a size that cannot grow with the node"
    assert not [a for a in c["args"] if a.startswith("--reserve")], "--reserve applies to auto only"
    kv_bytes = parse_size_arg(kv[0], "--kv-size")
    pool_share = int(c["resources"]["limits"][kvpool.RESOURCE]) << 20
    mem_limit = _quantity(c["resources"]["limits"]["memory"])
    assert kv_bytes <= pool_share <= mem_limit, (kv_bytes, pool_share, mem_limit)
    assert mem_limit - pool_share >= 16 << 30, "room for the engine's own memory beside /dev/shm"
    assert _quantity(c["resources"]["requests"]["memory"]) <= mem_limit
    # issue 42: no free-memory label in the selector (it changed at every rescan and let two pods
    # take one node's last GiB); the pool is a resource the scheduler counts
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert not [e for t in terms for e in t["matchExpressions"] if "free-mib" in e["key"]]


# --------------------------------------------------------------------------- the Containerfile


def _containerfile() -> List[Tuple[str, str]]:
    with open(os.path.join(DEPLOY, "Containerfile")) as f:
        text = re.sub(r"\\\n", " ", f.read())
    out = []
    for line in text.splitlines():
        s = line.strip()
        if s and not s.startswith("#"):
            word, _, rest = s.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_containerfile_targets_paths_and_commands() -> None:
    ins = _containerfile()
    assert {w for w, _ in ins} <= {"ARG", "FROM", "RUN", "COPY", "ENTRYPOINT", "CMD"}
    stages = [r.split(" AS ")[-1] for w, r in ins if w == "FROM"]
    assert stages == ["daemon", "vllm"]
    for w, r in ins:
        if w == "COPY":
            *srcs, _dest = r.split()
            for s in srcs:
                assert os.path.exists(os.path.join(REPO, s)), s
    by_stage: Dict[str, List[Tuple[str, str]]] = {}
    cur = ""
    for w, r in ins:
        if w == "FROM":
            cur = r.split(" AS ")[-1]
        by_stage.setdefault(cur, []).append((w, r))
    daemon_cmd = json.loads([r for w, r in by_stage["daemon"] if w == "CMD"][0])
    assert daemon_cmd == _find("DaemonSet", "cxlctl")["spec"]["template"]["spec"]["containers"][0]["command"]
    vllm_entry = json.loads([r for w, r in by_stage["vllm"] if w == "ENTRYPOINT"][0])
    assert vllm_entry == _vllm()[1]["command"]


# --------------------------------------------------------------------------- issue 43: hardening


def _unit() -> Dict[str, List[str]]:
    """The systemd unit's directives (systemd/cxlctl.service), each with every value it is given."""
    out: Dict[str, List[str]] = {}
    with open(os.path.join(REPO, "systemd", "cxlctl.service")) as f:
        for line in f:
            k, sep, v = line.strip().partition("=")
            if sep and not line.startswith("#"):
                out.setdefault(k, []).extend(v.split())
    return out


def _daemon_pod() -> Dict[str, Any]:
    spec: Dict[str, Any] = _find("DaemonSet", "cxlctl")["spec"]["template"]["spec"]
    return spec


def test_daemonset_is_not_privileged_and_has_the_units_capabilities() -> None:
    spec = _daemon_pod()
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    unit_caps = sorted(c.removeprefix("CAP_") for c in _unit()["CapabilityBoundingSet"])
    assert unit_caps == ["NET_ADMIN", "SYS_ADMIN"]
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert "privileged" not in sc, c["name"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, c["name"]
        assert sc["capabilities"]["drop"] == ["ALL"], c["name"]
        want = unit_caps if c["name"] == "cxlctl" else []
        assert sorted(sc["capabilities"].get("add", [])) == want, c["name"]
    (proxy,) = [c for c in spec["containers"] if c["name"] == "kube-rbac-proxy"]
    assert proxy["securityContext"]["runAsNonRoot"] is True
    # issue 42: the one privileged container is the one-shot kv-pool init container, and what it mounts
    # is the pool's directory (propagated to the host), NFD's directory, the kubelet's pods read-only, /tmp
    every = spec["initContainers"] + spec["containers"]
    assert [c["name"] for c in every if c["securityContext"].get("privileged")] == ["kv-pool"]
    (init,) = [c for c in spec["initContainers"] if c["name"] == "kv-pool"]
    got = {m["mountPath"]: (m.get("readOnly", False), m.get("mountPropagation")) for m in init["volumeMounts"]}
    assert got == {
        "/run/cxlctl/kv": (False, "Bidirectional"),
        "/etc/kubernetes/node-feature-discovery/features.d": (False, None),
        "/var/lib/kubelet/pods": (True, None),
        "/tmp": (False, None),
    }
    assert not spec.get("hostPID") and not spec.get("hostIPC")


def test_daemonset_host_paths_are_the_units_writable_paths() -> None:
    """Every writable hostPath is a path the unit may write (or, for /sys/kernel/mm, the directory of
    three it may write that a kernel may lack); every path the unit writes under /sys is mounted."""
    spec = _daemon_pod()
    (c,) = [c for c in spec["containers"] if c["name"] == "cxlctl"]
    vols = {v["name"]: v for v in spec["volumes"]}
    rw_host = {
        vols[m["name"]]["hostPath"]["path"]: m["mountPath"]
        for m in c["volumeMounts"]
        if "hostPath" in vols[m["name"]] and not m.get("readOnly")
    }
    # /proc cannot take a volume (the runtime refuses mounts inside /proc): the host's /proc/sys
    # directories go beside it, where CXLCTL_HOST_PROC_SYS points cxlctl
    env = {e["name"]: e["value"] for e in c["env"]}
    for path, mount in rw_host.items():
        want = env["CXLCTL_HOST_PROC_SYS"] + path[len("/proc/sys") :] if path.startswith("/proc/sys/") else path
        assert mount == want, (path, mount)
        assert not mount.startswith("/proc/"), mount
    unit_rw = [p.lstrip("-") for p in _unit()["ReadWritePaths"]]
    unit_rw += ["/run/cxlctl"]  # RuntimeDirectory=cxlctl
    parents = {"/sys/kernel/mm"}
    ro_host = {
        vols[m["name"]]["hostPath"]["path"]
        for m in c["volumeMounts"]
        if "hostPath" in vols[m["name"]] and m.get("readOnly")
    }
    assert {"/proc/sys/vm", "/proc/sys/kernel"} <= ro_host, "the host's sysctls readable, not writable"
    assert "/sys/kernel/tracing" in ro_host and "/sys/kernel/tracing/instances" in rw_host, "no kprobes"
    for path in rw_host:
        assert path in unit_rw or (path in parents and any(u.startswith(path + "/") for u in unit_rw)), path
    for u in unit_rw:
        if u.startswith(("/sys/", "/proc/sys/")):
            assert any(u == p or u.startswith(p + "/") for p in rw_host), f"{u} is not writable in the pod"
    assert "dev-cxl" not in vols, "no device node without a device plugin"


def test_images_are_pinned_by_digest_and_rendering_requires_them() -> None:
    images = [
        c["image"]
        for _, d in _docs()
        if d["kind"] in ("DaemonSet", "Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    assert len(images) == 3
    for img in images:
        assert re.fullmatch(r"[a-z0-9.-]+(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}", img), img
    assert sorted(i.split("@", 1)[1] for i in images) == sorted(DIGESTS.values())
    # the files themselves carry placeholders, never a tag
    for path in glob.glob(os.path.join(DEPLOY, "*.yaml")):
        with open(path) as f:
            for line in f:
                if line.strip().startswith("image:"):
                    assert re.search(r"@\$\{[A-Z_]+_DIGEST\}$", line.strip()), line
    for missing in DIGESTS:
        p = _render({k: v for k, v in DIGESTS.items() if k != missing})
        assert p.returncode == 2 and missing in p.stderr and p.stdout == "", p.stderr
    p = _render({**DIGESTS, "CXLCTL_IMAGE_DIGEST": "0.1.0"})
    assert p.returncode == 2 and "sha256:<64 hex digits>" in p.stderr


def test_tolerations_are_narrow() -> None:
    for t in _daemon_pod()["tolerations"]:
        assert t.get("key"), f"a toleration without a key tolerates every taint: {t}"
        assert t.get("effect") in ("NoSchedule", "PreferNoSchedule"), t


def test_metrics_only_through_kube_rbac_proxy_over_https() -> None:
    """The daemon listens on loopback with TLS; the proxy listens on the node's port 9860, sends to
    the daemon's address checking its certificate; the ServiceMonitor scrapes https with a token whose
    ServiceAccount may get /metrics; the proxy may create TokenReviews and SubjectAccessReviews."""
    from cxlctl.hostio import toml

    spec = _daemon_pod()
    (proxy,) = [c for c in spec["containers"] if c["name"] == "kube-rbac-proxy"]
    args = dict(a.lstrip("-").split("=", 1) for a in proxy["args"])
    cfg = toml.loads(_find("ConfigMap", "cxlctl-config")["data"]["cxlctl.toml"])
    assert args["upstream"] == f"https://{cfg['metrics']['listen']}/" and cfg["metrics"]["listen"].startswith("127.")
    assert args["secure-listen-address"].endswith(":9860") and args["upstream-ca-file"]
    (daemon,) = [c for c in spec["containers"] if c["name"] == "cxlctl"]
    assert "ports" not in daemon, "nothing of the daemon's is published"
    # readiness: the daemon's own ready file (not reachable by a process that took its port)
    assert daemon["readinessProbe"]["exec"]["command"] == ["test", "-f", cfg["metrics"]["ready_file"]]
    # the token only in the proxy
    token_mounts = [m for c in spec["containers"] for m in c["volumeMounts"] if m["name"] == "proxy-token"]
    assert [m["mountPath"] for m in token_mounts] == ["/var/run/secrets/kubernetes.io/serviceaccount"]
    assert [c["name"] for c in spec["containers"] if any(m["name"] == "proxy-token" for m in c["volumeMounts"])] == [
        "kube-rbac-proxy"
    ]
    rules = _find("ClusterRole", "cxlctl-kube-rbac-proxy")["rules"]
    assert {(r["apiGroups"][0], r["resources"][0], r["verbs"][0]) for r in rules} == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    ep = _find("ServiceMonitor", "cxlctl")["spec"]["endpoints"][0]
    assert ep["scheme"] == "https" and ep["tlsConfig"]["serverName"] == "cxlctl-metrics.cxlctl.svc"
    secret = _find("Secret", "cxlctl-metrics-reader-token")
    assert ep["authorization"]["credentials"]["name"] == secret["metadata"]["name"]
    reader = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    binding = _find("ClusterRoleBinding", "cxlctl-metrics-reader")
    assert binding["subjects"][0]["name"] == reader
    assert _find("ClusterRole", binding["roleRef"]["name"])["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
