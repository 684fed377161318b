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
{{- $eps = append $eps (printf "%s://%s-%d.%s.%s.svc:%d" (include "legation.etcdScheme" $) $name $i $name $.Release.Namespace (int $.Values.etcd.bundled.clientPort)) }}
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

{{/*
What is on, once insecure is applied: each is "true" or empty.
tlsOn: TLS (mTLS) on the xDS and HTTP ports. tlsIssued: with the
certificates issued at start from the chart's CA (no tls.secretName).
etcdTLSOn: the bundled etcd over TLS. etcdAuthOn: its roles and auth Job.
*/}}
{{- define "legation.tlsOn" -}}
{{- if and .Values.tls.enabled (not .Values.insecure) }}true{{ end }}
{{- end }}

{{- define "legation.tlsIssued" -}}
{{- if and (include "legation.tlsOn" .) (not .Values.tls.secretName) }}true{{ end }}
{{- end }}

{{- define "legation.etcdTLSOn" -}}
{{- $b := .Values.etcd.bundled }}
{{- if and $b.enabled $b.tls.enabled (not .Values.insecure) }}true{{ end }}
{{- end }}

{{- define "legation.etcdAuthOn" -}}
{{- if and (include "legation.etcdTLSOn" .) .Values.etcd.bundled.auth.enabled }}true{{ end }}
{{- end }}

{{/* The chart's CA's Secret (tls.ca). */}}
{{- define "legation.caSecret" -}}
{{- default (printf "%s-ca" (include "legation.fullname" .) | trunc 63 | trimSuffix "-") .Values.tls.ca.secretName }}
{{- end }}

{{/* The SPIFFE ID of the certificates issued to the replicas. */}}
{{- define "legation.replicaSPIFFE" -}}
{{- printf "spiffe://%s/ns/%s/%s/replica" .Values.tls.issue.trustDomain .Release.Namespace (include "legation.fullname" .) }}
{{- end }}

{{/*
The xds-node pods' TLS files, as a dict: the files under /etc/legation/tls
(issued there by the init container, or the keys of tls.secretName).
*/}}
{{- define "legation.replicaTLS" -}}
{{- if include "legation.tlsIssued" . }}
{{- toJson (dict "cert" "tls.crt" "key" "tls.key" "ca" "ca.crt") }}
{{- else }}
{{- toJson (dict "cert" .Values.tls.certKey "key" .Values.tls.keyKey "ca" .Values.tls.caKey) }}
{{- end }}
{{- end }}

{{/* The bundled etcd's URL scheme: https with TLS. */}}
{{- define "legation.etcdScheme" -}}
{{- ternary "https" "http" (eq (include "legation.etcdTLSOn" .) "true") }}
{{- end }}

{{/* The bundled etcd's TLS Secrets, by role: server, replica, admin, root. */}}
{{- define "legation.etcdSecret" -}}
{{- $role := index . 1 }}
{{- $ctx := index . 0 }}
{{- default (printf "%s-%s" (include "legation.etcdName" $ctx) $role) (index $ctx.Values.etcd.bundled.tls.secrets $role) }}
{{- end }}

{{/* The gossip keyring's Secret: named, generated, or none (empty). */}}
{{- define "legation.gossipSecret" -}}
{{- if .Values.gossip.keySecret.name }}
{{- .Values.gossip.keySecret.name }}
{{- else if .Values.gossip.keySecret.generate }}
{{- printf "%s-gossip-key" (include "legation.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Selector labels of the bundled etcd's auth Job's pod. */}}
{{- define "legation.etcdAuthSelectorLabels" -}}
app.kubernetes.io/name: {{ include "legation.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd-auth
{{- end }}

{{/*
The xds-node pods' etcd client TLS: the Secret mounted at
/etc/legation/etcd-tls and its keys, as a dict (empty secret: none).
*/}}
{{- define "legation.etcdClientTLS" -}}
{{- if .Values.etcd.bundled.enabled }}
{{- if include "legation.etcdTLSOn" . }}
{{- toJson (dict "secret" (include "legation.etcdSecret" (list . "replica")) "ca" "ca.crt" "cert" "tls.crt" "key" "tls.key") }}
{{- else }}
{{- toJson (dict "secret" "") }}
{{- end }}
{{- else }}
{{- $t := .Values.etcd.external.tls }}
{{- toJson (dict "secret" $t.secretName "ca" $t.caKey "cert" $t.certKey "key" $t.keyKey) }}
{{- end }}
{{- end }}

{{/*
Values the chart refuses, each failing with a message naming the value to
set: an insecure etcd under TLS, a cluster without a gossip key, and
settings that contradict each other. insecure: true is the one way to
turn TLS off everywhere.
*/}}
{{- define "legation.checks" -}}
{{- $b := .Values.etcd.bundled }}
{{- $tlsOn := include "legation.tlsOn" . }}
{{- if and $b.enabled .Values.etcd.external.endpoints }}
{{- fail "etcd: etcd.external.endpoints is set and etcd.bundled.enabled is true; choose one" }}
{{- end }}
{{- if and .Values.etcd.external.username (not .Values.etcd.external.passwordSecret.name) }}
{{- fail "etcd.external.username: set etcd.external.passwordSecret.name too (a user needs its password)" }}
{{- end }}
{{- if and $b.enabled (not $b.tls.enabled) $tlsOn }}
{{- fail "tls.enabled with a plain-text bundled etcd: set etcd.bundled.tls.enabled=true (any pod reaching etcd could rewrite the rules that mTLS enforces), or insecure=true for a lab without TLS" }}
{{- end }}
{{- if and $b.enabled $b.auth.enabled (not $b.tls.enabled) (not .Values.insecure) }}
{{- fail "etcd.bundled.auth.enabled needs client certificates: set etcd.bundled.tls.enabled=true (or insecure=true for a lab without TLS)" }}
{{- end }}
{{- if not $b.enabled }}
{{- $tls := .Values.etcd.external.tls.secretName }}
{{- range .Values.etcd.external.endpoints }}
{{- if hasPrefix "https://" . }}{{ $tls = true }}{{ end }}
{{- end }}
{{- if and $tlsOn (not $tls) }}
{{- fail "tls.enabled with a plain-text external etcd: set etcd.external.tls.secretName (its CA and a client certificate), or use https:// etcd.external.endpoints, or insecure=true for a lab without TLS" }}
{{- end }}
{{- if and .Values.etcd.external.username (not $tls) }}
{{- fail "etcd.external.username over plain text would send the password in clear: set etcd.external.tls.secretName, or use https:// etcd.external.endpoints" }}
{{- end }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not (include "legation.gossipSecret" .)) }}
{{- fail "replicaCount above 1 with unencrypted gossip: set gossip.keySecret.name (a Secret holding a keyring) or gossip.keySecret.generate=true" }}
{{- end }}
{{- end }}
