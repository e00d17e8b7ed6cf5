{{/* The container image: by digest when one is given, else by tag. */}}
{{- define "priogate.image" -}}
{{- if .Values.image.digest -}}
{{ printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else -}}
{{ printf "%s:%s" .Values.image.repository (toString .Values.image.tag) }}
{{- end -}}
{{- end -}}

{{/* Helm's recommended labels (https://helm.sh/docs/chart_best_practices/labels/), on every object. */}}
{{- define "priogate.labelsWithoutName" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}
{{- define "priogate.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{ include "priogate.labelsWithoutName" . }}
{{- end -}}
