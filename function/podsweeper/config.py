"""Configuration from PODSWEEPER_* environment variables (pydantic-settings).

Invalid values fail the start with a message naming the variable, so a typo in a
Knative Service manifest shows up as a crash-looping revision, not as silent deletes.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import lru_cache
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from podsweeper.errors import ConfigError

ENV_PREFIX = "PODSWEEPER_"


_NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class AuthMode(StrEnum):
    """Who may send events (PODSWEEPER_AUTH): docs/deploy.md, Sender identity."""

    OIDC = "oidc"  # a bearer token of one of the allowed sources, for the audience, is required
    NONE = "none"  # anyone who reaches the function (a cluster without Eventing's authentication-oidc)


# The identities Knative Eventing (authentication-oidc) gives the shipped sources: one
# ServiceAccount per source, named <source>-oidc-<group>-<kind> (knative.dev/eventing
# pkg/auth.GetOIDCServiceAccountNameForResource), in the source's namespace.
SHIPPED_SENDERS = (
    "system:serviceaccount:podsweeper:podsweeper-oidc-sources.knative.dev-apiserversource",
    "system:serviceaccount:podsweeper:podsweeper-sweep-oidc-sources.knative.dev-pingsource",
)
# The sources' sink.audience in knative/source/ and the chart.
SHIPPED_AUDIENCE = "podsweeper.dev/function"


class CrashLoopAction(StrEnum):
    """What rule crash-loop does (PODSWEEPER_CRASHLOOP_ACTION)."""

    WARN = "warn"
    SUSPEND = "suspend"  # spec.runPolicy.suspend: the operator removes the pods, the job stays
    DELETE = "delete"  # futile against an operator: it recreates the pod at once


@lru_cache(maxsize=64)  # settings are frozen: each list is split once, not on every check
def _split(value: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


class Settings(BaseSettings):
    """Every knob, with its default (docs/configuration.md lists them)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore")

    namespaces: str = Field("", description="comma list of namespaces to act in; empty = all")
    exclude_namespaces: str = Field("kube-system", description="comma list never acted in")

    @field_validator("namespaces", "exclude_namespaces", "evidence_logs_exclude_namespaces")
    @classmethod
    def _namespace_names(cls, value: str) -> str:
        """A name no namespace can have would make every sweep fail: refuse it at start."""
        bad = sorted(n for n in _split(value) if not _NAMESPACE_NAME.fullmatch(n))
        if bad:
            raise ValueError(f"not a namespace name: {', '.join(bad)[:200]}")
        return value

    # On unless said otherwise: a person trying it, or a function served from a checkout, must
    # not delete by surprise. The manifests set it; `podsweeper sweep --live` turns it off.
    dry_run: bool = Field(True, description="decide and report, delete nothing (false: act)")
    sweep_active_pods: bool = Field(True, description="rule finished-job-active-pod on/off")
    orphan_grace_seconds: int = Field(30, ge=0, description="minimum pod age for rule orphan")
    operator_grace_seconds: int = Field(
        30,
        ge=0,
        description="how long a finished job's operator has to delete the pods its cleanPodPolicy names",
    )
    stuck_terminating_seconds: int | None = Field(
        None,
        ge=1,
        description="rule stuck-terminating (opt-in): force-delete a training pod terminating this long "
        "on a NotReady/Unknown or vanished node; unset = off",
    )
    trainjob_ttl_seconds: int = Field(
        0,
        ge=0,
        description="rule expired-trainjob (opt-in): delete a finished TrainJob this long after its finish "
        "condition; 0 = off",
    )
    trainjob_ttl_min_seconds: int = Field(
        600,
        ge=0,
        description="shortest TrainJob TTL a namespace annotation or a job's annotation may ask for",
    )
    crashloop_restarts: int = Field(5, ge=1, description="restartCount that makes a crash loop")
    crashloop_action: CrashLoopAction = Field(CrashLoopAction.WARN, description="rule crash-loop action")
    max_deletes_per_event: int = Field(
        100, ge=1, description="deletes per event where no job declares a size (orphans, a sweep's total)"
    )
    delete_concurrency: int = Field(16, ge=1, le=256, description="deletes of one pass in flight at once")
    kube_api_qps: float = Field(100.0, gt=0, description="client-side rate limit on API requests, per second")
    kube_api_burst: int = Field(600, ge=1, description="requests allowed at once above the sustained rate")
    record_key_secret: str = Field(
        "podsweeper/podsweeper-record-key",
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$",
        description="namespace/name of the Secret holding the key podsweeper signs its finish records with "
        "(made on first use; only podsweeper's install may read it)",
    )
    event_timeout_seconds: float = Field(10.0, gt=0, le=300, description="time bound per event")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="largest request body accepted")
    evidence: bool = Field(True, description="keep failures' evidence in a store per job")
    evidence_log_lines: int = Field(
        20, ge=0, le=1000, description="last log lines kept per failed container run; 0 = no logs"
    )
    evidence_logs_exclude_namespaces: str = Field(
        "", description="comma list of namespaces whose container logs are never read"
    )
    # Namespace policy (podsweeper.policy): what a Namespace's podsweeper.dev/ annotations may
    # change there, and how far. A namespace may always make podsweeper safer; bolder only
    # where these allow it (docs/configuration.md#namespace-policy).
    namespace_policy: bool = Field(True, description="read podsweeper.dev/ annotations on Namespaces")
    namespace_live_allowed: bool = Field(
        False, description="a namespace may set podsweeper.dev/mode: live under PODSWEEPER_DRY_RUN"
    )
    namespace_crashloop_actions: str = Field(
        "", description="comma list of crash-loop actions a namespace may choose beyond the global one"
    )
    namespace_min_grace_seconds: int | None = Field(
        None, ge=0, description="shortest grace a namespace may set; unset = none shorter than the global"
    )
    namespace_max_grace_seconds: int = Field(
        7 * 24 * 3600, ge=0, description="longest grace a namespace may set"
    )
    namespace_cache_seconds: float = Field(
        30.0, ge=0, le=3600, description="how long a Namespace's annotations read are used before re-reading"
    )

    @field_validator("namespace_crashloop_actions")
    @classmethod
    def _crashloop_actions(cls, value: str) -> str:
        bad = sorted(a for a in _split(value) if a not in {str(m) for m in CrashLoopAction})
        if bad:
            raise ValueError(f"not a crash-loop action: {', '.join(bad)[:200]} (warn, suspend or delete)")
        return value

    # Decisions out as CloudEvents (podsweeper.notify), when K_SINK names a sink.
    notify_queue: int = Field(1000, ge=1, le=100_000, description="CloudEvents waiting to be sent, at most")
    notify_attempts: int = Field(
        4, ge=1, le=20, description="tries per CloudEvent before it counts as failed"
    )
    notify_timeout_seconds: float = Field(2.0, gt=0, le=60, description="time bound of one POST to the sink")
    notify_source: str = Field(
        "podsweeper.dev/podsweeper", min_length=1, max_length=200, description="the CloudEvents' source"
    )
    # Who may send events (podsweeper.auth), and how often a sweep may run (podsweeper.service).
    auth: AuthMode = Field(AuthMode.OIDC, description="oidc: only the allowed sources' tokens; none: anyone")
    auth_audience: str = Field(
        SHIPPED_AUDIENCE, min_length=1, max_length=300, description="the audience a sender's token must name"
    )
    auth_subjects: str = Field(
        ",".join(SHIPPED_SENDERS), description="comma list of the token subjects allowed to send events"
    )
    auth_issuer: str = Field(
        "",
        max_length=500,
        description="the tokens' issuer; empty = the API server's own (its OIDC discovery)",
    )
    auth_keys_refresh_seconds: float = Field(
        30.0, ge=1, le=3600, description="a token with an unknown key id re-reads the keys at most this often"
    )
    sweep_min_interval_seconds: float = Field(
        60.0, ge=0, le=86400, description="shortest time between two sweeps' starts in one instance"
    )
    gpu_resources: str = Field(
        "nvidia.com/gpu,amd.com/gpu,gpu.intel.com/i915,gpu.intel.com/xe,habana.ai/gaudi",
        description="comma list of the extended resources counted as GPUs in the metrics",
    )

    @field_validator("auth_subjects")
    @classmethod
    def _subjects(cls, value: str) -> str:
        """No allowed sender at all would refuse every event: refuse it at start instead."""
        if not _split(value):
            raise ValueError("no subject: name the allowed senders, or set PODSWEEPER_AUTH=none")
        return value

    @property
    def auth_subject_set(self) -> frozenset[str]:
        return _split(self.auth_subjects)

    @property
    def namespace_set(self) -> frozenset[str]:
        return _split(self.namespaces)

    @property
    def evidence_logs_excluded(self) -> frozenset[str]:
        return _split(self.evidence_logs_exclude_namespaces)

    @property
    def gpu_resource_names(self) -> frozenset[str]:
        return _split(self.gpu_resources)

    @property
    def namespace_crashloop_action_set(self) -> frozenset[str]:
        return _split(self.namespace_crashloop_actions)

    @property
    def excluded_namespace_set(self) -> frozenset[str]:
        return _split(self.exclude_namespaces)

    def namespace_allowed(self, namespace: str) -> bool:
        if namespace in self.excluded_namespace_set:
            return False
        allowed = self.namespace_set
        return not allowed or namespace in allowed


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment (plus overrides); ConfigError names the variable."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        problems = "; ".join(
            f"{ENV_PREFIX}{str(e['loc'][0]).upper()}: {e['msg']} (got {e.get('input')!r})"
            for e in error.errors()
        )
        raise ConfigError(f"invalid configuration: {problems}") from None
