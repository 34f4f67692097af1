"""The direct read of binary-mode CloudEvents agrees with the CloudEvents SDK's.

web.binary_attributes reads Knative's binary-mode events straight from the WSGI environ; for
every request it accepts, its attributes must be exactly the SDK's `from_http` ones (the SDK
invents a `time` when none is sent: only its presence is compared then). Anything it declines
goes through the SDK as before.
"""

from __future__ import annotations

from cloudevents.http import from_http
from hypothesis import given, settings
from hypothesis import strategies as st
from werkzeug.datastructures import EnvironHeaders

from podsweeper.web import binary_attributes
from tests.fixtures import builders as b
from tests.support.harness.served import binary_headers

NAMES = [
    "specversion",
    "id",
    "source",
    "type",
    "subject",
    "time",
    "kind",
    "name",
    "namespace",
    "apiversion",
    "data",
    "datacontenttype",
    "extensions",
    "Id",
    "foo_bar",
    "foo-bar",
    "x1",
]
VALUES = [
    "1.0",
    "0.3",
    "",
    "abc",
    "dev.knative.apiserver.resource.update",
    "2026-01-01T00:00:00Z",
    " x ",
    "ü",
]


def environ(headers: dict[str, str]) -> dict[str, str]:
    env = {"REQUEST_METHOD": "POST", "PATH_INFO": "/"}
    for name, value in headers.items():
        key = name.upper().replace("-", "_")
        env[key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"] = value
    return env


def sdk(env: dict[str, str]) -> dict | None:
    try:
        return from_http(dict(EnvironHeaders(env)), b"{}", data_unmarshaller=lambda x: x).get_attributes()
    except Exception:  # noqa: BLE001 - any refusal: the direct read must have declined too
        return None


def agree(env: dict[str, str]) -> None:
    direct = binary_attributes(env)
    if direct is None:
        return
    expected = sdk(env)
    assert expected is not None, f"accepted what the SDK refuses: {env}"
    if not any(k == "HTTP_CE_TIME" for k in env):
        assert "time" in direct and "time" in expected
        direct, expected = dict(direct), dict(expected)
        direct.pop("time"), expected.pop("time")
    assert direct == dict(expected)


def test_knatives_own_events_are_read_directly_and_alike():
    pod = b.pod(b.job("PyTorchJob", "j", "ns"), "Worker", 0)
    for raw in (b.event("update", pod, b.at(1)), b.ping(b.at(2))):
        env = environ(binary_headers(raw))
        assert binary_attributes(env) is not None
        agree(env)


def test_structured_mode_is_left_to_the_sdk():
    env = environ(
        {
            "Content-Type": "application/cloudevents+json",
            "ce-specversion": "1.0",
            "ce-id": "1",
            "ce-source": "s",
            "ce-type": "t",
        }
    )
    assert binary_attributes(env) is None


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=10),
    st.sampled_from([None, "application/json", "text/plain", "APPLICATION/CLOUDEVENTS+JSON"]),
    st.booleans(),
)
def test_any_header_set_is_read_as_the_sdk_reads_it(attributes, content_type, complete):
    headers = {"ce-specversion": "1.0", "ce-id": "i", "ce-source": "s", "ce-type": "t"} if complete else {}
    headers |= {f"ce-{name}": value for name, value in attributes.items()}
    if content_type:
        headers["Content-Type"] = content_type
    agree(environ(headers))
