{{/*
Shared pieces of every controller's Deployment, PodDisruptionBudget, metrics Service and
ServiceMonitor. Each controller's templates/<name>/deployment.yaml calls "nodeauth.controller"
with a dict: root (the chart context), name (bootstrap-signer, ...), values (its values block),
args (its own flags), and optionally volumes, volumeMounts and podAnnotations.
*/}}

{{- define "nodeauth.labels" -}}
app.kubernetes.io/name: nodeauth-{{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
app.kubernetes.io/part-of: nodeauth
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "nodeauth.selectorLabels" -}}
app.kubernetes.io/name: nodeauth-{{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{- define "nodeauth.image" -}}
{{- $tag := default .root.Chart.AppVersion .root.Values.image.tag -}}
{{- printf "%s/%s:%s" .root.Values.image.repository .name $tag -}}
{{- end }}

{{/*
The signer's own flags, its CA volumes and their mounts, as JSON {"args", "volumes",
"mounts"}: for the signer's Deployment, or for the approver's when signer.inApproverProcess
runs the signer's controller in the approver's process (`approver --signer ...`).
*/}}
{{- define "nodeauth.signing" -}}
{{- $v := .Values.signer }}
{{- $m := .Values.managementCluster }}
{{- if and (ne $v.mode "gc-only") (not $v.signers) (not $m.enabled) }}
{{- fail "signer.signers: at least one signer (name + secretName) unless signer.mode is gc-only" }}
{{- end }}
{{- $args := list (printf "--bundle-namespace=%s" .Release.Namespace) (printf "--max-duration=%s" $v.maxDuration) (printf "--mode=%s" $v.mode) (printf "--gc-scope=%s" $v.gcScope) }}
{{- if $v.appendChain }}
{{- $args = append $args "--append-chain" }}
{{- end }}
{{- $volumes := list }}
{{- $mounts := list }}
{{- range $i, $s := (ternary (list) $v.signers $m.enabled) }}
{{- $dir := printf "/etc/nodeauth/ca/%d" $i }}
{{- $spec := printf "--signer=%s=%s/tls.crt,%s/tls.key" $s.name $dir $dir }}
{{- if $s.profile }}
{{- $spec = printf "%s,%s" $spec $s.profile }}
{{- end }}
{{- $args = append $args $spec }}
{{- $volumes = append $volumes (dict "name" (printf "ca-%d" $i) "secret" (dict "secretName" $s.secretName "defaultMode" 288)) }}
{{- $mounts = append $mounts (dict "name" (printf "ca-%d" $i) "mountPath" $dir "readOnly" true) }}
{{- end }}
{{- toJson (dict "args" $args "volumes" $volumes "mounts" $mounts) }}
{{- end }}

{{- define "nodeauth.controller" -}}
{{- $root := .root -}}
{{- $v := .values -}}
{{- $g := $root.Values -}}
{{- if and (gt (int $v.replicas) 1) (not $g.leaderElection.enabled) -}}
{{- fail (printf "%s: replicas > 1 needs leaderElection.enabled (only the leader may act)" .name) -}}
{{- end -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nodeauth-{{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nodeauth.labels" . | nindent 4 }}
spec:
  replicas: {{ $v.replicas }}
  selector:
    matchLabels:
      {{- include "nodeauth.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "nodeauth.labels" . | nindent 8 }}
        {{- with $g.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- $ann := merge (dict) (.podAnnotations | default (dict)) $g.podAnnotations }}
      {{- with $ann }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ default (printf "nodeauth-%s" .name) .serviceAccount }}
      {{- with $g.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $g.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $g.podSecurityContext | nindent 8 }}
      {{- with (default $g.nodeSelector $v.nodeSelector) }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with (default $g.tolerations $v.tolerations) }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with (default $g.affinity $v.affinity) }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .name }}
          image: {{ include "nodeauth.image" . }}
          imagePullPolicy: {{ $g.image.pullPolicy }}
          args:
            - --log-format={{ $g.logFormat }}
            - --log-level={{ $g.logLevel }}
            - --metrics-bind-address=0.0.0.0:{{ $g.ports.metrics }}
            - --health-bind-address=0.0.0.0:{{ $g.ports.health }}
            - --leader-elect={{ $g.leaderElection.enabled }}
            - --leader-elect-namespace={{ $root.Release.Namespace }}
            - --leader-elect-lease-duration={{ $g.leaderElection.leaseDuration }}
            - --leader-elect-renew-deadline={{ $g.leaderElection.renewDeadline }}
            - --leader-elect-retry-period={{ $g.leaderElection.retryPeriod }}
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            {{- range $v.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          ports:
            - name: metrics
              containerPort: {{ $g.ports.metrics }}
              protocol: TCP
            - name: health
              containerPort: {{ $g.ports.health }}
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /healthz
              port: health
            initialDelaySeconds: {{ $g.probes.initialDelaySeconds }}
            periodSeconds: {{ $g.probes.periodSeconds }}
            timeoutSeconds: {{ $g.probes.timeoutSeconds }}
            failureThreshold: {{ $g.probes.failureThreshold }}
          readinessProbe:
            httpGet:
              path: /readyz
              port: health
            initialDelaySeconds: {{ $g.probes.initialDelaySeconds }}
            periodSeconds: {{ $g.probes.periodSeconds }}
            timeoutSeconds: {{ $g.probes.timeoutSeconds }}
            failureThreshold: {{ $g.probes.failureThreshold }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $g.securityContext | nindent 12 }}
          {{- with .volumeMounts }}
          volumeMounts:
            {{- toYaml . | nindent 12 }}
          {{- end }}
      {{- with .volumes }}
      volumes:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- if and $g.podDisruptionBudget.enabled (gt (int $v.replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: nodeauth-{{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nodeauth.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ $g.podDisruptionBudget.maxUnavailable }}
  # A standby replica may report not-ready until it leads; never let it block a drain.
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "nodeauth.selectorLabels" . | nindent 6 }}
{{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: nodeauth-{{ .name }}-metrics
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nodeauth.labels" . | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "nodeauth.selectorLabels" . | nindent 4 }}
  ports:
    - name: metrics
      port: {{ $g.ports.metrics }}
      targetPort: metrics
      protocol: TCP
{{- if $g.serviceMonitor.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: nodeauth-{{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nodeauth.labels" . | nindent 4 }}
    {{- with $g.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "nodeauth.selectorLabels" . | nindent 6 }}
  namespaceSelector:
    matchNames: [{{ $root.Release.Namespace }}]
  endpoints:
    - port: metrics
      path: /metrics
      interval: {{ $g.serviceMonitor.interval }}
      scrapeTimeout: {{ $g.serviceMonitor.scrapeTimeout }}
{{- end }}
{{- end }}
