package sessionio

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// filled returns a value of type T whose every field holds a value of its
// own, so that a field lost, or landing in another, at a crossing shows.
func filled[T any](t *testing.T) T {
	t.Helper()
	var v T
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(rv.Type().Field(i).Name + "-value")
		default:
			t.Fatalf("%s.%s is a %s: give it a value here", rv.Type(), rv.Type().Field(i).Name, f.Kind())
		}
	}
	return v
}

// sameFields fails unless a and b have the same field names with the same
// values.
func sameFields(t *testing.T, a, b any) {
	t.Helper()
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.NumField() != vb.NumField() {
		t.Fatalf("%s has %d fields, %s %d", va.Type(), va.NumField(), vb.Type(), vb.NumField())
	}
	for i := range va.NumField() {
		name := va.Type().Field(i).Name
		fb := vb.FieldByName(name)
		if !fb.IsValid() {
			t.Errorf("%s.%s has no field in %s", va.Type(), name, vb.Type())
			continue
		}
		if got, want := fb.Interface(), va.Field(i).Interface(); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

// Every field of a Session's adapter reaches the replay target, and every
// field of a target reaches a Session's spec or status, under the same
// name and, in JSON, under the same key: the pi package writes both with
// one shape.
func TestAdapterRoundTrip(t *testing.T) {
	api := filled[turnlogv1.Adapter](t)
	target := Target(api)
	sameFields(t, api, target)
	if back := APIAdapter(target); back != api {
		t.Errorf("APIAdapter(Target(%+v)) = %+v", api, back)
	}

	domain := filled[turnlog.Adapter](t)
	spec := APIAdapter(domain)
	sameFields(t, domain, spec)
	if back := Target(spec); back != domain {
		t.Errorf("Target(APIAdapter(%+v)) = %+v", domain, back)
	}

	apiJSON, _ := json.Marshal(spec)
	domainJSON, _ := json.Marshal(domain)
	if string(apiJSON) != string(domainJSON) {
		t.Errorf("the same adapter in JSON:\nSession: %s\nlog:     %s", apiJSON, domainJSON)
	}
}

// enums collects, from a CRD's schema, the enum of every property named
// one of names, keyed by the property's path.
func enums(node any, path string, names []string, out map[string][]string) {
	switch n := node.(type) {
	case map[string]any:
		if props, ok := n["properties"].(map[string]any); ok {
			for _, name := range names {
				if p, ok := props[name].(map[string]any); ok {
					out[path+"."+name] = enumOf(p)
				}
			}
		}
		for k, v := range n {
			enums(v, path+"."+k, names, out)
		}
	case []any:
		for i, v := range n {
			enums(v, fmt.Sprintf("%s[%d]", path, i), names, out)
		}
	}
}

func enumOf(prop map[string]any) []string {
	var values []string
	list, _ := prop["enum"].([]any)
	for _, v := range list {
		values = append(values, fmt.Sprint(v))
	}
	return values
}

// The CRDs' enums of spec.adapter.refusedBlocks, spec.adapter.releaseLine
// (and the status's and a fork target's) are the log's choices: the
// API server accepts exactly what the workers replay by. The kubebuilder
// markers cannot name Go constants, so this holds them together.
func TestCRDEnumsAreTheLogsChoices(t *testing.T) {
	want := map[string][]string{
		"refusedBlocks": turnlog.RefusedBlocksChoices,
		"releaseLine":   turnlog.ReleaseLines,
	}
	for file, props := range map[string][]string{
		"turnlog.dev_sessions.yaml":     {"refusedBlocks", "releaseLine"},
		"turnlog.dev_sessionforks.yaml": {"refusedBlocks"},
	} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", file))
		if err != nil {
			t.Fatal(err)
		}
		var crd any
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		found := map[string][]string{}
		enums(crd, "", props, found)
		for _, prop := range props {
			n := 0
			for path, got := range found {
				if filepath.Ext(path) != "."+prop {
					continue
				}
				n++
				if !slices.Equal(got, want[prop]) {
					t.Errorf("%s %s: enum %q, the log's choices are %q", file, path, got, want[prop])
				}
			}
			if n == 0 {
				t.Errorf("%s: no property %s", file, prop)
			}
		}
	}
}
