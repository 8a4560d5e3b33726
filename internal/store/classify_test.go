package store

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TestClassifyS3Errors covers answers versitygw does not give but AWS S3
// does: gocloud reports them all as gcerrors.Unknown.
func TestClassifyS3Errors(t *testing.T) {
	status := func(code int) error {
		return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}},
			Err:      errors.New("boom"),
		}}
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"409 ConditionalRequestConflict", &smithy.GenericAPIError{Code: "ConditionalRequestConflict"}, ErrConflict},
		{"503 SlowDown", &smithy.GenericAPIError{Code: "SlowDown"}, ErrUnavailable},
		{"bare 409", status(http.StatusConflict), ErrConflict},
		{"bare 503", status(http.StatusServiceUnavailable), ErrUnavailable},
		{"deadline", context.DeadlineExceeded, ErrTimeout},
	} {
		got := classify(context.Background(), "create", "k", c.err)
		if !errors.Is(got, c.want) || !IsRetryable(got) {
			t.Errorf("%s: classified as %v, want %v (retryable)", c.name, got, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := classify(ctx, "create", "k", context.Canceled); IsRetryable(got) {
		t.Errorf("a request the caller cancelled was classified retryable: %v", got)
	}
}

// TestClosedConnectionIsNotTheEnd: a store endpoint that closes each
// connection without answering (a store restarting behind a proxy, as
// the soak does) fails every request in a way callers retry, never with an
// error that is io.EOF, which readers take for the end of a listing or
// an object: an empty listing would pass for an empty log.
func TestClosedConnectionIsNotTheEnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Read the request, then close without a word.
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Read(make([]byte, 4096))
			_ = c.Close()
		}
	}()
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Open(ctx, "s3://bucket?region=us-east-1&use_path_style=true&disable_https=true&endpoint="+url.QueryEscape("http://"+ln.Addr().String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var listErr error
	listed := 0
	for _, err := range b.List(ctx, "sessions/") {
		if err != nil {
			listErr = err
			break
		}
		listed++
	}
	_, getErr := b.Get(ctx, "sessions/x")
	_, attrErr := b.Attributes(ctx, "sessions/x")
	for name, err := range map[string]error{"list": listErr, "get": getErr, "attributes": attrErr} {
		if err == nil || errors.Is(err, io.EOF) || !IsRetryable(err) {
			t.Errorf("%s on a closed connection: %v; want a retryable error that is not io.EOF", name, err)
		}
	}
	if listed != 0 {
		t.Errorf("listing yielded %d objects", listed)
	}
}
