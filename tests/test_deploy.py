"""deploy/kubernetes: the manifests parse, fit together, and every metric name they give
the endpoint picker is one that Juggler's /metrics serves (issue 12: "A test parses the
manifests and checks that every metric name they reference is one `/metrics` serves")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from juggler.router.gateway.metrics import MetricsView, exposition

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"


def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == kind]


def served_names() -> set[str]:
    text = exposition(MetricsView()).decode()
    names: set[str] = set()
    for fam in text_string_to_metric_families(text):
        names.add(fam.name)
        names.update(s.name for s in fam.samples)
    return names


def test_manifests_fit_together() -> None:
    (juggler,) = [d for d in by_kind("Deployment") if d["metadata"]["name"] == "juggler"]
    pod = juggler["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/live"
    port = container["ports"][0]["containerPort"]
    (pool,) = by_kind("InferencePool")
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pool["spec"]["targetPorts"] == [{"number": port}]
    epp_name = pool["spec"]["endpointPickerRef"]["name"]
    assert any(s["metadata"]["name"] == epp_name for s in by_kind("Service"))
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > 30, "longer than the default drain_timeout"


def test_every_metric_the_picker_is_told_about_is_served() -> None:
    (epp,) = [d for d in by_kind("Deployment") if d["metadata"]["name"] == "juggler-epp"]
    args: list[str] = epp["spec"]["template"]["spec"]["containers"][0]["args"]
    named = [a.split("=", 1)[1] for a in args if re.match(r"--[a-z-]+-metric=", a)]
    assert len(named) == 5
    served = served_names()
    missing = [n for n in named if n.split("{")[0] not in served]
    assert missing == [], f"named but not served: {missing}"
