// Command chartgen writes the Helm chart in charts/turnlog from the
// manifests in config/: it builds config/default (and config/prometheus)
// with the pinned kustomize, as make build-installer does, and turns the
// few settings an operator chooses (image, stores, credentials Secret,
// resources, fairness limits, watched namespaces, monitoring) into values.
// The chart is generated rather than written by hand so that it cannot
// drift from config/; chartgen_test.go fails when the committed chart is
// not what chartgen writes (make chart).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	root := flag.String("root", ".", "the repository's root (holds config/ and hack/tools)")
	out := flag.String("out", "charts/turnlog", "the chart directory to write (replaced)")
	flag.Parse()
	files, err := generate(*root)
	if err == nil {
		err = writeChart(*out, files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}

// writeChart replaces dir with files (paths relative to dir), so a
// template whose object left config/ disappears from the chart too.
func writeChart(dir string, files map[string][]byte) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
