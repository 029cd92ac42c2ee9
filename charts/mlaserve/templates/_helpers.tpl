{{/*
Naming and labels. The templates use only the Helm built-ins listed in the chart's README
(tests/chart renders them without Helm).
*/}}

{{- define "mlaserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-<chart>, unless the release name already holds the chart name. */}}
{{- define "mlaserve.fullname" -}}
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

{{/* Name of one component's objects; component names are at most 7 characters. */}}
{{- define "mlaserve.componentName" -}}
{{- printf "%s-%s" (include "mlaserve.fullname" .root | trunc 55 | trimSuffix "-") .component }}
{{- end }}

{{- define "mlaserve.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. Argument: dict "root" $ "component" <name or "">. */}}
{{- define "mlaserve.labels" -}}
helm.sh/chart: {{ include "mlaserve.chart" .root }}
{{ include "mlaserve.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Values.image.tag | default .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: mlaserve
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels a workload selects its pods by; they never change across upgrades. */}}
{{- define "mlaserve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mlaserve.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{- define "mlaserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mlaserve.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "mlaserve.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* HOST:PORT with IPv6 hosts in brackets. Argument: dict "root" $ "host" h "port" p. */}}
{{- define "mlaserve.hostPort" -}}
{{- if eq .root.Values.ipFamily "IPv6" }}
{{- printf "[%s]:%d" .host (int .port) }}
{{- else }}
{{- printf "%s:%d" .host (int .port) }}
{{- end }}
{{- end }}

{{/* Address the servers listen on: every interface. */}}
{{- define "mlaserve.listenAddress" -}}
{{- $any := ternary "::" "0.0.0.0" (eq .root.Values.ipFamily "IPv6") }}
{{- include "mlaserve.hostPort" (dict "root" .root "host" $any "port" .port) }}
{{- end }}

{{/* The router admin Service's DNS name and port: where workers register. */}}
{{- define "mlaserve.routerAdminAddress" -}}
{{- printf "%s.%s.svc.%s:%d" (include "mlaserve.componentName" (dict "root" . "component" "admin")) .Release.Namespace .Values.clusterDomain (int .Values.router.adminPort) }}
{{- end }}

{{/*
Transport security of every component (docs/security.md): TLS files from the cluster Secret
mounted at /etc/mlaserve/tls (and, with metrics.tls, /metrics over HTTPS with them), or
--insecure; the cluster token from its Secret. Fails when no choice was made.
*/}}
{{- define "mlaserve.tlsEnabled" -}}
{{- $sec := .Values.security }}
{{- if and $sec.tls.secretName $sec.insecure }}
{{- fail "security.tls.secretName and security.insecure are both set; choose one" }}
{{- end }}
{{- if not (or $sec.tls.secretName $sec.insecure) }}
{{- fail "set security.tls.secretName (a kubernetes.io/tls Secret with ca.crt) or security.insecure: true (plaintext; docs/security.md)" }}
{{- end }}
{{- if and $sec.insecure (not $sec.adminTokenSecret) }}
{{- fail "security.insecure needs security.adminTokenSecret: the admin port is reachable in plaintext" }}
{{- end }}
{{- if $sec.tls.secretName }}true{{ end }}
{{- end }}

{{- define "mlaserve.securityArgs" -}}
{{- if include "mlaserve.tlsEnabled" . }}
- --tls-cert
- /etc/mlaserve/tls/tls.crt
- --tls-key
- /etc/mlaserve/tls/tls.key
- --tls-ca
- /etc/mlaserve/tls/ca.crt
- --tls-server-name
- {{ .Values.security.tls.serverName | quote }}
{{- if .Values.metrics.tls }}
- --metrics-tls
{{- end }}
{{- else }}
{{- if .Values.metrics.tls }}
{{- fail "metrics.tls serves /metrics with the cluster certificate of security.tls.secretName, which security.insecure does not have" }}
{{- end }}
- --insecure
{{- end }}
{{- if .Values.security.clusterTokenSecret }}
- --cluster-token-file
- /etc/mlaserve/cluster-token/token
{{- end }}
{{- end }}

{{- define "mlaserve.securityVolumes" -}}
{{- if .Values.security.tls.secretName }}
- name: tls
  secret:
    secretName: {{ .Values.security.tls.secretName | quote }}
    defaultMode: 0440
{{- end }}
{{- if .Values.security.clusterTokenSecret }}
- name: cluster-token
  secret:
    secretName: {{ .Values.security.clusterTokenSecret | quote }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{- define "mlaserve.securityVolumeMounts" -}}
{{- if .Values.security.tls.secretName }}
- name: tls
  mountPath: /etc/mlaserve/tls
  readOnly: true
{{- end }}
{{- if .Values.security.clusterTokenSecret }}
- name: cluster-token
  mountPath: /etc/mlaserve/cluster-token
  readOnly: true
{{- end }}
{{- end }}

{{/* The router Service's cluster DNS name and public gRPC port. */}}
{{- define "mlaserve.routerAddress" -}}
{{- printf "%s.%s.svc.%s:%d" (include "mlaserve.componentName" (dict "root" . "component" "router")) .Release.Namespace .Values.clusterDomain (int .Values.router.port) }}
{{- end }}

{{/*
GPU profiles as {ConfigMap key: file name}. ConfigMap keys allow only [-._a-zA-Z0-9] while
profile files are named after the GPU ("NVIDIA H100 80GB HBM3.json"), so each key is the
name with other characters replaced by "_", and the volume maps it back to the file name.
Output: YAML, read back with fromYaml.
*/}}
{{- define "mlaserve.profileFiles" -}}
{{- $out := dict }}
{{- $names := list }}
{{- range $path, $_ := .Files.Glob "profiles/*.json" }}
{{- $names = append $names (base $path) }}
{{- end }}
{{- range $name, $_ := .Values.profiles.files }}
{{- $names = append $names $name }}
{{- end }}
{{- range $name := $names | uniq | sortAlpha }}
{{- $key := regexReplaceAll "[^-._a-zA-Z0-9]" $name "_" }}
{{- if and (hasKey $out $key) (ne (get $out $key) $name) }}
{{- fail (printf "profiles %q and %q map to the same ConfigMap key %q; rename one" (get $out $key) $name $key) }}
{{- end }}
{{- $_ := set $out $key $name }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* Content of one profile: profiles.files overrides the chart's file of the same name. */}}
{{- define "mlaserve.profileContent" -}}
{{- $root := .root }}
{{- if hasKey $root.Values.profiles.files .name }}
{{- index $root.Values.profiles.files .name }}
{{- else }}
{{- $root.Files.Get (printf "profiles/%s" .name) }}
{{- end }}
{{- end }}

{{- define "mlaserve.profilesConfigMapName" -}}
{{- .Values.profiles.existingConfigMap | default (include "mlaserve.componentName" (dict "root" . "component" "profiles")) }}
{{- end }}

{{/*
Flags whose value may be null, as YAML list items ("- --flag", "- value"); null values are
left out so the binary's default applies. A bool is one item, "--flag=true|false": CLI11
flags (the router's --prefix-affinity) take their value only after "=", and would read a
separate "false" as an unexpected positional argument. Numbers arrive as float64: a whole one
is written as an integer ("2"), another as it is ("1.5"). Argument: list of (list "--flag" value).
*/}}
{{- define "mlaserve.optionalFlags" -}}
{{- range . }}
{{- $value := index . 1 }}
{{- if kindIs "bool" $value }}
- {{ printf "%s=%t" (index . 0) $value | quote }}
{{- else if not (kindIs "invalid" $value) }}
- {{ index . 0 }}
- {{ if and (kindIs "float64" $value) (eq $value (floor $value)) }}{{ int64 $value | quote }}{{ else }}{{ $value | toString | quote }}{{ end }}
{{- end }}
{{- end }}
{{- end }}

{{/* gRPC probes on grpc.health.v1. Argument: dict "port" p "probes" <component>.probes. */}}
{{- define "mlaserve.probes" -}}
{{- $grpc := dict "port" (int .port) }}
{{- with .probes.grpcService }}
{{- $_ := set $grpc "service" . }}
{{- end }}
{{- $check := dict "grpc" $grpc }}
{{- if .tls }}
{{- /* The kubelet's gRPC probe has no TLS: mlaservectl checks health over TLS instead. */}}
{{- /* Workers take only clients with a cluster certificate: the pod's own. */}}
{{- $cmd := list "mlaservectl" "--tls-ca" "/etc/mlaserve/tls/ca.crt" "--tls-cert" "/etc/mlaserve/tls/tls.crt" "--tls-key" "/etc/mlaserve/tls/tls.key" "--tls-server-name" .serverName "--server" (printf "127.0.0.1:%d" (int .port)) "--timeout" "4" "health" }}
{{- with .probes.grpcService }}
{{- $cmd = concat $cmd (list "--service" .) }}
{{- end }}
{{- $check = dict "exec" (dict "command" $cmd) }}
{{- end -}}
startupProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: {{ int .probes.startup.periodSeconds }}
  failureThreshold: {{ int .probes.startup.failureThreshold }}
  timeoutSeconds: 5
readinessProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: {{ int .probes.readiness.periodSeconds }}
  failureThreshold: {{ int .probes.readiness.failureThreshold }}
  timeoutSeconds: 5
livenessProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: {{ int .probes.liveness.periodSeconds }}
  failureThreshold: {{ int .probes.liveness.failureThreshold }}
  timeoutSeconds: 5
{{- end }}

{{/* Pod IP and name from the downward API: --advertise uses $(POD_IP). */}}
{{- define "mlaserve.downwardEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end }}

{{/* The model volume, per model.volume.type. */}}
{{- define "mlaserve.modelVolume" -}}
{{- $v := .Values.model.volume }}
{{- if eq $v.type "pvc" -}}
- name: model
  persistentVolumeClaim:
    claimName: {{ required "model.volume.claimName is required when model.volume.type is pvc" $v.claimName }}
    readOnly: true
{{- else if eq $v.type "hostPath" -}}
- name: model
  hostPath:
    path: {{ required "model.volume.hostPath is required when model.volume.type is hostPath" $v.hostPath }}
    type: {{ $v.hostPathType }}
{{- end }}
{{- end }}

{{- define "mlaserve.modelVolumeMount" -}}
{{- if ne .Values.model.volume.type "none" -}}
- name: model
  mountPath: {{ .Values.model.volume.mountPath }}
  readOnly: true
{{- end }}
{{- end }}
