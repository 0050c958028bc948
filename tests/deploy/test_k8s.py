"""docker/k8s rendered and read: probes, resources, users, images, ports and wiring all agree."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.cli import build_parser

from .conftest import CLUSTER_SCOPED_KINDS, PARTS, REPO_ROOT, WORKLOAD_KINDS, Dockerfile
from .test_dockerfiles import PART_COMMAND, listening_port
from .test_requirements import reachable

# Variables the manifests set for the runtime or for argument expansion, not vramdoc settings.
PLATFORM_VARIABLES = frozenset(
    {"NODE_NAME", "POD_IP", "HOST_IP", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
)


def _containers(manifests: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for obj in manifests:
        if obj["kind"] in WORKLOAD_KINDS:
            pod = obj["spec"]["template"]["spec"]
            for container in pod["containers"]:
                yield obj, container


def _by_kind(manifests: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in manifests if obj["kind"] == kind}


def _part_of(container: dict[str, Any]) -> str | None:
    """Which vramdoc image a container runs (None for Redis)."""
    for part in PARTS:
        if container["image"].startswith(f"vramdoc/{part}:"):
            return part
    return None


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed on this machine")
def test_python_rendering_equals_kubectl_kustomize(manifests: list[dict[str, Any]], repo_root: Path) -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(repo_root / "docker" / "k8s")],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    from_kubectl = {_key(obj): obj for obj in yaml.safe_load_all(rendered) if obj}
    assert from_kubectl == {_key(obj): obj for obj in manifests}


def test_every_namespaced_object_lands_in_the_vramdoc_namespace(manifests: list[dict[str, Any]]) -> None:
    for obj in manifests:
        expected = None if obj["kind"] in CLUSTER_SCOPED_KINDS else "vramdoc"
        assert obj["metadata"].get("namespace") == expected, _key(obj)
    assert "vramdoc" in _by_kind(manifests, "Namespace")


def test_every_container_has_readiness_and_liveness_probes(manifests: list[dict[str, Any]]) -> None:
    for obj, container in _containers(manifests):
        assert "readinessProbe" in container and "livenessProbe" in container, (_key(obj), container["name"])


def test_every_container_requests_and_limits_cpu_and_memory(manifests: list[dict[str, Any]]) -> None:
    for obj, container in _containers(manifests):
        resources = container["resources"]
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources[bound]), (_key(obj), container["name"], bound)


def test_no_container_runs_as_root_or_can_gain_privileges(manifests: list[dict[str, Any]]) -> None:
    for obj, container in _containers(manifests):
        pod_context = obj["spec"]["template"]["spec"].get("securityContext", {})
        context = {**pod_context, **container.get("securityContext", {})}
        where = (_key(obj), container["name"])
        assert context.get("runAsNonRoot") is True, where
        assert context.get("runAsUser", 0) != 0, where
        assert context.get("privileged", False) is False, where
        assert context.get("allowPrivilegeEscalation") is False, where
        assert context.get("readOnlyRootFilesystem") is True, where
        assert context["capabilities"]["drop"] == ["ALL"], where
        assert "add" not in context["capabilities"], where


def test_vramdoc_containers_run_as_the_images_own_user(
    manifests: list[dict[str, Any]], dockerfiles: dict[str, Dockerfile]
) -> None:
    for obj, container in _containers(manifests):
        part = _part_of(container)
        if part is None:
            continue
        user = dockerfiles[part].runtime.last("USER")
        assert user is not None
        pod_context = obj["spec"]["template"]["spec"]["securityContext"]
        assert f"{pod_context['runAsUser']}:{pod_context['runAsGroup']}" == user.value, _key(obj)


def test_images_are_the_three_parts_at_the_project_version(
    manifests: list[dict[str, Any]], pyproject: dict[str, Any]
) -> None:
    version = pyproject["project"]["version"]
    images = {container["image"] for _, container in _containers(manifests)}
    assert {f"vramdoc/{part}:{version}" for part in PARTS} <= images
    assert all(_part_of({"image": image}) or image.startswith("redis:") for image in images)


def test_container_args_are_cli_commands_listening_on_the_images_exposed_port(
    manifests: list[dict[str, Any]], dockerfiles: dict[str, Dockerfile]
) -> None:
    for obj, container in _containers(manifests):
        part = _part_of(container)
        if part is None:
            continue
        args = container["args"]
        assert build_parser().parse_args(args).command == PART_COMMAND[part], _key(obj)
        declared = [port["containerPort"] for port in container.get("ports", [])]
        exposed = [int(i.value) for i in dockerfiles[part].runtime.all("EXPOSE")]
        if part == "bot":
            assert declared == [], "the Socket Mode bot listens on nothing"
            continue
        assert declared == exposed == [listening_port(args)], _key(obj)


def test_probes_use_declared_ports_and_the_health_endpoints(manifests: list[dict[str, Any]]) -> None:
    for obj, container in _containers(manifests):
        port_names = {port.get("name") for port in container.get("ports", [])}
        for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
            probe = container.get(probe_name)
            if probe is None or "httpGet" not in probe:
                continue
            assert probe["httpGet"]["port"] in port_names, (_key(obj), probe_name)
            assert probe["httpGet"]["path"] in {"/healthz", "/readyz"}, (_key(obj), probe_name)


def test_services_select_a_workload_and_target_a_named_container_port(
    manifests: list[dict[str, Any]],
) -> None:
    workloads = [obj for obj in manifests if obj["kind"] in WORKLOAD_KINDS]
    for service in _by_kind(manifests, "Service").values():
        selector = service["spec"]["selector"]
        matches = [
            w for w in workloads if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matches) == 1, service["metadata"]["name"]
        container_ports = {
            port["name"]: port["containerPort"]
            for container in matches[0]["spec"]["template"]["spec"]["containers"]
            for port in container.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert container_ports[port["targetPort"]] == port["port"], service["metadata"]["name"]


def test_workload_selectors_match_their_pod_labels(manifests: list[dict[str, Any]]) -> None:
    for obj in manifests:
        if obj["kind"] in WORKLOAD_KINDS:
            selector = obj["spec"]["selector"]["matchLabels"]
            assert selector.items() <= obj["spec"]["template"]["metadata"]["labels"].items(), _key(obj)


def test_service_scales_on_cpu_which_its_pods_request(manifests: list[dict[str, Any]]) -> None:
    hpa = _by_kind(manifests, "HorizontalPodAutoscaler")["vramdoc-service"]
    target = hpa["spec"]["scaleTargetRef"]
    deployment = _by_kind(manifests, target["kind"])[target["name"]]
    assert hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        assert container["resources"]["requests"]["cpu"], "Utilization targets need a CPU request"
    assert (
        "replicas" not in deployment["spec"] or deployment["spec"]["replicas"] == hpa["spec"]["minReplicas"]
    )


def test_service_readiness_is_readyz_and_liveness_is_healthz(manifests: list[dict[str, Any]]) -> None:
    container = _by_kind(manifests, "Deployment")["vramdoc-service"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_bot_runs_in_socket_mode_with_no_service_or_ingress(manifests: list[dict[str, Any]]) -> None:
    bot = _by_kind(manifests, "Deployment")["vramdoc-bot"]
    container = bot["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    assert env["SLACK_APP_TOKEN"]["valueFrom"]["secretKeyRef"].get("optional") is not True
    assert not build_parser().parse_args(container["args"]).http
    bot_labels = bot["spec"]["template"]["metadata"]["labels"].items()
    for service in _by_kind(manifests, "Service").values():
        assert not service["spec"]["selector"].items() <= bot_labels
    assert not _by_kind(manifests, "Ingress")


def test_agent_runs_on_every_gpu_node_in_the_host_pid_namespace(manifests: list[dict[str, Any]]) -> None:
    pod = _by_kind(manifests, "DaemonSet")["vramdoc-agent"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["hostPID"] is True
    assert pod["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    container = pod["containers"][0]
    assert "nvidia.com/gpu" not in container["resources"]["requests"], "the agent must not take a GPU away"
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    env = {item["name"]: item for item in container["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"


def test_agent_registers_under_the_node_name_at_the_pod_address(manifests: list[dict[str, Any]]) -> None:
    container = _by_kind(manifests, "DaemonSet")["vramdoc-agent"]["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    env = {item["name"]: item for item in container["env"]}
    assert (
        args.name == "$(NODE_NAME)"
        and env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    )
    assert (
        args.url == "http://$(POD_IP):9400"
        and env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    )


def test_agent_token_is_a_file_from_the_secret(manifests: list[dict[str, Any]]) -> None:
    pod = _by_kind(manifests, "DaemonSet")["vramdoc-agent"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    token_file = Path(env["VRAMDOC_AGENT_TOKEN_FILE"]["value"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = next(m for m in mounts.values() if Path(m["mountPath"]) == token_file.parent)
    secret = volumes[mount["name"]]["secret"]
    assert secret["secretName"] == "vramdoc-secrets"
    assert {"key": "VRAMDOC_AGENT_TOKEN", "path": token_file.name} in secret["items"]
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"], "the user can read it"


def test_only_the_bot_may_reach_the_agents(manifests: list[dict[str, Any]]) -> None:
    policy = _by_kind(manifests, "NetworkPolicy")["vramdoc-agent"]
    agent = _by_kind(manifests, "DaemonSet")["vramdoc-agent"]
    bot = _by_kind(manifests, "Deployment")["vramdoc-bot"]
    agent_labels = agent["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= agent_labels
    [rule] = policy["spec"]["ingress"]
    [source] = rule["from"]
    assert (
        source["podSelector"]["matchLabels"].items() <= bot["spec"]["template"]["metadata"]["labels"].items()
    )
    assert rule["ports"] == [{"protocol": "TCP", "port": 9400}]


def test_every_setting_the_manifests_pass_is_documented_in_env_example(
    manifests: list[dict[str, Any]], env_example: dict[str, str]
) -> None:
    names: set[str] = set()
    for obj in manifests:
        if obj["kind"] == "ConfigMap":
            names.update(obj["data"])
    for _, container in _containers(manifests):
        for item in container.get("env", []):
            names.add(item["name"])
            key_ref = item.get("valueFrom", {}).get("secretKeyRef")
            if key_ref:
                names.add(key_ref["key"])
    assert names - PLATFORM_VARIABLES <= set(env_example)


def test_config_map_points_parts_at_the_in_cluster_redis_and_service(manifests: list[dict[str, Any]]) -> None:
    data = _by_kind(manifests, "ConfigMap")["vramdoc-config"]["data"]
    services = _by_kind(manifests, "Service")
    redis_port = services["redis"]["spec"]["ports"][0]["port"]
    service_port = services["vramdoc-service"]["spec"]["ports"][0]["port"]
    assert data["VRAMDOC_REDIS_URL"] == f"redis://redis:{redis_port}/0"
    assert data["VRAMDOC_SERVICE_URL"] == f"http://vramdoc-service:{service_port}"


def restricted_violations(obj: dict[str, Any]) -> list[str]:
    """What keeps a workload's pods out of Pod Security's "restricted" profile (the parts we use)."""
    pod = obj["spec"]["template"]["spec"]
    found = [field for field in ("hostPID", "hostIPC", "hostNetwork") if pod.get(field)]
    for container in pod["containers"] + pod.get("initContainers", []):
        context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        if context.get("runAsNonRoot") is not True or context.get("runAsUser") == 0:
            found.append(f"{container['name']}: may run as root")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{container['name']}: privilege escalation")
        if context.get("capabilities", {}).get("drop") != ["ALL"]:
            found.append(f"{container['name']}: capabilities not dropped")
        if context.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{container['name']}: no seccomp profile")
        if any("hostPort" in port for port in container.get("ports", [])):
            found.append(f"{container['name']}: hostPort")
    allowed_volumes = {"emptyDir", "secret", "configMap", "projected", "downwardAPI", "persistentVolumeClaim"}
    for volume in pod.get("volumes", []):
        if not set(volume) - {"name"} <= allowed_volumes:
            found.append(f"volume {volume['name']}: type not allowed")
    return found


def test_only_the_agents_host_pid_namespace_is_outside_the_restricted_profile(
    manifests: list[dict[str, Any]],
) -> None:
    violations = {
        obj["metadata"]["name"]: restricted_violations(obj)
        for obj in manifests
        if obj["kind"] in WORKLOAD_KINDS
    }
    assert violations.pop("vramdoc-agent") == ["hostPID"]
    assert all(found == [] for found in violations.values()), violations


def test_namespace_admits_the_agent_and_reports_anything_less_than_restricted(
    manifests: list[dict[str, Any]],
) -> None:
    labels = _by_kind(manifests, "Namespace")["vramdoc"]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged", "baseline would reject hostPID"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"


def settings_read_by(part: str) -> set[str]:
    """VRAMDOC_*/SLACK_* names that the modules a part's image runs read (string literals)."""
    names: set[str] = set()
    for module in reachable(part).modules:
        path = REPO_ROOT.joinpath(*module.split("."))
        source = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"
        names.update(
            re.findall(r"[\"']((?:VRAMDOC|SLACK)_[A-Z0-9_]+)[\"']", source.read_text(encoding="utf-8"))
        )
    return names


