{{/*
Helpers of the podsweeper chart. The templates render the objects of knative/ (and of its
overlays, chosen by values) field for field: no label, annotation or name of Helm's own is
added, so `helm template` and `kustomize build` give the same objects
(tests/delivery/test_helm.py compares them). Object names are fixed, like knative/'s: the
ClusterRoles are cluster-scoped, so a cluster takes one release of this chart.
*/}}

{{/* The labels of the function's objects (Service/Deployment, its pods, the PDB). */}}
{{- define "podsweeper.functionLabels" -}}
app.kubernetes.io/name: podsweeper
app.kubernetes.io/component: function
{{- end }}

{{/* The labels of the event sources and their identity. */}}
{{- define "podsweeper.sourceLabels" -}}
app.kubernetes.io/name: podsweeper
app.kubernetes.io/component: event-source
{{- end }}

{{/* The image, repository:tag; an empty tag is the chart's appVersion. */}}
{{- define "podsweeper.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* PODSWEEPER_CRASHLOOP_ACTION: suspend with crashLoopSuspend.enabled, else crashLoopAction. */}}
{{- define "podsweeper.crashLoopAction" -}}
{{ if .Values.crashLoopSuspend.enabled }}suspend{{ else }}{{ .Values.crashLoopAction }}{{ end }}
{{- end }}

{{/*
What values.schema.json cannot say: combinations. Included by every template, so a bad
combination fails whichever template is rendered first, with the value's name.
*/}}
{{- define "podsweeper.validate" -}}
{{- if and (eq .Values.crashLoopAction "suspend") (not .Values.crashLoopSuspend.enabled) }}
{{- fail "crashLoopAction: suspend needs the patch permission on the training jobs: set crashLoopSuspend.enabled=true instead (it sets the action and adds ClusterRole podsweeper-suspend)" }}
{{- end }}
{{- if and .Values.crashLoopSuspend.enabled (eq .Values.crashLoopAction "delete") }}
{{- fail "crashLoopSuspend.enabled=true sets the crash-loop action to suspend, but crashLoopAction is delete: keep crashLoopAction warn (or suspend)" }}
{{- end }}
{{- if not (or .Values.watch.trainingOperator .Values.watch.trainerV2 (ne .Values.watch.mpiJob "none")) }}
{{- fail "watch: nothing to watch (watch.trainingOperator false, watch.mpiJob none, watch.trainerV2 false): the ApiServerSource needs at least one generation" }}
{{- end }}
{{- end }}

{{/*
The function's container, shared by the Knative Service (serving: knative) and the Deployment
(serving: deployment): same image, env (dry-run first), probes, resources and security context.
Knative fills in the probes' port itself (and rejects one that differs from the serving port);
the Deployment names it.
*/}}
{{- define "podsweeper.container" -}}
- name: podsweeper
  # Placeholder unless image.repository/image.tag are set: build with the repository's
  # Dockerfile and push to your registry (docs/deploy.md).
  image: {{ include "podsweeper.image" . }}
  ports:
    - name: http1
      containerPort: 8080
  env:
    # Shipped on (dryRun: true): decide and report (JSON logs, Kubernetes Events), delete
    # nothing. First in the list: the knative/ overlays patch it by position.
    - name: PODSWEEPER_DRY_RUN
      value: {{ .Values.dryRun | quote }}
    # Comma-separated list; empty = every namespace.
    - name: PODSWEEPER_NAMESPACES
      value: {{ join "," .Values.namespaces | quote }}
    - name: PODSWEEPER_EXCLUDE_NAMESPACES
      value: {{ join "," .Values.excludeNamespaces | quote }}
    - name: PODSWEEPER_CRASHLOOP_ACTION
      value: {{ include "podsweeper.crashLoopAction" . | quote }}
    - name: PODSWEEPER_MAX_DELETES_PER_EVENT
      value: {{ .Values.maxDeletesPerEvent | int64 | quote }}
    - name: PODSWEEPER_ORPHAN_GRACE_SECONDS
      value: {{ .Values.orphanGraceSeconds | int64 | quote }}
    # functions-framework's gunicorn threads (default 4 x the node's CPUs):
    # containerConcurrency plus room for probes and /metrics.
    - name: THREADS
      value: "12"
    {{- if .Values.stuckTerminating.enabled }}
    # Rule stuck-terminating (stuckTerminating.enabled): seconds past a terminating training
    # pod's grace period, on a NotReady/Unknown/gone node, before it is force-deleted.
    - name: PODSWEEPER_STUCK_TERMINATING_SECONDS
      value: {{ .Values.stuckTerminating.seconds | int64 | quote }}
    {{- end }}
    {{- if .Values.trainjobTTL.enabled }}
    # Rule expired-trainjob (trainjobTTL.enabled): seconds after a TrainJob finished before it
    # is deleted.
    - name: PODSWEEPER_TRAINJOB_TTL_SECONDS
      value: {{ .Values.trainjobTTL.seconds | int64 | quote }}
    {{- end }}
    {{- if not .Values.senderIdentity }}
    # senderIdentity: false: a cluster without Knative Eventing's authentication-oidc.
    - name: PODSWEEPER_AUTH
      value: "none"
    {{- end }}
    {{- if ne .Release.Namespace "podsweeper" }}
    # Sender identity: the sources' OIDC ServiceAccounts are in the release's namespace (the
    # function's default names them in podsweeper; docs/deploy.md, Sender identity).
    - name: PODSWEEPER_AUTH_SUBJECTS
      value: "system:serviceaccount:{{ .Release.Namespace }}:podsweeper-oidc-sources.knative.dev-apiserversource,system:serviceaccount:{{ .Release.Namespace }}:podsweeper-sweep-oidc-sources.knative.dev-pingsource"
    # The finish records' signing key is kept in the release's namespace (Role podsweeper-record-key).
    - name: PODSWEEPER_RECORD_KEY_SECRET
      value: "{{ .Release.Namespace }}/podsweeper-record-key"
    {{- end }}
  resources:
    requests:
      cpu: 50m
      memory: 128Mi
    limits:
      cpu: 500m
      memory: 256Mi
  readinessProbe:
    httpGet:
      path: /healthz
      {{- if eq .Values.serving "deployment" }}
      port: 8080
      {{- end }}
    periodSeconds: 5
    failureThreshold: 3
  livenessProbe:
    httpGet:
      path: /healthz
      {{- if eq .Values.serving "deployment" }}
      port: 8080
      {{- end }}
    periodSeconds: 20
    timeoutSeconds: 5
    failureThreshold: 3
  securityContext:
    runAsNonRoot: true
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    # gunicorn (under functions-framework) needs a writable temp dir for its worker
    # heartbeat file; the root filesystem is read-only.
    - name: tmp
      mountPath: /tmp
{{- end }}

{{/* The volumes of the function's pod. */}}
{{- define "podsweeper.volumes" -}}
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: 16Mi
{{- end }}

{{/* The sink of both sources: the Knative Service, or the v1 Service in front of the Deployment. */}}
{{- define "podsweeper.sink" -}}
ref:
  {{- if eq .Values.serving "knative" }}
  apiVersion: serving.knative.dev/v1
  kind: Service
  {{- else }}
  # Knative resolves a v1 Service to http://podsweeper.<namespace>.svc.cluster.local.
  apiVersion: v1
  kind: Service
  {{- end }}
  name: podsweeper
{{- end }}
