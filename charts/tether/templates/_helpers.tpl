{{/* Names and labels shared by every template. */}}

{{- define "tether.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tether.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "tether.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "tether.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tether.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tether.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "tether.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tether.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "tether.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "tether.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tether
{{- end -}}

{{/* The store URL the operator and the runtime share. */}}
{{- define "tether.storeURL" -}}
{{- $s3 := .Values.store.s3 -}}
{{- if .Values.store.url -}}
{{- .Values.store.url -}}
{{- else if $s3.bucket -}}
{{- $query := list -}}
{{- if $s3.endpoint }}{{ $query = append $query (printf "endpoint_url=%s" $s3.endpoint) }}{{ end -}}
{{- if $s3.region }}{{ $query = append $query (printf "region=%s" $s3.region) }}{{ end -}}
s3://{{ $s3.bucket }}/{{ $s3.prefix | trimAll "/" }}{{ if $query }}?{{ join "&" $query }}{{ end }}
{{- else -}}
file:///var/lib/tether/store
{{- end -}}
{{- end -}}

{{/* What the operator needs in every namespace it serves (a Role there, or a ClusterRole),
for the configured executor. */}}
{{- define "tether.namespacedRules" -}}
- apiGroups: ["tether.dev"]
  resources: ["agentruns", "agenttools"]
  verbs: ["get", "list", "watch", "patch"]
# `delete`: a finished run past its spec.ttlSecondsAfterFinished (only runs that set it).
- apiGroups: ["tether.dev"]
  resources: ["agentruns"]
  verbs: ["delete"]
- apiGroups: ["tether.dev"]
  resources: ["agentruns/status", "agenttools/status"]
  verbs: ["get", "patch"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# AgentApprovals: read them, own them by their run (metadata) and say whether they were applied.
- apiGroups: ["tether.dev"]
  resources: ["agentapprovals"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["tether.dev"]
  resources: ["agentapprovals/status"]
  verbs: ["get", "patch"]
{{- if eq .Values.executor.kind "kubernetes" }}
# Secrets: `get` by name (never list/watch). The operator asks for metadata only
# (PartialObjectMetadata: is it there, is it labelled tether.dev/usable=true); RBAC cannot limit
# `get` to metadata, the operator's code never asks for data. The pods mount the values.
# `create`/`delete`: the token Secret of an attempt with GPU tools (tokens the operator made;
# creating grants no read of other Secrets).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "delete"]
# Runner pods (one per attempt) and the request ConfigMap of each execution.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]  # patch: a standby pod told to go (spec.standby)
# `get`: a request ConfigMap that already exists is checked to be the operator's before use.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "delete"]
# The runner ServiceAccount (no token, no role), created when missing.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create"]
{{- else if eq .Values.executor.kind "flyte" }}
# Flyte executor: runs live on the Flyte backend (reached over its API, not the apiserver); its
# pods get their Secrets from Flyte's secret injection. Secrets: `get` by name, metadata only
# (as for the kubernetes executor: is the Secret a run names there and labelled for Tether).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- else }}
# Local (development) executor: API keys and tools' env are read by name, never listed or watched.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
{{- end -}}

{{/* `helm test` (templates/tests/): the served namespace its run goes to, its names, and the
fake provider's URL. */}}
{{- define "tether.testNamespace" -}}
{{- .Values.tests.namespace | default (first .Values.watchNamespaces) | default .Release.Namespace -}}
{{- end -}}

{{- define "tether.testName" -}}
{{- printf "%s-test" (include "tether.fullname" . | trunc 40 | trimSuffix "-") -}}
{{- end -}}

{{- define "tether.testProviderURL" -}}
http://{{ include "tether.testName" . }}-provider.{{ include "tether.testNamespace" . }}.svc:8080
{{- end -}}

{{/* tools.allowedModules, with the weather tool of `helm test` when the list is set (an empty
list allows what the image declares, the weather tool among them). */}}
{{- define "tether.toolModules" -}}
{{- $modules := .Values.tools.allowedModules -}}
{{- if and $modules .Values.tests.enabled -}}{{- $modules = append $modules "tether.testing.weather" | uniq -}}{{- end -}}
{{- join "," $modules -}}
{{- end -}}

{{/* providers.allowedBaseURLs, with the fake provider of `helm test` when the list is set (an
empty list allows it already). */}}
{{- define "tether.allowedBaseURLs" -}}
{{- $urls := .Values.providers.allowedBaseURLs -}}
{{- if and $urls .Values.tests.enabled -}}{{- $urls = append $urls (include "tether.testProviderURL" .) | uniq -}}{{- end -}}
{{- toJson $urls -}}
{{- end -}}

{{/* Labels of the `helm test` objects: not the operator's selector labels (its metrics Service
selects by those). */}}
{{- define "tether.testLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tether.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tether
{{- end -}}
