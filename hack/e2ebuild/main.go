// Command e2ebuild builds what the end-to-end suite runs (the turnlog
// binary and, with --images, the worker images) before the suite starts:
//
//	go run ./hack/e2ebuild --out bin/e2e --images
//
// The suite finds them through E2E_BUILD_DIR (see docs/e2e.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/turnlog/turnlog/test/e2e/e2ebuild"
)

func main() {
	out := flag.String("out", "bin/e2e", "directory to build into")
	withImages := flag.Bool("images", false, "also build the worker images for the container node")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err == nil {
		var dir string
		if dir, err = filepath.Abs(*out); err == nil {
			_, err = e2ebuild.Build(ctx, root, dir, *withImages)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2ebuild:", err)
		os.Exit(1)
	}
}
