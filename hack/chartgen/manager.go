package main

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

const credentialsFlag = "--worker-credentials-secret="

// templateManager puts the values into the manager Deployment: its image
// (and the worker pods', the same), resources, arguments and credentials
// Secret, and records config/'s settings of them as the defaults. A
// Deployment whose shape chartgen does not know fails, rather than a
// setting silently staying fixed in the chart.
func templateManager(o object, values *chartValues, blocks map[string]blockFunc) error {
	c, err := managerContainer(o)
	if err != nil {
		return err
	}
	if err := templateShard(o); err != nil {
		return err
	}
	image, _ := c["image"].(string)
	i := strings.LastIndex(image, ":")
	if i < 0 {
		return fmt.Errorf("manager image %q has no tag", image)
	}
	values.ImageRepository, values.ImageTag = image[:i], image[i+1:]
	c["image"] = inlineSentinel("image")
	if err := templateWorkerImage(c, image); err != nil {
		return err
	}
	values.Resources = c["resources"]
	c["resources"] = inlineSentinel("resources")
	blocks["resources"] = func(line string, col int) (string, error) {
		return fmt.Sprintf("%sresources:\n%*s{{- toYaml $.Values.resources | nindent %d }}\n", line, col+2, "", col+2), nil
	}
	args, err := templateArgs(c, values)
	if err != nil {
		return err
	}
	blocks["args"] = args
	envFrom, err := templateEnvFrom(c, values.CredentialsSecret)
	if err != nil {
		return err
	}
	blocks["envFrom"] = envFrom
	return nil
}

func managerContainer(o object) (map[string]any, error) {
	containers, _ := field(o, "spec", "template", "spec", "containers").([]any)
	for _, c := range containers {
		if c, ok := c.(map[string]any); ok && c["name"] == "manager" {
			return c, nil
		}
	}
	return nil, fmt.Errorf("no container named manager")
}

// templateWorkerImage: workers run the manager's image (kustomize copies it
// into TURNLOG_WORKER_IMAGE; the chart writes the same value).
func templateWorkerImage(c map[string]any, image string) error {
	env, _ := c["env"].([]any)
	for _, e := range env {
		if e, ok := e.(map[string]any); ok && e["name"] == "TURNLOG_WORKER_IMAGE" {
			if e["value"] != image {
				return fmt.Errorf("TURNLOG_WORKER_IMAGE is %v, not the manager's image %s", e["value"], image)
			}
			e["value"] = inlineSentinel("image")
			return nil
		}
	}
	return fmt.Errorf("no TURNLOG_WORKER_IMAGE in the manager's env")
}

// templateArgs keeps config/'s arguments in their order, the credentials
// Secret's only if one is set, then adds the fairness limits, watched
// namespaces (after the others, where config/namespaced appends them), the
// OTLP export and extraArgs.
func templateArgs(c map[string]any, values *chartValues) (blockFunc, error) {
	args, _ := c["args"].([]any)
	var lines []string
	for _, a := range args {
		a, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("manager argument %v is not a string", a)
		}
		if name, ok := strings.CutPrefix(a, credentialsFlag); ok {
			values.CredentialsSecret = name
			lines = append(lines, "{{- with $.Values.credentialsSecret }}", "- "+credentialsFlag+"{{ . }}", "{{- end }}")
			continue
		}
		data, err := yaml.Marshal(a)
		if err != nil {
			return nil, err
		}
		lines = append(lines, "- "+strings.TrimSuffix(string(data), "\n"))
	}
	if values.CredentialsSecret == "" {
		return nil, fmt.Errorf("no %s argument", credentialsFlag)
	}
	lines = append(lines,
		"{{- range $flag, $value := $.Values.limits }}",
		`{{- if not (kindIs "invalid" $value) }}`,
		"- --{{ kebabcase $flag }}={{ $value }}",
		"{{- end }}",
		"{{- end }}",
		"{{- range $.Values.watchNamespaces }}",
		"- --watch-namespace={{ . }}",
		"{{- end }}",
		ifSharded,
		"- --shard={{ $shard }}",
		"{{- end }}",
		"{{- with $.Values.otlp.endpoint }}",
		"- --otlp-endpoint={{ . }}",
		"{{- end }}",
		"{{- with $.Values.otlp.protocol }}",
		"- --otlp-protocol={{ . }}",
		"{{- end }}",
		"{{- if $.Values.otlp.captureContent }}",
		"- --otlp-capture-content",
		"{{- end }}",
		"{{- range $.Values.extraArgs }}",
		"- {{ . | quote }}",
		"{{- end }}",
	)
	c["args"] = inlineSentinel("args")
	return func(line string, col int) (string, error) {
		return line + "args:\n" + indentLines(strings.Join(lines, "\n"), col), nil
	}, nil
}

// templateEnvFrom gives the manager the credentials Secret's keys only if
// one is set (none with workload identity).
func templateEnvFrom(c map[string]any, secret string) (blockFunc, error) {
	envFrom, _ := c["envFrom"].([]any)
	if len(envFrom) != 1 || field(envFrom[0].(map[string]any), "secretRef", "name") != secret {
		return nil, fmt.Errorf("the manager's envFrom is not just the Secret %s", secret)
	}
	envFrom[0].(map[string]any)["secretRef"].(map[string]any)["name"] = inlineSentinel("credentialsName")
	data, err := yaml.Marshal(map[string]any{"envFrom": envFrom})
	if err != nil {
		return nil, err
	}
	c["envFrom"] = inlineSentinel("envFrom")
	return func(line string, col int) (string, error) {
		if strings.Contains(line, "-") {
			return "", fmt.Errorf("envFrom is the first key of its container")
		}
		return line + "{{- with $.Values.credentialsSecret }}\n" + indentLines(string(data), col) + line + "{{- end }}\n", nil
	}, nil
}

// The manager Deployment is rendered once per shard (.Values.shards), or
// once as config/ has it: the template ranges over $shards, "" for the one
// manager, 0..shards-1 otherwise, so its values are read from $.
const (
	ifSharded = `{{- if ne (toString $shard) "" }}`
	// shardLabelSentinel is a key put in each of the Deployment's label
	// maps, where the shard's label goes.
	shardLabelSentinel = "@@shardLabel@@"
)

// perShard renders the Deployment's template for each shard.
func perShard(t string) string {
	return "{{- $shards := list \"\" }}\n" +
		"{{- if .Values.shards }}{{ $shards = until (int .Values.shards) }}{{ end }}\n" +
		"{{- range $shard := $shards }}\n---\n" + t + "{{- end }}\n"
}

// templateShard names the Deployment after its shard and gives it, its
// selector and its pods the shard's label: each shard's Deployment
// selects its own pods.
func templateShard(o object) error {
	o["metadata"].(map[string]any)["name"] = inlineSentinel("managerName")
	for _, path := range [][]string{{"metadata", "labels"}, {"spec", "selector", "matchLabels"}, {"spec", "template", "metadata", "labels"}} {
		labels, ok := field(o, path...).(map[string]any)
		if !ok {
			return fmt.Errorf("the manager Deployment has no %s", strings.Join(path, "."))
		}
		labels[shardLabelSentinel] = shardLabelSentinel
	}
	return nil
}
