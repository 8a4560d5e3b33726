package store

import (
	"context"
	"errors"
	"net/http"
	"testing"

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
