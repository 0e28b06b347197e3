{{/* The release's name for every object; truncated to the 63 characters Kubernetes allows in a label. */}}
{{- define "lameduck-demo.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lameduck-demo.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lameduck-demo.labels" -}}
{{ include "lameduck-demo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A non-negative whole number of seconds, or a template error naming the value. Call with (list "name" value). */}}
{{- define "lameduck-demo.seconds" -}}
{{- $name := index . 0 -}}
{{- $v := index . 1 -}}
{{- if not (or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v)) -}}
{{- fail (printf "lameduck-demo: %s=%v: must be a whole number of seconds, such as 5 (the chart adds the unit)" $name $v) -}}
{{- end -}}
{{- if or (lt (float64 $v) 0.0) (ne (float64 $v) (floor $v)) -}}
{{- fail (printf "lameduck-demo: %s=%v: must be a whole, non-negative number of seconds" $name $v) -}}
{{- end -}}
{{- int64 $v -}}
{{- end -}}

{{/* Seconds the preStop hook adds before SIGTERM: an exec sleep's N; the HTTP hook adds none (it is the window). */}}
{{- define "lameduck-demo.preStopSeconds" -}}
{{- $mode := .Values.preStop.mode -}}
{{- if eq $mode "sleep" -}}
{{- include "lameduck-demo.seconds" (list "preStop.sleepSeconds" .Values.preStop.sleepSeconds) -}}
{{- else if or (eq $mode "none") (eq $mode "http") -}}
0
{{- else -}}
{{- fail (printf "lameduck-demo: preStop.mode=%q: unknown; use none, http or sleep" $mode) -}}
{{- end -}}
{{- end -}}

{{/* The longest lame-duck window: the delay, or in idle mode the drain timeout (never below the delay). */}}
{{- define "lameduck-demo.windowSeconds" -}}
{{- $s := .Values.shutdown -}}
{{- $delay := include "lameduck-demo.seconds" (list "shutdown.delaySeconds" $s.delaySeconds) | int64 -}}
{{- if eq $s.drainMode "idle" -}}
{{- $bound := include "lameduck-demo.seconds" (list "shutdown.drainTimeoutSeconds" $s.drainTimeoutSeconds) | int64 -}}
{{- max $delay $bound -}}
{{- else if eq $s.drainMode "delay" -}}
{{- $delay -}}
{{- else -}}
{{- fail (printf "lameduck-demo: shutdown.drainMode=%q: unknown; use delay or idle" $s.drainMode) -}}
{{- end -}}
{{- end -}}

{{- define "lameduck-demo.teardownSeconds" -}}
{{- $t := include "lameduck-demo.seconds" (list "shutdown.teardownSeconds" .Values.shutdown.teardownSeconds) | int64 -}}
{{- if le $t 0 -}}
{{- fail "lameduck-demo: shutdown.teardownSeconds=0: must be positive; a zero teardown cuts every in-flight request at once" -}}
{{- end -}}
{{- $t -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds: preStop + longest window + teardown + margin, unless the values set it.
The rule is in docs/probes-and-shutdown.md, "Sizing terminationGracePeriodSeconds".
*/}}
{{- define "lameduck-demo.graceSeconds" -}}
{{- if not (kindIs "invalid" .Values.terminationGracePeriodSeconds) -}}
{{- include "lameduck-demo.seconds" (list "terminationGracePeriodSeconds" .Values.terminationGracePeriodSeconds) -}}
{{- else -}}
{{- $pre := include "lameduck-demo.preStopSeconds" . | int64 -}}
{{- $win := include "lameduck-demo.windowSeconds" . | int64 -}}
{{- $td := include "lameduck-demo.teardownSeconds" . | int64 -}}
{{- $margin := include "lameduck-demo.seconds" (list "shutdown.marginSeconds" .Values.shutdown.marginSeconds) | int64 -}}
{{- add $pre $win $td $margin -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the /prestop token, in "http" mode. */}}
{{- define "lameduck-demo.tokenSecret" -}}
{{- default (printf "%s-prestop" (include "lameduck-demo.fullname" .)) .Values.preStop.http.existingSecret -}}
{{- end -}}
