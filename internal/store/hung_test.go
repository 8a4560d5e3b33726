package store

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// An S3 endpoint that accepts requests and never answers fails each
// request after the response header timeout, as a retryable timeout,
// instead of holding its caller for as long as the caller waits.
func TestS3EndpointThatNeverAnswers(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hung.Close()
	defer close(release)
	b, err := Open(context.Background(), "s3://logs?region=us-east-1&use_path_style=true&disable_https=true&endpoint="+hung.URL,
		&Options{AccessKeyID: "AKID", SecretAccessKey: "secret", ResponseHeaderTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := b.Attributes(context.Background(), "log/00000000000000000000.jsonl")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTimeout) || !IsRetryable(err) {
			t.Fatalf("Attributes from an endpoint that never answers = %v, want a retryable timeout", err)
		}
		t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(time.Minute):
		t.Fatal("Attributes from an endpoint that never answers still waiting after a minute")
	}
}
