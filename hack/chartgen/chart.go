package main

import (
	"bytes"
	"embed"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// chartValues are the defaults of values.yaml, read from config/ so that
// the chart with default values installs what config/default does.
type chartValues struct {
	ImageRepository, ImageTag string
	Stores                    string
	CredentialsSecret         string
	Resources                 any
	// ShardBy is config/shards' data.by.
	ShardBy string
}

// generated heads every file chartgen writes from config/.
const generated = "# Generated from config/ by hack/chartgen (make chart): edit config/, not this file.\n"

//go:embed static/*
var static embed.FS

// generate returns the chart's files, by path within the chart.
func generate(root string) (map[string][]byte, error) {
	base, err := kustomizeBuild(root, "config/default")
	if err != nil {
		return nil, err
	}
	monitoring, err := kustomizeBuild(root, "config/prometheus")
	if err != nil {
		return nil, err
	}
	// Everything config/shards installs (its policies, their ConfigMap, the
	// operators' ClusterRole) is in the chart only with shards on.
	shards, err := kustomizeBuild(root, "config/shards")
	if err != nil {
		return nil, err
	}
	roleBindings, err := readObjects(filepath.Join(root, "config", "namespaced", "rolebindings.yaml"))
	if err != nil {
		return nil, err
	}
	if len(roleBindings) == 0 || str(roleBindings[0], "kind") != "RoleBinding" {
		return nil, fmt.Errorf("config/namespaced/rolebindings.yaml: no RoleBinding to make the watched namespaces' from")
	}

	files := map[string][]byte{}
	values := &chartValues{}
	add := func(o object, wrap func(string) string) error {
		name := "templates/" + strings.ToLower(str(o, "kind")) + "-" + str(o, "metadata", "name") + ".yaml"
		t, err := templateObject(o, values)
		if err != nil {
			return fmt.Errorf("%s: %w", objectKey(o), err)
		}
		if _, dup := files[name]; dup {
			return fmt.Errorf("two objects would be written to %s", name)
		}
		files[name] = []byte(generated + wrap(t))
		return nil
	}
	for _, o := range base {
		if str(o, "kind") == "CustomResourceDefinition" {
			// Helm installs crds/ as they are, before the templates.
			data, err := yaml.Marshal(o)
			if err != nil {
				return nil, err
			}
			files["crds/"+str(o, "metadata", "name")+".yaml"] = append([]byte(generated), data...)
			continue
		}
		if err := add(o, clusterWideUnlessWatching(o)); err != nil {
			return nil, err
		}
	}
	if err := add(watchedNamespaceRoleBinding(roleBindings[0]), rangeWatchedNamespaces); err != nil {
		return nil, err
	}
	for _, o := range shards {
		if err := add(o, onlyIf(".Values.shards")); err != nil {
			return nil, err
		}
	}
	for _, o := range monitoring {
		if err := add(o, onlyIf(".Values.monitoring."+lowerFirst(str(o, "kind")))); err != nil {
			return nil, err
		}
	}
	if values.ImageRepository == "" || values.Stores == "" {
		return nil, fmt.Errorf("config/default has no manager Deployment or no turnlog-stores ConfigMap")
	}
	if values.ShardBy == "" {
		return nil, fmt.Errorf("config/shards has no turnlog-shards ConfigMap saying what picks a shard (data.by)")
	}
	return addStatic(files, values)
}

// addStatic adds Chart.yaml, values.yaml and the helpers, which are
// templates of chartgen's own filled with what config/ holds.
func addStatic(files map[string][]byte, values *chartValues) (map[string][]byte, error) {
	t, err := template.New("").Funcs(template.FuncMap{"yaml": keyToYAML}).ParseFS(static, "static/*")
	if err != nil {
		return nil, err
	}
	for name, out := range map[string]string{"Chart.yaml": "Chart.yaml", "values.yaml": "values.yaml", "_helpers.tpl": "templates/_helpers.tpl", "helmignore": ".helmignore"} {
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, name, values); err != nil {
			return nil, err
		}
		files[out] = buf.Bytes()
	}
	return files, nil
}

