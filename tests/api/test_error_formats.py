"""Error bodies in the format the client's Accept prefers, as Placement (webob) does."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from strato.api.responses import error_media_type


@pytest.mark.parametrize(("accept", "media"), [
    (None, "application/json"),
    ("*/*", "application/json"),
    ("application/json", "application/json"),
    ("text/html", "text/html"),
    ("text/plain", "text/plain"),
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "text/html"),
    ("application/json;q=0.5,text/html;q=0.4", "application/json"),
    # webob offers HTML and JSON only (in that order on a tie), and plain
    # text when neither is acceptable.
    ("text/*", "text/html"),
    ("*/*;q=0.5", "text/html"),
    ("text/plain,text/html;q=0.1", "text/html"),
    ("text/plain,application/*;q=0.1", "application/json"),
    ("image/png", "text/plain"),
    # Not RFC 7231's grammar (a q that is no qvalue, a range without a '/'):
    # webob disregards such a header and offers its first format, HTML.
    ("application/json;q=abc", "text/html"),
    ("json", "text/html"),
])
def test_error_media_type(accept: str | None, media: str) -> None:
    assert error_media_type(accept) == media


def test_html_error_page(client: TestClient) -> None:
    got = client.get("/no-such-thing", headers={"accept": "text/html", "x-auth-token": "admin"})
    assert got.status_code == 404
    assert got.headers["content-type"].startswith("text/html")
    assert "404 Not Found" in got.text and "The resource could not be found" in got.text


@pytest.mark.parametrize("accept", ["application/json;q=abc", "application/json;q=2", "json",
                                    "application/json;q=0.5;x=\"unclosed"])
def test_an_accept_header_out_of_grammar_is_disregarded(client: TestClient, accept: str) -> None:
    # Placement asks webob, which reads a header it cannot parse as no header:
    # the GET is served (JSON), where a 406 would refuse what Placement answers.
    got = client.get("/resource_providers", headers={"accept": accept})
    assert got.status_code == 200
    assert got.json() == {"resource_providers": []}


def test_stratos_own_api_says_its_error_codes_without_a_version_header(
        client: TestClient) -> None:
    """Placement's routes carry `code` from 1.23 on only; Strato's own API
    always does (its clients, `curl` and `strato schedule` among them, send
    no microversion, and tell an outage from a full cloud by the code)."""
    r = client.post("/strato/v1/schedule", headers={"openstack-api-version": "placement 1.0"},
                    json={"consumers": [str(uuid.uuid4())], "project_id": "p",
                          "user_id": "u", "groups": [{"resources": {"VCPU": 1}}]})
    assert r.status_code == 409, r.text
    assert r.json()["errors"][0]["code"] == "strato.no_valid_placement"
    r = client.get("/resource_providers/" + str(uuid.uuid4()),
                   headers={"openstack-api-version": "placement 1.0"})
    assert r.status_code == 404 and "code" not in r.json()["errors"][0]
