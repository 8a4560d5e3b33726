package main

import (
	"context"
	"io"

	"github.com/turnlog/turnlog/internal/worker"
)

func init() {
	register("worker", "run assembly or replay over a Session's log in object storage (worker pods)", runWorker)
}

func runWorker(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return worker.Command(ctx, args, stdout, stderr)
}
