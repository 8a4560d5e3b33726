// Package kubeapply creates or updates the objects of YAML manifest files:
// how the local cluster, `make dev` and the test suites install what
// config/ holds beside the CRDs (the admission policy) without kustomize.
package kubeapply

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Apply creates every object of the manifest files at paths, or updates
// it to the file's content if it exists.
func Apply(ctx context.Context, cfg *rest.Config, paths ...string) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	for _, path := range paths {
		objs, err := read(path)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if err := apply(ctx, c, obj); err != nil {
				return fmt.Errorf("%s: %s %s: %w", path, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}

func read(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for n := 1; ; n++ {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, n, err)
		}
		if len(obj.Object) == 0 {
			continue // an empty document, e.g. after a leading ---
		}
		if obj.GetKind() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("%s: document %d: no kind or metadata.name", path, n)
		}
		out = append(out, obj)
	}
}

func apply(ctx context.Context, c client.Client, obj *unstructured.Unstructured) error {
	err := c.Create(ctx, obj.DeepCopy())
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(obj.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), current); err != nil {
		return err
	}
	update := obj.DeepCopy()
	update.SetResourceVersion(current.GetResourceVersion())
	return c.Update(ctx, update)
}
