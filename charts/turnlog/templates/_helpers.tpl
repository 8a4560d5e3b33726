{{/*
Generated from config/ by hack/chartgen (make chart): edit config/, not this file.
*/}}

{{/* The image of the manager and of the worker pods it runs. */}}
{{- define "turnlog.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/*
Labels Helm adds to the metadata of every object (never to selectors, which
stay those of config/, so that an install from dist/install.yaml can be
taken over by a release).
*/}}
{{- define "turnlog.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
