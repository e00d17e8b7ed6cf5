{{/* The container image: by digest when one is given, else by tag. */}}
{{- define "priogate.image" -}}
{{- if .Values.image.digest -}}
{{ printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else -}}
{{ printf "%s:%s" .Values.image.repository (toString .Values.image.tag) }}
{{- end -}}
{{- end -}}