def test_each_setting_a_pod_is_given_is_read_by_that_part(manifests: list[dict[str, Any]]) -> None:
    for obj, container in _containers(manifests):
        part = _part_of(container)
        if part is None:
            continue
        given = {item["name"] for item in container.get("env", [])} - PLATFORM_VARIABLES
        assert given <= settings_read_by(part), (_key(obj), given - settings_read_by(part))


def test_every_rendered_object_validates_against_the_kubernetes_schema(
    manifests: list[dict[str, Any]],
) -> None:
    """Strict: an unknown or misspelt field (`readinessProbe.httpget`) fails, as `kubectl apply` would."""
    version = kubernetes_validate.latest_version()
    for obj in manifests:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{_key(obj)} is not a valid Kubernetes {version} object: {exc.message} at {list(exc.path)}"
            )


def test_every_vramdoc_image_the_deployments_name_is_one_build_local_builds(
    manifests: list[dict[str, Any]], compose: dict[str, Any], repo_root: Path
) -> None:
    script = (repo_root / "docker" / "build-local").read_text(encoding="utf-8")
    built = set(
        re.search(r"parts=\(([^)]*)\)", script.split("[ ${#parts[@]} -gt 0 ] ||", 1)[1]).group(1).split()
    )
    assert built == set(PARTS)
    named = {c["image"] for _, c in _containers(manifests)} | {
        s["image"] for s in compose["services"].values()
    }
    ours = {name for name in named if name.startswith("vramdoc/")}
    assert ours, "no vramdoc image named"
    for name in ours:
        assert name.split(":")[0].removeprefix("vramdoc/") in built, name
