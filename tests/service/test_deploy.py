"""deploy/: the compose file parses and names what the replicas need (no docker here): Postgres, two
chinwag replicas with the DSN in their environment, a proxy whose upstreams are both replicas on the
port chinwag's config listens on; and that config loads with chinwag's own loader, on Postgres."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from gateway.config.load import load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
REPLICAS = ("chinwag-1", "chinwag-2")


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_names_postgres_two_replicas_and_a_proxy() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", *REPLICAS, "proxy"}
    assert services["postgres"]["image"].startswith("postgres:")
    extras = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert services["chinwag-1"]["build"]["args"]["EXTRAS"] in extras  # the image gets psycopg
    # built once: the second replica runs the first one's image
    assert "build" not in services["chinwag-2"] and services["chinwag-2"]["pull_policy"] == "never"
    assert services["chinwag-2"]["image"] == services["chinwag-1"]["image"]
    for name in REPLICAS:
        replica = services[name]
        assert "host=postgres " in replica["environment"]["CHINWAG_PG_DSN"]
        assert "password='${POSTGRES_PASSWORD}'" in replica["environment"]["CHINWAG_PG_DSN"]  # a space stays inside
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "/readyz" in " ".join(replica["healthcheck"]["test"])
        assert "./config.yaml:/data/config.yaml:ro" in replica["volumes"]
    assert "ARG EXTRAS" in (DEPLOY.parent / "Dockerfile").read_text()


def test_the_proxy_spreads_webhooks_over_both_replicas() -> None:
    nginx = (DEPLOY / "nginx.conf").read_text()
    upstreams = re.findall(r"^\s*server\s+([\w-]+):(\d+)", nginx, re.MULTILINE)
    port = yaml.safe_load((DEPLOY / "config.yaml").read_text())["http"]["port"]
    assert sorted(upstreams) == [(name, str(port)) for name in REPLICAS]
    assert "location /webhooks/" in nginx and "proxy_next_upstream" in nginx
    webhooks = nginx[nginx.index("location /webhooks/") :].split("}")[0]
    assert "non_idempotent" in webhooks  # a webhook is a POST: without it nginx never fails one over
    readyz = nginx[nginx.index("location = /readyz") :].split("}")[0]
    assert "deny all" in readyz  # its JSON names database errors: not for the public port
    assert "console/" in nginx and "api/v1/" in nginx  # the console, with its token, through the proxy
    proxy = compose()["services"]["proxy"]
    assert "./nginx.conf:/etc/nginx/conf.d/default.conf:ro" in proxy["volumes"]


def test_the_replicas_config_loads_on_postgres_from_their_environment(tmp_path: Path) -> None:
    text = (DEPLOY / "config.yaml").read_text()
    environment = compose()["services"]["chinwag-1"]["environment"]
    wanted = set(re.findall(r"\$\{(\w+)", text))
    assert wanted <= set(environment), f"config.yaml reads {sorted(wanted - set(environment))}, compose sets none"
    env = dict.fromkeys(environment, "x") | {
        "CHINWAG_PG_DSN": "host=postgres dbname=chinwag user=chinwag",
        "TELEGRAM_BOT_TOKEN": "123:abc",
        "TELEGRAM_WEBHOOK_SECRET": "s3cret_value",
        "CHINWAG_WEBHOOK_URL": "https://bot.example.com/webhooks/telegram",
    }
    config = load_config(DEPLOY / "config.yaml", tmp_path, env=env)
    assert config.storage.backend == "postgres"
    assert config.storage.postgres_dsn == "host=postgres dbname=chinwag user=chinwag"
    assert config.http.host == "0.0.0.0"
    assert config.configured_platforms() == ["telegram"]


def test_the_image_context_leaves_out_virtualenvs_and_secrets() -> None:
    ignored = (DEPLOY.parent / ".dockerignore").read_text().split()
    assert {".venv", "deploy/.env"} <= set(ignored)


def test_the_base_image_is_a_build_argument_defaulting_to_python_slim() -> None:
    dockerfile = (DEPLOY.parent / "Dockerfile").read_text()
    assert "ARG BASE=python:3.11-slim" in dockerfile and "FROM ${BASE}" in dockerfile
    assert dockerfile.index("ARG BASE") < dockerfile.index("FROM ${BASE}")
