"""The deploy examples: Kubernetes probes that match the health endpoints, a
PodDisruptionBudget, an Ingress that exposes the webhooks alone, and the image's pinned CLI."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml  # PyYAML: with the dev extra (schemathesis needs it)

KUBERNETES = Path(__file__).resolve().parents[2] / "docs" / "deploy" / "kubernetes.yaml"


def manifests() -> dict[str, dict[str, Any]]:
    """The example's objects by kind (one of each)."""
    found: dict[str, dict[str, Any]] = {}
    for document in yaml.safe_load_all(KUBERNETES.read_text(encoding="utf-8")):
        assert document["kind"] not in found, f"two {document['kind']} objects"
        found[document["kind"]] = document
    return found


def _container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container


def test_liveness_does_not_ask_the_database_and_readiness_does() -> None:
    """Liveness probes /health/live (no database); readiness probes /health/ready."""
    container = _container(manifests())
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"


def test_a_disruption_budget_keeps_replicas_working_through_a_drain() -> None:
    """The PodDisruptionBudget selects the Deployment's pods and lets one go at a time."""
    objects = manifests()
    budget = objects["PodDisruptionBudget"]
    pods = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"]["selector"]["matchLabels"].items() <= pods.items()
    assert budget["spec"]["maxUnavailable"] == 1
    assert objects["Deployment"]["spec"]["replicas"] > budget["spec"]["maxUnavailable"]


def test_the_ingress_exposes_only_the_webhook_listener() -> None:
    """The Ingress routes /webhooks/ alone, to the Service port of the container's webhook port."""
    objects = manifests()
    (rule,) = objects["Ingress"]["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["path"] == "/webhooks/" and path["pathType"] == "Prefix"
    backend = path["backend"]["service"]
    assert backend["name"] == objects["Service"]["metadata"]["name"]
    ports = {p["name"]: p for p in objects["Service"]["spec"]["ports"]}
    target = ports[backend["port"]["name"]]["targetPort"]
    container_ports = {p["name"]: p["containerPort"] for p in _container(objects)["ports"]}
    assert container_ports[target] == 8788  # the example's [http] webhook_listen port
    assert container_ports["http"] == 8787


def test_the_tests_install_the_claude_cli_version_the_image_pins() -> None:
    """scripts/install-claude-cli.sh defaults to the Containerfile's CLAUDE_CODE_VERSION."""
    root = Path(__file__).resolve().parents[2]
    image = (root / "docs/deploy/Containerfile").read_text(encoding="utf-8")
    script = (root / "scripts/install-claude-cli.sh").read_text(encoding="utf-8")
    (pinned,) = re.findall(r"^ARG CLAUDE_CODE_VERSION=(\S+)$", image, re.MULTILINE)
    (default,) = re.findall(r"^version=\$\{CLAUDE_CLI_VERSION:-(\S+)\}$", script, re.MULTILINE)
    assert default == pinned


def test_the_systemd_unit_bounds_what_agents_can_take_of_the_host() -> None:
    """Runs have no per-run process or memory limit (docs/security.md): the unit bounds the
    service, so a fork bomb in a repository's tests exhausts the service, not the host."""
    unit = (Path(__file__).resolve().parents[2] / "docs/deploy/afk-pipeline.service").read_text()
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and line[:1].isalpha()
    )
    assert int(settings["TasksMax"]) > 0 and settings["MemoryMax"].endswith("G")
