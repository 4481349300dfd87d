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
{{- toYaml (merge $fixed (deepCopy .Values.config)) }}
{{- end }}
