{{/* The chart's name. */}}
{{- define "legation.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' base name: the release name, with the chart's unless it holds it. */}}
{{- define "legation.fullname" -}}
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

{{- define "legation.etcdName" -}}
{{- printf "%s-etcd" (include "legation.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "legation.gossipName" -}}
{{- printf "%s-gossip" (include "legation.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "legation.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: legation
{{- end }}

{{/* Selector labels of the xds-node pods. */}}
{{- define "legation.selectorLabels" -}}
app.kubernetes.io/name: {{ include "legation.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: xds-node
{{- end }}

{{/* Selector labels of the bundled etcd's pods. */}}
{{- define "legation.etcdSelectorLabels" -}}
app.kubernetes.io/name: {{ include "legation.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end }}

{{/* --etcd-endpoints: the bundled etcd's members, or the external ones. */}}
{{- define "legation.etcdEndpoints" -}}
{{- if .Values.etcd.bundled.enabled }}
{{- $eps := list }}
{{- $name := include "legation.etcdName" . }}
{{- range $i := until (int .Values.etcd.bundled.replicas) }}
{{- $eps = append $eps (printf "http://%s-%d.%s.%s.svc:%d" $name $i $name $.Release.Namespace (int $.Values.etcd.bundled.clientPort)) }}
{{- end }}
{{- join "," $eps }}
{{- else }}
{{- if not .Values.etcd.external.endpoints }}
{{- fail "etcd: set etcd.external.endpoints, or etcd.bundled.enabled=true" }}
{{- end }}
{{- join "," .Values.etcd.external.endpoints }}
{{- end }}
{{- end }}

{{/* The image of xds-node. */}}
{{- define "legation.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
