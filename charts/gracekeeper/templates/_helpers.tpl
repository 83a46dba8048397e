{{/* The chart's name. */}}
{{- define "gracekeeper.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name, or release-chart when they differ. */}}
{{- define "gracekeeper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gracekeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gracekeeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "gracekeeper.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gracekeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: gracekeeper
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gracekeeper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gracekeeper.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gracekeeper.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The admission webhook: its Service, MutatingWebhookConfiguration and the
     Secret gracekeeper keeps its certificates in (self-managed), or the one
     cert-manager writes. */}}
{{- define "gracekeeper.webhookService" -}}
{{- printf "%s-webhook" (include "gracekeeper.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "gracekeeper.webhookCertSecret" -}}
{{- if .Values.webhook.certManager.enabled -}}
{{- printf "%s-webhook-tls" (include "gracekeeper.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-webhook-certs" (include "gracekeeper.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- define "gracekeeper.certManager" -}}
{{- if and .Values.webhook.enabled .Values.webhook.certManager.enabled -}}true{{- end -}}
{{- end -}}
{{- define "gracekeeper.selfManagedCerts" -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.certManager.enabled) -}}true{{- end -}}
{{- end -}}