// keyToYAML writes key: value as YAML, for values.yaml.
func keyToYAML(key string, value any) (string, error) {
	data, err := yaml.Marshal(map[string]any{key: value})
	return strings.TrimSuffix(string(data), "\n"), err
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// onlyIf renders a template only when cond holds.
func onlyIf(cond string) func(string) string {
	return func(t string) string { return "{{- if " + cond + " }}\n" + t + "{{- end }}\n" }
}

// clusterWideUnlessWatching leaves out the ClusterRoleBinding of the
// manager's own ClusterRole when it watches listed namespaces: it gets
// RoleBindings there instead, as in config/namespaced. It also renders the
// manager Deployment once per shard.
func clusterWideUnlessWatching(o object) func(string) string {
	switch {
	case str(o, "kind") == "ClusterRoleBinding" && str(o, "metadata", "name") == managerName:
		return onlyIf("not .Values.watchNamespaces")
	case str(o, "kind") == "Deployment" && str(o, "metadata", "name") == managerName:
		return perShard
	}
	return func(t string) string { return t }
}

// watchedNamespaceRoleBinding is config/namespaced's RoleBinding with its
// namespace left to the range over .Values.watchNamespaces.
func watchedNamespaceRoleBinding(o object) object {
	o["metadata"].(map[string]any)["namespace"] = inlineSentinel("watchedNamespace")
	return o
}

func rangeWatchedNamespaces(t string) string {
	return "{{- range .Values.watchNamespaces }}\n---\n" + t + "{{- end }}\n"
}

const managerName = "turnlog-manager"

// templateObject turns o into a template: Helm's labels in its metadata,
// and the values in place of what config/ sets.
func templateObject(o object, values *chartValues) (string, error) {
	meta, _ := o["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		meta["labels"] = labels
	}
	labels[labelsSentinel] = labelsSentinel
	blocks := map[string]blockFunc{}
	switch {
	case str(o, "kind") == "Deployment" && str(o, "metadata", "name") == managerName:
		if err := templateManager(o, values, blocks); err != nil {
			return "", err
		}
	case str(o, "kind") == "ConfigMap" && str(o, "metadata", "name") == "turnlog-stores":
		values.Stores = str(o, "data", "stores")
		o["data"].(map[string]any)["stores"] = inlineSentinel("stores")
	case str(o, "kind") == "ConfigMap" && str(o, "metadata", "name") == "turnlog-shards":
		values.ShardBy = str(o, "data", "by")
		o["data"].(map[string]any)["shards"] = inlineSentinel("shardNames")
		o["data"].(map[string]any)["by"] = inlineSentinel("shardBy")
	}
	data, err := yaml.Marshal(o)
	if err != nil {
		return "", err
	}
	return expandSentinels(escapeActions(string(data)), blocks)
}

// escapeActions keeps text that looks like a template action, such as the
// alerts' {{ $labels.store }}, as it is.
func escapeActions(s string) string {
	return strings.ReplaceAll(s, "{{", `{{ "{{" }}`)
}

// Sentinels stand, in the marshalled YAML, where template text goes.
const labelsSentinel = "@@labels@@"

func inlineSentinel(name string) string { return "@@" + name + "@@" }

// inlineTemplates replace a quoted inline sentinel.
var inlineTemplates = map[string]string{
	"image":            `{{ include "turnlog.image" $ | quote }}`,
	"stores":           `{{ .Values.stores | quote }}`,
	"watchedNamespace": `{{ . }}`,
	"credentialsName":  `{{ . }}`,
	"managerName":      `turnlog-manager{{ if ne (toString $shard) "" }}-shard-{{ $shard }}{{ end }}`,
	"shardNames":       `{{ until (int .Values.shards) | join " " | quote }}`,
	"shardBy":          `{{ .Values.shardBy | quote }}`,
}

// A blockFunc writes the lines that replace "key: <sentinel>", whose key
// starts at column col; line is the text before the key ("- " included).
type blockFunc func(line string, col int) (string, error)

var (
	labelsLine     = regexp.MustCompile(`^(\s*)'` + labelsSentinel + `': '` + labelsSentinel + `'$`)
	shardLabelLine = regexp.MustCompile(`^(\s*)'` + shardLabelSentinel + `': '` + shardLabelSentinel + `'$`)
	blockLine      = regexp.MustCompile(`^(\s*(?:- )?)([\w-]+): '@@(\w+)@@'$`)
	inlineQuoted   = regexp.MustCompile(`'@@(\w+)@@'`)
)

func expandSentinels(s string, blocks map[string]blockFunc) (string, error) {
	var out strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if m := labelsLine.FindStringSubmatch(strings.TrimSuffix(line, "\n")); m != nil {
			fmt.Fprintf(&out, "%s{{- include \"turnlog.labels\" $ | nindent %d }}\n", m[1], len(m[1]))
			continue
		}
		if m := shardLabelLine.FindStringSubmatch(strings.TrimSuffix(line, "\n")); m != nil {
			fmt.Fprintf(&out, "%s\n%s%s: {{ $shard | quote }}\n{{- end }}\n", ifSharded, m[1], turnlogv1.LabelShard)
			continue
		}
		if m := blockLine.FindStringSubmatch(strings.TrimSuffix(line, "\n")); m != nil && blocks[m[3]] != nil {
			text, err := blocks[m[3]](m[1], len(m[1]))
			if err != nil {
				return "", err
			}
			out.WriteString(text)
			continue
		}
		out.WriteString(line)
	}
	return expandInline(out.String())
}

// expandInline replaces the inline sentinels, those the blocks wrote too.
func expandInline(s string) (string, error) {
	var unknown error
	s = inlineQuoted.ReplaceAllStringFunc(s, func(q string) string {
		name := strings.Trim(q, "'@")
		if t, ok := inlineTemplates[name]; ok {
			return t
		}
		unknown = fmt.Errorf("no template for %s", q)
		return q
	})
	return s, unknown
}

// indentLines indents every line of s by col spaces.
func indentLines(s string, col int) string {
	pad := strings.Repeat(" ", col)
	var out strings.Builder
	for _, l := range strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n") {
		out.WriteString(pad + l)
	}
	return out.String() + "\n"
}
