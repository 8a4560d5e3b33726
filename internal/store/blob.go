package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// blobBucket adapts a gocloud *blob.Bucket to Bucket and classifies its
// errors into this package's sentinels.
type blobBucket struct {
	b *blob.Bucket
	// s3 makes writes single-request: see write.
	s3 bool
}

func (g *blobBucket) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	data, err := g.b.ReadAll(ctx, key)
	if err != nil {
		return nil, classify(ctx, "get", key, err)
	}
	return data, nil
}

func (g *blobBucket) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	r, err := g.b.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, classify(ctx, "read", key, err)
	}
	return &classifyingReader{ctx: ctx, key: key, r: r}, nil
}

// classifyingReader classifies errors that surface mid-stream (a dropped
// connection) like those of the request that opened it.
type classifyingReader struct {
	ctx context.Context
	key string
	r   *blob.Reader
}

func (c *classifyingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		err = classify(c.ctx, "read", c.key, err)
	}
	return n, err
}

func (c *classifyingReader) Close() error { return c.r.Close() }

// Size is the size of the whole object, which lets a reader that wants all
// of it allocate once.
func (c *classifyingReader) Size() int64 { return c.r.Size() }

func (g *blobBucket) Attributes(ctx context.Context, key string) (Attributes, error) {
	if err := ValidateKey(key); err != nil {
		return Attributes{}, err
	}
	a, err := g.b.Attributes(ctx, key)
	if err != nil {
		return Attributes{}, classify(ctx, "attributes", key, err)
	}
	return Attributes{Size: a.Size, ModTime: a.ModTime, Metadata: a.Metadata}, nil
}

func (g *blobBucket) PutIfAbsent(ctx context.Context, key string, data []byte, md map[string]string) error {
	return g.write(ctx, "create", key, data, md, true)
}

func (g *blobBucket) Put(ctx context.Context, key string, data []byte, md map[string]string) error {
	return g.write(ctx, "put", key, data, md, false)
}

func (g *blobBucket) write(ctx context.Context, op, key string, data []byte, md map[string]string, ifNotExist bool) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := validateMetadata(md); err != nil {
		return err
	}
	opts := &blob.WriterOptions{
		ContentType: contentType(key),
		Metadata:    md,
		IfNotExist:  ifNotExist,
		// One request per object: log segments are small enough that a
		// multipart upload would only add round trips (and S3 applies
		// If-None-Match to the completing request of a multipart upload).
		BufferSize: max(len(data)+1, 5<<20),
	}
	if !g.s3 {
		opts.BufferSize = 0
	}
	if err := g.b.WriteAll(ctx, key, data, opts); err != nil {
		if ifNotExist && gcerrors.Code(err) == gcerrors.FailedPrecondition {
			return fmt.Errorf("%s %q: %w: %w", op, key, ErrExists, err)
		}
		return classify(ctx, op, key, err)
	}
	return nil
}

func (g *blobBucket) Copy(ctx context.Context, dst, src string) error {
	if err := ValidateKey(dst); err != nil {
		return err
	}
	if err := ValidateKey(src); err != nil {
		return err
	}
	if err := g.b.Copy(ctx, dst, src, nil); err != nil {
		return classify(ctx, "copy to "+dst+" from", src, err)
	}
	return nil
}

func (g *blobBucket) List(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		if err := validatePrefix(prefix); err != nil {
			yield(Object{}, err)
			return
		}
		it := g.b.List(&blob.ListOptions{Prefix: prefix})
		for {
			o, err := it.Next(ctx)
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(Object{}, classify(ctx, "list", prefix, err))
				return
			}
			if !yield(Object{Key: o.Key, Size: o.Size}, nil) {
				return
			}
		}
	}
}

func (g *blobBucket) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := g.b.Delete(ctx, key); err != nil {
		return classify(ctx, "delete", key, err)
	}
	return nil
}

func (g *blobBucket) Close() error { return g.b.Close() }

func contentType(key string) string {
	switch {
	case len(key) > 6 && key[len(key)-6:] == ".jsonl":
		return "application/jsonl"
	case len(key) > 5 && key[len(key)-5:] == ".json":
		return "application/json"
	}
	return "application/octet-stream"
}

// classify wraps err with op and key, adding the sentinel that says what a
// caller can do about it. The gocloud error stays in the chain, so
// gcerrors.Code still works on the result.
func classify(ctx context.Context, op, key string, err error) error {
	var sentinel error
	cause := err
	if errors.Is(err, io.EOF) {
		// A connection closed before the answer came: a store restarting,
		// a proxy dropping it. Callers take io.EOF for the end of what
		// they read, so it must not stay in the chain, or a listing or a
		// read cut short would pass for a short log.
		cause = connectionClosedError{err.Error()}
		sentinel = ErrUnavailable
	}
	switch {
	case ctx.Err() != nil:
		// The caller gave up; that is not the service's fault and not
		// worth a retry.
		return fmt.Errorf("%s %q: %w", op, key, cause)
	case sentinel != nil:
	case gcerrors.Code(err) == gcerrors.NotFound:
		sentinel = ErrNotFound
	case isConflict(err):
		sentinel = ErrConflict
	case isTimeout(err):
		sentinel = ErrTimeout
	case isUnavailable(err):
		sentinel = ErrUnavailable
	default:
		return fmt.Errorf("%s %q: %w", op, key, err)
	}
	return fmt.Errorf("%s %q: %w: %w", op, key, sentinel, cause)
}

// connectionClosedError is an error that wrapped io.EOF, by its message
// only.
type connectionClosedError struct{ msg string }

func (e connectionClosedError) Error() string { return e.msg }

// isConflict recognises S3's 409 answers to racing conditional writes, which
// gocloud's S3 driver reports as gcerrors.Unknown.
func isConflict(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ConditionalRequestConflict", "OperationAborted":
			return true
		}
	}
	return httpStatus(err) == http.StatusConflict && gcerrors.Code(err) != gcerrors.AlreadyExists
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func isUnavailable(err error) bool {
	switch gcerrors.Code(err) {
	case gcerrors.ResourceExhausted, gcerrors.Internal:
		return true
	}
	if s := httpStatus(err); s == http.StatusTooManyRequests || s >= 500 {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout":
			return true
		}
	}
	var oe *net.OpError
	return errors.As(err, &oe) || errors.Is(err, io.ErrUnexpectedEOF)
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}
