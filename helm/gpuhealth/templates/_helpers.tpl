{{/* Chart name, shortened to fit a DNS label. */}}
{{- define "gpuhealth.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: the release name, plus the chart name unless it already has it. */}}
{{- define "gpuhealth.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels that select the agent pods; never change them on an upgrade (DaemonSet selectors are immutable). */}}
{{- define "gpuhealth.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuhealth.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{/* Labels on every object of the chart. */}}
{{- define "gpuhealth.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpuhealth.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuhealth
{{- end }}

{{/* The agent's service account name. */}}
{{- define "gpuhealth.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpuhealth.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The username the API server gives the agent's service account (what the admission policy matches). */}}
{{- define "gpuhealth.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpuhealth.serviceAccountName" .) }}
{{- end }}

{{/* Container image reference. */}}
{{- define "gpuhealth.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Which kernel-log source the agent follows: "" when the follower is off, else kmsg or journal. */}}
{{- define "gpuhealth.kernelLogSource" -}}
{{- $kl := .Values.config.kernel_log | default dict }}
{{- if $kl.enabled }}
{{- default "kmsg" $kl.source }}
{{- end }}
{{- end }}

{{/* The agent's configuration file: the values' `config` plus what the pod spec fixes (state dir, HTTP port). */}}
{{- define "gpuhealth.configFile" -}}
{{- $fixed := dict "state_dir" "/var/lib/gpuhealth" "http" (dict "enabled" true "host" "0.0.0.0" "port" (int .Values.metricsPort)) }}
{{- $config := merge $fixed (deepCopy .Values.config) }}
{{- if .Values.recovery.enabled }}
{{- $recovery := merge (dict "enabled" true "reboot" (dict "sentinel_path" (include "gpuhealth.rebootSentinel" .))) (deepCopy .Values.recovery.config) }}
{{- $_ := set $config "recovery" $recovery }}
{{- end }}
{{- include "gpuhealth.drainConfig" (list . $config) }}
{{- include "gpuhealth.gpuQuarantineConfig" (list . $config) }}
{{- include "gpuhealth.featureConfig" (list . $config) }}
{{- if .Values.profiles.definitions }}
{{- $_ := set $config "profiles" (deepCopy .Values.profiles) }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
Drain and requeue (docs/drain.md, docs/requeue.md), added to the config dict passed in. drain.enabled turns
the agent's policy.drain on. With drain.by aggregator (the default) the agent only orders the drain of its
node from the aggregator, whose remediator drains and requeues with the drain and requeue settings below
(gpuhealth.remediatorConfig); with drain.by agent the agent does it itself and gets them (and the RBAC).
*/}}
{{- define "gpuhealth.drainConfig" -}}
{{- $root := index . 0 }}
{{- $config := index . 1 }}
{{- $v := $root.Values }}
{{- if $v.drain.enabled }}
{{- $policy := get $config "policy" | default dict }}
{{- $_ := set $policy "drain" true }}
{{- $_ = set $policy "drain_deadline_s" $v.drain.deadlineSeconds }}
{{- $_ = set $config "policy" $policy }}
{{- $_ = set $config "drain_by" $v.drain.by }}
{{- end }}
{{- if include "gpuhealth.agentDrains" $root }}
{{- $_ := set $config "drain" (include "gpuhealth.drainSettings" $root | fromYaml) }}
{{- end }}
{{- if or (include "gpuhealth.agentDrains" $root) (and $v.requeue.enabled (ne $v.drain.by "aggregator")) }}
{{- $_ := set $config "requeue" (include "gpuhealth.requeueSettings" $root | fromYaml) }}
{{- end }}
{{- end }}

{{/* Whether the agents drain and requeue themselves (drain.by agent): the agent's RBAC then grows by it. */}}
{{- define "gpuhealth.agentDrains" -}}
{{- if and .Values.drain.enabled (eq .Values.drain.by "agent") }}true{{ end }}
{{- end }}

{{/* Whether this release's aggregator runs the central remediator (drain.by aggregator, the default). */}}
{{- define "gpuhealth.centralDrain" -}}
{{- if and .Values.drain.enabled (eq .Values.drain.by "aggregator") .Values.aggregator.enabled }}true{{ end }}
{{- end }}

{{/* The drain settings (agent or remediator): the values' drain.config; this release's agent pods stay. */}}
{{- define "gpuhealth.drainSettings" -}}
{{- $own := dict "agent_namespace" .Release.Namespace "agent_labels" (include "gpuhealth.selectorLabels" . | fromYaml) }}
{{- toYaml (merge $own (deepCopy .Values.drain.config)) }}
{{- end }}

{{/* The requeue modes mirror the requeue grants: a kind that may be patched is auto, any other evict-only. */}}
{{- define "gpuhealth.requeueSettings" -}}
{{- $rq := .Values.requeue }}
{{- $modes := dict }}
{{- range $kind, $value := dict "job" true "jobset" $rq.jobset "trainjob" $rq.trainjob "pytorchjob" $rq.pytorchjob "volcano_job" $rq.volcano "kueue" $rq.kueue }}
{{- $_ := set $modes $kind (ternary "auto" "evict-only" (and $rq.enabled $value)) }}
{{- end }}
{{- toYaml (merge $modes (deepCopy $rq.config)) }}
{{- end }}

{{/*
The central remediator's settings in the aggregator's file. One replica keeps one stable name, so a
restarted pod resumes its drains at once; several replicas (PostgreSQL) each use their pod name and take
over a lapsed lease.
*/}}
{{- define "gpuhealth.remediatorConfig" -}}
{{- $name := ternary (include "gpuhealth.aggregator.fullname" .) "" (eq (int .Values.aggregator.replicas) 1) }}
{{- $remediator := dict "orchestrator" "kubernetes" "name" $name }}
{{- $_ := set $remediator "drain" (include "gpuhealth.drainSettings" . | fromYaml) }}
{{- $_ = set $remediator "requeue" (include "gpuhealth.requeueSettings" . | fromYaml) }}
{{- toYaml $remediator }}
{{- end }}

{{/*
RBAC of a drain (the agent's with drain.by agent, else the aggregator's): evict pods, check the DaemonSets and
budgets involved; then the requeue of training jobs, each kind only when enabled (docs/requeue.md).
*/}}
{{- define "gpuhealth.drainRules" -}}
- apiGroups: [""]
  resources: ["pods/eviction"]
  verbs: ["create"]
- apiGroups: ["apps"]
  resources: ["daemonsets"]
  verbs: ["get"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list"]
{{- with .Values.requeue }}
{{- if .enabled }}
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get"]
{{- if .jobset }}
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get", "patch"]
{{- end }}
{{- if .trainjob }}
- apiGroups: ["trainer.kubeflow.org"]
  resources: ["trainjobs"]
  verbs: ["get", "patch"]
{{- if not .jobset }}
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get"]
{{- end }}
{{- end }}
{{- if .pytorchjob }}
- apiGroups: ["kubeflow.org"]
  resources: ["pytorchjobs"]
  verbs: ["get", "patch"]
{{- end }}
{{- if .volcano }}
- apiGroups: ["batch.volcano.sh"]
  resources: ["jobs"]
  verbs: ["get", "patch"]
- apiGroups: ["bus.volcano.sh"]
  resources: ["commands"]
  verbs: ["create"]
{{- end }}
{{- if .kueue }}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list", "patch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["patch"]
{{- if not .jobset }}
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get", "patch"]
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Per-GPU quarantine and the partial drain (docs/gpu-quarantine.md), added to the config dict passed in: the
agent's policy and where it reads the DRA driver's devices and the kubelet's PodResources socket.
*/}}
{{- define "gpuhealth.gpuQuarantineConfig" -}}
{{- $root := index . 0 }}
{{- $config := index . 1 }}
{{- $q := $root.Values.gpuQuarantine }}
{{- if or (ne $q.deviceTaint "off") $q.partialDrain }}
{{- $policy := get $config "policy" | default dict }}
{{- $_ := set $policy "gpu_quarantine" $q.deviceTaint }}
{{- $_ = set $policy "gpu_taint_effect" $q.effect }}
{{- $_ = set $policy "node_taint_after_s" $q.nodeTaintAfterSeconds }}
{{- $_ = set $policy "partial_drain" $q.partialDrain }}
{{- $_ = set $config "policy" $policy }}
{{- $kube := get $config "kubernetes" | default dict }}
{{- $_ = set $kube "dra_driver" $q.draDriver }}
{{- if $q.partialDrain }}
{{- $_ = set $kube "pod_resources_socket" (printf "%s/kubelet.sock" (trimSuffix "/" $q.podResourcesDir)) }}
{{- end }}
{{- $_ = set $config "kubernetes" $kube }}
{{- end }}
{{- end }}

{{/* Whether the agent reads the node's DRA devices: for device taints, or to place a partial drain's pods. */}}
{{- define "gpuhealth.readsDra" -}}
{{- if or (ne .Values.gpuQuarantine.deviceTaint "off") (and .Values.gpuQuarantine.partialDrain (include "gpuhealth.agentDrains" .)) }}true{{- end }}
{{- end }}

{{/*
Aggregator, DCGM and diagnostics, added to the config dict passed in. The aggregator's token is never here
(a projected ServiceAccount token file, or an env var from its Secret); an exporter URL left empty comes from the env var set in daemonset.yaml.
Diagnostics off means off: neither scheduled nor on-demand runs (the agent's default allows on-demand).
*/}}
{{- define "gpuhealth.featureConfig" -}}
{{- $root := index . 0 }}
{{- $config := index . 1 }}
{{- $v := $root.Values }}
{{- $aggregatorUrl := include "gpuhealth.aggregatorUrl" $root }}
{{- if $aggregatorUrl }}
{{- $link := dict "url" $aggregatorUrl }}
{{- $identity := include "gpuhealth.agentIdentityDir" $root }}
{{- if include "gpuhealth.aggregator.agentsUseServiceAccountToken" $root }}
{{- $_ := set $link "token_file" (printf "%s/token" $identity) }}
{{- end }}
{{- if include "gpuhealth.aggregator.agentCA" $root }}
{{- $_ := set $link "ca_file" (printf "%s/ca.crt" $identity) }}
{{- end }}
{{- $_ := set $config "aggregator" (merge $link (deepCopy $v.aggregator.config)) }}
{{- end }}
{{- $exporter := dict "enabled" $v.dcgm.exporter.enabled }}
{{- if $v.dcgm.exporter.url }}
{{- $_ := set $exporter "url" $v.dcgm.exporter.url }}
{{- end }}
{{- $dcgmi := dict "enabled" $v.dcgm.dcgmi.enabled "path" $v.dcgm.dcgmi.path }}
{{- $_ := set $config "dcgm" (dict "exporter" $exporter "dcgmi" $dcgmi) }}
{{- if $v.diagnostics.enabled }}
{{- $_ = set $config "diagnostics" (merge (dict "enabled" $v.diagnostics.scheduled) (deepCopy $v.diagnostics.config)) }}
{{- else }}
{{- $_ = set $config "diagnostics" (dict "enabled" false "on_demand" false) }}
{{- end }}
{{- end }}

{{/* Whether the agent's exporter URL comes from the node IP (an env var) rather than the config file. */}}
{{- define "gpuhealth.exporterFromNodeIP" -}}
{{- if and .Values.dcgm.exporter.enabled (not .Values.dcgm.exporter.url) }}true{{ end }}
{{- end }}

{{/* Whether the agents have an aggregator: this release's, aggregator.url, or GPUHEALTH_AGGREGATOR__URL in extraEnv. */}}
{{- define "gpuhealth.hasAggregator" -}}
{{- if include "gpuhealth.aggregatorUrl" . }}true{{ end }}
{{- range .Values.extraEnv }}
{{- if eq .name "GPUHEALTH_AGGREGATOR__URL" }}true{{ end }}
{{- end }}
{{- end }}

{{/*
Values that contradict each other fail the render with one line, before anything is applied. (A drain
without an aggregator is not among them: it is safe, the agent just never gets a permit; NOTES warns.)
*/}}
{{- define "gpuhealth.checkValues" -}}
{{- $v := .Values }}
{{- $policy := $v.config.policy | default dict }}
{{- if and (hasKey $policy "drain") (ne (toString $policy.drain) (toString $v.drain.enabled)) }}
{{- fail (printf "config.policy.drain is %v but drain.enabled is %v: set drain.enabled only (it also grants the drain's RBAC)" $policy.drain $v.drain.enabled) }}
{{- end }}
{{- if and (hasKey $policy "drain_deadline_s") (ne (float64 $policy.drain_deadline_s) (float64 $v.drain.deadlineSeconds)) }}
{{- fail (printf "config.policy.drain_deadline_s (%v) contradicts drain.deadlineSeconds (%v): set drain.deadlineSeconds only" $policy.drain_deadline_s $v.drain.deadlineSeconds) }}
{{- end }}
{{- if and (hasKey $policy "gpu_quarantine") (ne (toString $policy.gpu_quarantine) (toString $v.gpuQuarantine.deviceTaint)) }}
{{- fail (printf "config.policy.gpu_quarantine is %v but gpuQuarantine.deviceTaint is %v: set gpuQuarantine.deviceTaint only (it also grants the device-taint RBAC)" $policy.gpu_quarantine $v.gpuQuarantine.deviceTaint) }}
{{- end }}
{{- if and (hasKey $policy "partial_drain") (ne (toString $policy.partial_drain) (toString $v.gpuQuarantine.partialDrain)) }}
{{- fail (printf "config.policy.partial_drain is %v but gpuQuarantine.partialDrain is %v: set gpuQuarantine.partialDrain only (it also mounts the PodResources socket)" $policy.partial_drain $v.gpuQuarantine.partialDrain) }}
{{- end }}
{{- if not $v.requeue.enabled }}
{{- range $kind := list "jobset" "trainjob" "pytorchjob" "volcano" "kueue" }}
{{- if index $v.requeue $kind }}
{{- fail (printf "requeue.%s needs requeue.enabled: without it nothing is granted and the kind is only evicted" $kind) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $v.aggregator.tokenSecret.name (not (include "gpuhealth.aggregatorUrl" .)) }}
{{- fail "aggregator.tokenSecret.name is set but there is no aggregator (aggregator.enabled is false and aggregator.url is empty): a token for no aggregator" }}
{{- end }}
{{- include "gpuhealth.aggregator.checkValues" . }}
{{- if and $v.diagnostics.enabled (not $v.diagnostics.scheduled) (eq (toString (dig "on_demand" true $v.diagnostics.config)) "false") }}
{{- fail "diagnostics.enabled with scheduled false and config.on_demand false: no diagnostic can ever run" }}
{{- end }}
{{- end }}

{{/*
Recovery (docs/recovery.md): kured's sentinel file inside the host directory the chart mounts, whether that
directory is mounted (reboot mode kured), and whether the agent container is privileged for GPU resets.
*/}}
{{- define "gpuhealth.rebootSentinel" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.recovery.reboot.sentinelHostDir) .Values.recovery.reboot.sentinelFile }}
{{- end }}

{{- define "gpuhealth.mountsSentinel" -}}
{{- if and .Values.recovery.enabled (eq (dig "reboot" "mode" "kured" .Values.recovery.config) "kured") }}true{{ end }}
{{- end }}

{{- define "gpuhealth.resetPrivileged" -}}
{{- if and .Values.recovery.enabled .Values.recovery.reset.privileged }}true{{ end }}
{{- end }}

{{/* The agent's verbs on pods: its own drain (list, watch; drain.by agent), diagnostics (list), its own
PyTorchJob requeue (list, delete). With the central remediator the agent lists pods only for diagnostics. */}}
{{- define "gpuhealth.podVerbs" -}}
{{- $verbs := list }}
{{- $drains := include "gpuhealth.agentDrains" . }}
{{- $pytorch := and $drains .Values.requeue.enabled .Values.requeue.pytorchjob }}
{{- if or $drains .Values.diagnostics.enabled $pytorch }}
{{- $verbs = append $verbs "list" }}
{{- end }}
{{- if $drains }}
{{- $verbs = append $verbs "watch" }}
{{- end }}
{{- if $pytorch }}
{{- $verbs = append $verbs "delete" }}
{{- end }}
{{- range $i, $verb := $verbs }}{{ if $i }}, {{ end }}{{ $verb | quote }}{{ end }}
{{- end }}

{{/* --- the aggregator (templates/aggregator/) ------------------------------------------------------ */}}

{{/* Name of the aggregator's objects. */}}
{{- define "gpuhealth.aggregator.fullname" -}}
{{- printf "%s-aggregator" (include "gpuhealth.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the aggregator pods (never changed on an upgrade: Deployment selectors are immutable). */}}
{{- define "gpuhealth.aggregator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuhealth.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: aggregator
{{- end }}

{{/* Labels on every aggregator object. */}}
{{- define "gpuhealth.aggregator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpuhealth.aggregator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuhealth
{{- end }}

{{/* The aggregator's service account name. */}}
{{- define "gpuhealth.aggregator.serviceAccountName" -}}
{{- default (include "gpuhealth.aggregator.fullname" .) .Values.aggregator.serviceAccount.name }}
{{- end }}

{{/* The URL the agents use: this release's aggregator Service, else aggregator.url (an aggregator elsewhere). */}}
{{- define "gpuhealth.aggregatorUrl" -}}
{{- if .Values.aggregator.enabled }}
{{- $scheme := ternary "https" "http" (not (empty .Values.aggregator.tls.enabled)) }}
{{- printf "%s://%s.%s.svc:%d" $scheme (include "gpuhealth.aggregator.fullname" .) .Release.Namespace (int .Values.aggregator.port) }}
{{- else }}
{{- .Values.aggregator.url }}
{{- end }}
{{- end }}

{{/* The Secret holding the API token: the one named in aggregator.tokenSecret, else the generated one. */}}
{{- define "gpuhealth.aggregator.tokenSecretName" -}}
{{- if .Values.aggregator.tokenSecret.name }}
{{- .Values.aggregator.tokenSecret.name }}
{{- else if .Values.aggregator.enabled }}
{{- printf "%s-token" (include "gpuhealth.aggregator.fullname" .) }}
{{- end }}
{{- end }}

{{/* The Secret holding the token /metrics is scraped with (good for nothing else): generated, kept. */}}
{{- define "gpuhealth.aggregator.metricsTokenSecretName" -}}
{{- printf "%s-metrics-token" (include "gpuhealth.aggregator.fullname" .) }}
{{- end }}

{{/* How a prometheus-operator scraper reaches the aggregator's /metrics: the scraper's own token (it reads
/metrics and nothing else) and, with TLS, the CA and the Service name the certificate carries (a PodMonitor
scrapes the pod's address, which the certificate does not name). */}}
{{- define "gpuhealth.aggregator.scrapeAuth" -}}
authorization:
  type: Bearer
  credentials:
    name: {{ include "gpuhealth.aggregator.metricsTokenSecretName" . }}
    key: token
{{- with include "gpuhealth.aggregator.tlsSecretName" . }}
scheme: https
tlsConfig:
  serverName: {{ printf "%s.%s.svc" (include "gpuhealth.aggregator.fullname" $) $.Release.Namespace }}
  ca:
    secret:
      name: {{ . }}
      key: ca.crt
{{- end }}
{{- end }}

{{/* The aggregator's TLS Secret (tls.crt, tls.key, ca.crt): cert-manager's, else the one named; empty without TLS. */}}
{{- define "gpuhealth.aggregator.tlsSecretName" -}}
{{- $tls := .Values.aggregator.tls }}
{{- if and .Values.aggregator.enabled $tls.enabled }}
{{- if $tls.certManager.issuerRef }}
{{- printf "%s-tls" (include "gpuhealth.aggregator.fullname" .) }}
{{- else }}
{{- $tls.secretName }}
{{- end }}
{{- end }}
{{- end }}

{{/* The Secret and key of the CA the agents verify the aggregator with ("name/key"), or empty. */}}
{{- define "gpuhealth.aggregator.agentCA" -}}
{{- if .Values.aggregator.caSecret.name }}
{{- printf "%s/%s" .Values.aggregator.caSecret.name .Values.aggregator.caSecret.key }}
{{- else if include "gpuhealth.aggregator.tlsSecretName" . }}
{{- printf "%s/ca.crt" (include "gpuhealth.aggregator.tlsSecretName" .) }}
{{- end }}
{{- end }}

{{/* Whether the agents authenticate with a projected ServiceAccount token (else the shared token Secret). */}}
{{- define "gpuhealth.aggregator.agentsUseServiceAccountToken" -}}
{{- $a := .Values.aggregator }}
{{- if and (eq $a.agentAuth.mode "serviceAccountToken") (include "gpuhealth.aggregatorUrl" .) (or $a.enabled (not $a.tokenSecret.name)) }}true{{ end }}
{{- end }}

{{/* Whether the release's aggregator reviews the agents' ServiceAccount tokens (TokenReview). */}}
{{- define "gpuhealth.aggregator.reviewsTokens" -}}
{{- if and .Values.aggregator.enabled (eq .Values.aggregator.agentAuth.mode "serviceAccountToken") }}true{{ end }}
{{- end }}

{{/* Where the agent finds its aggregator credentials (projected token, CA) in its container. */}}
{{- define "gpuhealth.agentIdentityDir" -}}/var/run/secrets/gpuhealth-aggregator{{- end }}

{{/* Where the aggregator finds its secrets and TLS files in its container. */}}
{{- define "gpuhealth.aggregator.secretsDir" -}}/var/run/secrets/gpuhealth-aggregator{{- end }}
{{- define "gpuhealth.aggregator.tlsDir" -}}/var/run/secrets/gpuhealth-aggregator-tls{{- end }}

{{/* Whether the database is the SQLite file on a volume (the default) rather than an external PostgreSQL. */}}
{{- define "gpuhealth.aggregator.sqlite" -}}
{{- if eq .Values.aggregator.database.type "sqlite" }}true{{ end }}
{{- end }}

{{/* The aggregator's configuration file: its own settings, with what the pod spec decides set by the chart. */}}
{{- define "gpuhealth.aggregator.configFile" -}}
{{- $settings := deepCopy .Values.aggregator.settings }}
{{- if .Values.profiles.definitions }}
{{- $_ := set $settings "profiles" (deepCopy .Values.profiles) }}
{{- end }}
{{- $_ := set $settings "host" "0.0.0.0" }}
{{- $_ = set $settings "port" (int .Values.aggregator.port) }}
{{- $secrets := include "gpuhealth.aggregator.secretsDir" . }}
{{- if include "gpuhealth.aggregator.sqlite" . }}
{{- $_ = set $settings "database_url" "sqlite:////var/lib/gpuhealth-aggregator/aggregator.db" }}
{{- else }}
{{- $_ = set $settings "database_url_file" (printf "%s/database-url" $secrets) }}
{{- end }}
{{- /* Secrets are files of mounted Secrets, never environment variables (docker inspect, child processes). */}}
{{- $_ = set $settings "shared_token_file" (printf "%s/token" $secrets) }}
{{- $_ = set $settings "metrics_token_file" (printf "%s/metrics-token" $secrets) }}
{{- if .Values.aggregator.identitiesSecret.name }}
{{- $_ = set $settings "token_file" (printf "%s/tokens.yaml" $secrets) }}
{{- end }}
{{- if include "gpuhealth.aggregator.tlsSecretName" . }}
{{- $tlsDir := include "gpuhealth.aggregator.tlsDir" . }}
{{- $_ = set $settings "tls_cert_file" (printf "%s/tls.crt" $tlsDir) }}
{{- $_ = set $settings "tls_key_file" (printf "%s/tls.key" $tlsDir) }}
{{- else if .Values.aggregator.tls.allowPlainHttp }}
{{- $_ = set $settings "allow_plain_http" true }}
{{- end }}
{{- if include "gpuhealth.aggregator.reviewsTokens" . }}
{{- $agentUser := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpuhealth.serviceAccountName" .) }}
{{- $_ = set $settings "kubernetes_api_url" (get $settings "kubernetes_api_url" | default "https://kubernetes.default.svc") }}
{{- $_ = set $settings "kubernetes_ca_file" (get $settings "kubernetes_ca_file" | default "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt") }}
{{- $_ = set $settings "kubernetes_audience" .Values.aggregator.agentAuth.audience }}
{{- $_ = set $settings "kubernetes_agent_service_accounts" (list $agentUser) }}
{{- end }}
{{- if include "gpuhealth.centralDrain" . }}
{{- $_ = set $settings "remediator" (include "gpuhealth.remediatorConfig" . | fromYaml) }}
{{- end }}
{{- toYaml (dict "aggregator" $settings) }}
{{- end }}

{{/* Values of the aggregator that contradict each other fail the render with one line. */}}
{{- define "gpuhealth.aggregator.checkValues" -}}
{{- $a := .Values.aggregator }}
{{- if and $a.enabled $a.url }}
{{- fail "aggregator.url names an aggregator elsewhere, but aggregator.enabled deploys one with this release: set aggregator.enabled=false to use the other" }}
{{- end }}
{{- if and $a.enabled (gt (int $a.replicas) 1) (include "gpuhealth.aggregator.sqlite" .) }}
{{- fail "aggregator.replicas > 1 needs aggregator.database.type=postgresql: the SQLite file is written by one aggregator only" }}
{{- end }}
{{- if and $a.enabled $a.tls.enabled (not $a.tls.certManager.issuerRef) (not $a.tls.secretName) }}
{{- fail "aggregator.tls.enabled needs aggregator.tls.certManager.issuerRef (cert-manager) or aggregator.tls.secretName (an existing Secret with tls.crt, tls.key and ca.crt)" }}
{{- end }}
{{- if not (has $a.agentAuth.mode (list "serviceAccountToken" "sharedToken")) }}
{{- fail (printf "aggregator.agentAuth.mode is %q: serviceAccountToken or sharedToken" $a.agentAuth.mode) }}
{{- end }}
{{- if not (has .Values.drain.by (list "aggregator" "agent")) }}
{{- fail (printf "drain.by must be aggregator (the central remediator drains) or agent (each agent drains its own node), not %v" .Values.drain.by) }}
{{- end }}
{{- if and $a.enabled (eq $a.database.type "postgresql") (not $a.database.postgresql.urlSecret.name) }}
{{- fail "aggregator.database.type=postgresql needs aggregator.database.postgresql.urlSecret.name: an existing Secret holding the database URL" }}
{{- end }}
{{- end }}

{{/* The aggregator containers' security context: nothing beyond running the service. */}}
{{- define "gpuhealth.aggregator.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* The aggregator containers' mounts: its config file, /tmp, and the SQLite volume when it has one. */}}
{{- define "gpuhealth.aggregator.volumeMounts" -}}
- name: config
  mountPath: /etc/gpuhealth-aggregator
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: secrets
  mountPath: {{ include "gpuhealth.aggregator.secretsDir" . }}
  readOnly: true
{{- if include "gpuhealth.aggregator.tlsSecretName" . }}
- name: tls
  mountPath: {{ include "gpuhealth.aggregator.tlsDir" . }}
  readOnly: true
{{- end }}
{{- if include "gpuhealth.aggregator.sqlite" . }}
- name: data
  mountPath: /var/lib/gpuhealth-aggregator
{{- end }}
{{- end }}
