{{/* Names and labels, as `helm create` lays them out. */}}
{{- define "modelhost.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "modelhost.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "modelhost.selectorLabels" -}}
app.kubernetes.io/name: {{ include "modelhost.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "modelhost.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "modelhost.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "modelhost.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "modelhost.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "modelhost.image" -}}
{{- $tag := .Values.image.tag | default (ternary (printf "%s-gpu" .Chart.AppVersion) .Chart.AppVersion (gt (int .Values.gpu.count) 0)) -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* The pod's grace period: longer than the preStop sleep plus the server's own drain (--exit-timeout-secs). */}}
{{- define "modelhost.terminationGracePeriod" -}}
{{- $drain := add .Values.preStopSleepSeconds .Values.server.exitTimeoutSecs -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add $drain 10 -}}
{{- else if le (int .Values.terminationGracePeriodSeconds) (int $drain) -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be longer than preStopSleepSeconds + server.exitTimeoutSecs (%v), or Kubernetes kills the server before it has drained" .Values.terminationGracePeriodSeconds $drain) -}}
{{- else -}}
{{- .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/* Where the server reads its models: the --model-repository value. */}}
{{- define "modelhost.modelRepository" -}}
{{- $repo := .Values.modelRepository -}}
{{- if eq $repo.source "examples" -}}
{{- /* No flag: modelhost serves the examples bundled in the image. */ -}}
{{- else if or (eq $repo.source "s3") (eq $repo.source "gcs") -}}
{{- $scheme := ternary "s3://" "gs://" (eq $repo.source "s3") -}}
{{- if not (hasPrefix $scheme $repo.uri) -}}
{{- fail (printf "modelRepository.uri must start with %s for source %s, got %q" $scheme $repo.source $repo.uri) -}}
{{- end -}}
{{- $repo.uri -}}
{{- else if eq $repo.source "pvc" -}}
{{- if not $repo.pvc.claimName -}}
{{- fail "modelRepository.pvc.claimName is required for source pvc" -}}
{{- end -}}
{{- $repo.mountPath -}}
{{- end -}}
{{- end -}}

{{/* The container's arguments: `modelhost serve` flags (the image's entrypoint hands arguments starting with -
     to `modelhost serve`). */}}
{{- define "modelhost.args" -}}
{{- $repository := include "modelhost.modelRepository" . -}}
{{- if $repository }}
- --model-repository={{ $repository }}
{{- end }}
- --http-port={{ .Values.ports.http }}
- --grpc-port={{ .Values.ports.grpc }}
- --metrics-port={{ .Values.ports.metrics }}
- --model-control-mode={{ .Values.server.modelControlMode }}
{{- if eq .Values.server.modelControlMode "poll" }}
- --repository-poll-secs={{ .Values.server.repositoryPollSecs }}
{{- end }}
{{- if eq .Values.server.modelControlMode "explicit" }}
{{- range .Values.server.loadModels }}
- --load-model={{ . }}
{{- end }}
{{- end }}
- --exit-timeout-secs={{ .Values.server.exitTimeoutSecs }}
- --strict-readiness={{ .Values.server.strictReadiness }}
{{- if .Values.server.frontendProcesses }}
- --frontend-processes={{ .Values.server.frontendProcesses }}
{{- end }}
{{- range .Values.server.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Autoscaling: the signal's PromQL. `selector` is the label matchers of the pods' series; `groupBy` is set for
     the per-pod form prometheus-adapter evaluates ("pod" after its template is filled in). */}}
{{- define "modelhost.signalQuery" -}}
{{- $a := .root.Values.autoscaling -}}
{{- $sel := .selector -}}
{{- if $a.model -}}
{{- $sel = printf "%s,model=%q" $sel $a.model -}}
{{- end -}}
{{- $by := ternary (printf " by (%s)" .groupBy) "" (ne .groupBy "") -}}
{{- $w := $a.rateWindow -}}
{{- if eq $a.signal "queueComputeRatio" -}}
sum{{ $by }} (rate(nv_inference_queue_duration_us{ {{- $sel -}} }[{{ $w }}])) / clamp_min(sum{{ $by }} (rate(nv_inference_compute_infer_duration_us{ {{- $sel -}} }[{{ $w }}])), 1)
{{- else if eq $a.signal "queueTimePerRequest" -}}
sum{{ $by }} (rate(nv_inference_queue_duration_us{ {{- $sel -}} }[{{ $w }}])) / clamp_min(sum{{ $by }} (rate(nv_inference_request_success{ {{- $sel -}} }[{{ $w }}])), 0.001)
{{- else if eq $a.signal "pendingRequestsPerPod" -}}
sum{{ $by }} (nv_inference_pending_request_count{ {{- $sel -}} })
{{- end -}}
{{- end -}}

{{/* The series the signal's query reads first (prometheus-adapter discovers the metric from it). */}}
{{- define "modelhost.signalSeries" -}}
{{- if eq .Values.autoscaling.signal "pendingRequestsPerPod" -}}
nv_inference_pending_request_count
{{- else -}}
nv_inference_queue_duration_us
{{- end -}}
{{- end -}}

{{- define "modelhost.metricName" -}}
{{- .Values.autoscaling.hpa.metricName | default (printf "modelhost_%s" (snakecase .Values.autoscaling.signal)) -}}
{{- end -}}

{{- define "modelhost.signalTarget" -}}
{{- index .Values.autoscaling.targets .Values.autoscaling.signal -}}
{{- end -}}

{{/* A Kubernetes quantity for the target: thousandths, so that a ratio of 0.5 becomes 500m. */}}
{{- define "modelhost.signalTargetQuantity" -}}
{{- printf "%dm" (int (ceil (mulf (float64 (include "modelhost.signalTarget" .)) 1000))) -}}
{{- end -}}

{{- define "modelhost.adapterRulesName" -}}
{{- .Values.autoscaling.hpa.adapterRules.name | default (printf "%s-adapter-rules" (include "modelhost.fullname" .)) -}}
{{- end -}}
