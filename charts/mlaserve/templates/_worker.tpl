{{/*
Prefill and decode workers: one Deployment template for both roles.
Argument: dict "root" $ "component" "prefill"|"decode".

Deployments, not StatefulSets: a worker keeps no state across restarts (its KV cache lives in
GPU memory, the model comes from a shared read-only volume), it registers with the router
under its pod IP, so it needs no stable identity or per-pod volume, and a Deployment rolls
with maxSurge 0 / maxUnavailable 1, replacing one GPU pod at a time on a full cluster without
a StatefulSet's strictly ordered rollout.
*/}}
{{- define "mlaserve.workerDeployment" -}}
{{- $root := .root }}
{{- $role := .component }}
{{- $w := index $root.Values $role }}
{{- $ctx := dict "root" $root "component" $role }}
{{- if ne $root.Values.prefill.kvCacheDtype $root.Values.decode.kvCacheDtype }}
{{- fail (printf "prefill.kvCacheDtype %q and decode.kvCacheDtype %q differ; the workers' KV layouts must match" $root.Values.prefill.kvCacheDtype $root.Values.decode.kvCacheDtype) }}
{{- end }}
{{- $capAdd := list }}
{{- if $root.Values.rdma.enabled }}
{{- $capAdd = append $capAdd "IPC_LOCK" }}
{{- end }}
{{- $securityContext := deepCopy $root.Values.securityContext }}
{{- if $capAdd }}
{{- $caps := $securityContext.capabilities | default dict }}
{{- $_ := set $caps "add" (concat ($caps.add | default list) $capAdd | uniq) }}
{{- $_ := set $securityContext "capabilities" $caps }}
{{- end }}
{{- $resources := deepCopy ($w.resources | default dict) }}
{{- $requests := $resources.requests | default dict }}
{{- $limits := $resources.limits | default dict }}
{{- if gt (int $w.gpus) 0 }}
{{- $_ := set $requests "nvidia.com/gpu" (int $w.gpus) }}
{{- $_ := set $limits "nvidia.com/gpu" (int $w.gpus) }}
{{- end }}
{{- if $root.Values.rdma.enabled }}
{{- $_ := set $requests $root.Values.rdma.resourceName (int $root.Values.rdma.count) }}
{{- $_ := set $limits $root.Values.rdma.resourceName (int $root.Values.rdma.count) }}
{{- end }}
{{- $_ := set $resources "requests" $requests }}
{{- $_ := set $resources "limits" $limits -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "mlaserve.componentName" $ctx }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "mlaserve.labels" $ctx | nindent 4 }}
spec:
  replicas: {{ int $w.replicas }}
  strategy:
    {{- toYaml $w.updateStrategy | nindent 4 }}
  selector:
    matchLabels:
      {{- include "mlaserve.selectorLabels" $ctx | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "mlaserve.labels" $ctx | nindent 8 }}
        {{- with $w.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        {{- if and $root.Values.profiles.enabled (not $root.Values.profiles.existingConfigMap) }}
        # Roll the workers when the GPU profiles change: they are read at start.
        checksum/profiles: {{ include (print $root.Template.BasePath "/profiles-configmap.yaml") $root | sha256sum }}
        {{- end }}
        {{- with $w.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "mlaserve.serviceAccountName" $root }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $w.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      terminationGracePeriodSeconds: {{ int $w.terminationGracePeriodSeconds }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ $role }}
          image: {{ include "mlaserve.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: [{{ printf "mlaserve-%s" $role | quote }}]
          args:
            - --listen
            - {{ include "mlaserve.listenAddress" (dict "root" $root "port" $w.port) | quote }}
            # The router reaches this pod at its own IP (downward API, expanded by the kubelet).
            - --advertise
            - {{ include "mlaserve.hostPort" (dict "root" $root "host" "$(POD_IP)" "port" $w.port) | quote }}
            # The router's admin port, where workers register (with the cluster credential).
            - --router
            - {{ include "mlaserve.routerAdminAddress" $root | quote }}
            {{- include "mlaserve.securityArgs" $root | trim | nindent 12 }}
            - --model
            - {{ required "model.path is required" $root.Values.model.path | quote }}
            - --backend
            - {{ $w.backend | quote }}
            - --kv-transport
            - {{ $w.kvTransport | quote }}
            - --kv-cache-dtype
            - {{ $w.kvCacheDtype | quote }}
            {{- if gt (int $w.gpus) 1 }}
            - --tp-size
            - {{ int $w.gpus | quote }}
            - --attention-parallel
            - {{ $w.attentionParallel | default "tensor" | quote }}
            - --moe-parallel
            - {{ $w.moeParallel | default "expert" | quote }}
            {{- if eq ($w.moeDispatch | default "gather") "all-to-all" }}
            - --moe-dispatch
            - all-to-all
            {{- end }}
            {{- end }}
            {{- if $root.Values.profiles.enabled }}
            - --profiles-dir
            - {{ $root.Values.profiles.mountPath | quote }}
            {{- end }}
            - --metrics-port
            - {{ int $w.metricsPort | quote }}
            - --log-level
            - {{ $root.Values.logLevel | quote }}
            {{- $optional := list (list "--device" $w.device) (list "--num-kv-pages" $w.numKvPages)
                  (list "--mem-fraction-static" $w.memFractionStatic) (list "--max-batch-tokens" $w.maxBatchTokens) (list "--chunk-size" $w.chunkSize)
                  (list "--prefix-cache" $w.prefixCache) }}
            {{- if eq $role "decode" }}
            {{- $optional = concat $optional (list (list "--max-running-requests" $w.maxRunningRequests)
                  (list "--kv-lease-ms" $w.kvLeaseMs) (list "--local-prefill-threshold" $w.localPrefillThreshold)) }}
            {{- end }}
            {{- with include "mlaserve.optionalFlags" $optional }}
            {{- . | trim | nindent 12 }}
            {{- end }}
            {{- with $w.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            {{- include "mlaserve.downwardEnv" $root | nindent 12 }}
            {{- with $w.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            # gRPC: the worker API and, with the tcp transport, the KV page stream (KvService).
            - name: grpc
              containerPort: {{ int $w.port }}
              protocol: TCP
            - name: metrics
              containerPort: {{ int $w.metricsPort }}
              protocol: TCP
          {{- include "mlaserve.probes" (dict "port" $w.port "probes" $w.probes "tls" (include "mlaserve.tlsEnabled" $root) "serverName" $root.Values.security.tls.serverName) | nindent 10 }}
          resources:
            {{- toYaml $resources | nindent 12 }}
          securityContext:
            {{- toYaml $securityContext | nindent 12 }}
          volumeMounts:
            - name: shm
              mountPath: /dev/shm
            - name: tmp
              mountPath: /tmp
            {{- with include "mlaserve.securityVolumeMounts" $root | trim }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with include "mlaserve.modelVolumeMount" $root }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- if $root.Values.profiles.enabled }}
            - name: profiles
              mountPath: {{ $root.Values.profiles.mountPath }}
              readOnly: true
            {{- end }}
            {{- with $w.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: shm
          emptyDir:
            medium: Memory
            sizeLimit: {{ $w.shmSize }}
        - name: tmp
          emptyDir: {}
        {{- with include "mlaserve.securityVolumes" $root | trim }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with include "mlaserve.modelVolume" $root }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- if $root.Values.profiles.enabled }}
        - name: profiles
          configMap:
            name: {{ include "mlaserve.profilesConfigMapName" $root }}
            {{- if not $root.Values.profiles.existingConfigMap }}
            {{- $files := include "mlaserve.profileFiles" $root | fromYaml }}
            {{- if $files }}
            items:
              {{- range $key, $name := $files }}
              - key: {{ $key | quote }}
                path: {{ $name | quote }}
              {{- end }}
            {{- end }}
            {{- end }}
        {{- end }}
        {{- with $w.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $w.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $w.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $w.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $w.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{/*
Headless Service of a worker role: DNS names for the pods and the metrics endpoints the
ServiceMonitor scrapes. Clients do not load-balance through it; the router addresses each
worker at the address it registered.
*/}}
{{- define "mlaserve.workerService" -}}
{{- $root := .root }}
{{- $w := index $root.Values .component }}
{{- $ctx := dict "root" $root "component" .component }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "mlaserve.componentName" $ctx }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "mlaserve.labels" $ctx | nindent 4 }}
spec:
  clusterIP: None
  selector:
    {{- include "mlaserve.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: grpc
      port: {{ int $w.port }}
      targetPort: grpc
      protocol: TCP
      appProtocol: grpc
    - name: metrics
      port: {{ int $w.metricsPort }}
      targetPort: metrics
      protocol: TCP
      appProtocol: http
{{- end }}
