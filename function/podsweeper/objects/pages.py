"""LIST pages, each validated in one pass from the API's bytes, and objects back to bytes.

A page is one validation, not one per item: an item that does not validate is kept raw and
reported (decoded to Python only then), so one bad object never hides the rest of a page.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, ValidationError

from podsweeper import kinds
from podsweeper.errors import BadEvent
from podsweeper.model import Intermediate, Job, Pod
from podsweeper.objects.base import Schema, one_line, validate_json
from podsweeper.objects.intermediates import IntermediateObject, intermediate_from
from podsweeper.objects.jobs import JobObject, job_from
from podsweeper.objects.pods import PodObject, pod_from


def json_bytes(obj: Mapping[str, Any]) -> bytes:
    """An object as the API would send it (for callers that hold one decoded, e.g. a replay line)."""
    return json.dumps(obj, separators=(",", ":")).encode()


def _unreadable(model: type[Any], raw: Any) -> str:
    """Why a LIST item did not validate (rare: only then is the item decoded to Python)."""
    try:
        model.model_validate(raw)
    except ValidationError as error:
        return one_line(error)
    return "not readable"


class _ListMeta(Schema):
    continue_: str | None = Field(default=None, alias="continue")


# A LIST item: the model if it validates, else the raw item (left to right: a valid item is
# never decoded into Python objects; a per-item validator would do that for every item,
# costing 2.5x per page).
PodItem = Annotated[PodObject | Any, Field(union_mode="left_to_right")]
JobItem = Annotated[JobObject | Any, Field(union_mode="left_to_right")]
IntermediateItem = Annotated[IntermediateObject | Any, Field(union_mode="left_to_right")]


class PodList(Schema):
    """A page of a pod LIST, validated in one pass from the API's bytes."""

    items: list[PodItem] | None = None
    metadata: _ListMeta | None = None


class JobList(Schema):
    """A page of a training-job LIST, validated in one pass from the API's bytes."""

    items: list[JobItem] | None = None
    metadata: _ListMeta | None = None


class IntermediateList(Schema):
    items: list[IntermediateItem] | None = None
    metadata: _ListMeta | None = None


def parse_pod_page(body: bytes) -> tuple[list[Pod], list[str], str | None]:
    """Pods of one LIST page, why any item was unreadable, and the continue token."""
    page = validate_json(PodList, body or b"{}", "pod list")
    pods, unreadable = [], []
    for item in page.items or ():
        if isinstance(item, PodObject):
            pods.append(pod_from(item))
        else:
            unreadable.append(f"pod invalid: {_unreadable(PodObject, item)}")
    return pods, unreadable, page.metadata.continue_ if page.metadata else None


def parse_job_page(body: bytes) -> tuple[list[Job], list[str], str | None]:
    """Jobs of one LIST page, why any item was unreadable, and the continue token."""
    page = validate_json(JobList, body or b"{}", "job list")
    jobs, unreadable = [], []
    for item in page.items or ():
        try:
            if not isinstance(item, JobObject):
                raise BadEvent(f"job invalid: {_unreadable(JobObject, item)}")
            jobs.append(job_from(item))
        except BadEvent as error:
            unreadable.append(str(error))
    return jobs, unreadable, page.metadata.continue_ if page.metadata else None


def parse_intermediate_page(
    body: bytes, listed: kinds.IntermediateKind | None = None
) -> tuple[list[Intermediate], list[str], str | None]:
    """JobSets or Jobs of one LIST page, why any item was unreadable, and the continue token."""
    page = validate_json(IntermediateList, body or b"{}", "list")
    found, unreadable = [], []
    for item in page.items or ():
        try:
            if not isinstance(item, IntermediateObject):
                raise BadEvent(f"object invalid: {_unreadable(IntermediateObject, item)}")
            found.append(intermediate_from(item, listed))
        except BadEvent as error:
            unreadable.append(str(error))
    return found, unreadable, page.metadata.continue_ if page.metadata else None
