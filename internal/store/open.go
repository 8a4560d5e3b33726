package store

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	_ "gocloud.dev/blob/gcsblob"   // gs://
	_ "gocloud.dev/blob/memblob"   // mem://
	"gocloud.dev/blob/s3blob"
)

// Options adjust Open. The zero value is fine.
type Options struct {
	// AccessKeyID and SecretAccessKey, when both are set, are static
	// credentials for s3:// URLs. Otherwise the AWS default chain applies
	// (environment, shared config, web identity).
	AccessKeyID     string
	SecretAccessKey string
	// ResponseHeaderTimeout bounds how long an s3:// request waits for the
	// answer's headers once it is sent; zero is DefaultResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
}

// DefaultResponseHeaderTimeout is how long an s3:// request waits for an
// answer. The SDK's HTTP client waits forever by default, so an endpoint
// that accepts connections and never answers (a dead proxy, a stuck
// gateway) would hold its caller until the caller gives up; an answer's
// headers come within a second or two even for a server-side copy of a
// segment (at most MaxSegmentBytes), so 15 s is a store that is not
// answering, and a few of them in a row open its circuit breaker (Guard).
const DefaultResponseHeaderTimeout = 15 * time.Second

// Open opens the bucket named by a URL:
//
//	mem://                          an in-process bucket, gone on Close
//	file:///abs/dir[?create_dir=true]
//	s3://bucket?region=R[&endpoint=http://host:port&use_path_style=true&disable_https=true]
//	gs://bucket
//	azblob://container[?domain=D&protocol=P&localemu=true]
//
// Only the query parameters in allowedParams are accepted (see CheckURL);
// credentials and identities come from the process's environment (the
// AWS, Google and Azure default chains) or, for s3://, from opts, never
// from the URL.
func Open(ctx context.Context, rawURL string, opts *Options) (Bucket, error) {
	if opts == nil {
		opts = &Options{}
	}
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "file":
		return openFile(u)
	case "s3":
		return openS3(ctx, u, opts)
	default: // mem, gs, azblob
		b, err := blob.OpenBucket(ctx, rawURL)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", u.Redacted(), err)
		}
		return &blobBucket{b: b}, nil
	}
}

// allowedParams are the query parameters Open accepts, by scheme. Every
// other parameter is refused, because the libraries behind Open read
// files (gs private_key_path, s3 web_identity_token_file), pick
// identities (s3 role and profile, azblob storage_account) or hosts (gs
// universe_domain) from them: whoever writes the URL would choose what the
// process reads and whom it authenticates as.
var allowedParams = map[string][]string{
	"mem":    nil,
	"file":   {"create_dir"},
	"s3":     {"region", "endpoint", "use_path_style", "disable_https", "dualstack", "fips", "request_checksum_calculation", "response_checksum_validation"},
	"gs":     nil,
	"azblob": {"domain", "protocol", "localemu"},
}

// CheckURL reports whether Open would accept rawURL's form: a supported
// scheme, no user info or fragment, and only the allowed query
// parameters, each given once. It does not contact the store.
func CheckURL(rawURL string) error {
	_, err := parseURL(rawURL)
	return err
}

func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open bucket: %w", err)
	}
	allowed, ok := allowedParams[u.Scheme]
	if !ok {
		return nil, fmt.Errorf("open bucket %s: unsupported scheme %q (want mem, file, s3, gs or azblob)", u.Redacted(), u.Scheme)
	}
	if u.User != nil {
		return nil, fmt.Errorf("open bucket %s: credentials do not go in the URL; use the environment", u.Redacted())
	}
	if u.Fragment != "" || u.Opaque != "" {
		return nil, fmt.Errorf("open bucket %s: not a store URL", u.Redacted())
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: query: %w", u.Redacted(), err)
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range q {
			if !yield(k) {
				return
			}
		}
	}) {
		if !slices.Contains(allowed, k) {
			want := "none"
			if len(allowed) > 0 {
				want = strings.Join(allowed, ", ")
			}
			return nil, fmt.Errorf("open bucket %s: parameter %q is not supported for %s:// URLs (supported: %s)", u.Redacted(), k, u.Scheme, want)
		}
		if len(q[k]) > 1 {
			return nil, fmt.Errorf("open bucket %s: parameter %q given more than once", u.Redacted(), k)
		}
	}
	return u, nil
}

func openFile(u *url.URL) (Bucket, error) {
	if u.Host != "" && u.Host != "localhost" {
		return nil, fmt.Errorf("open bucket %s: file URLs name a local directory: file:///path", u.Redacted())
	}
	create := false
	if q := u.Query(); q.Has("create_dir") {
		v, err := strconv.ParseBool(q.Get("create_dir"))
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: create_dir: %w", u.Redacted(), err)
		}
		create = v
	}
	if u.Path == "" {
		return nil, fmt.Errorf("open bucket %s: no directory", u.Redacted())
	}
	if create {
		if err := os.MkdirAll(u.Path, 0o755); err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", u.Redacted(), err)
		}
	}
	b, err := openFileBucket(u.Path)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", u.Redacted(), err)
	}
	return b, nil
}

func openS3(ctx context.Context, u *url.URL, opts *Options) (Bucket, error) {
	q := u.Query()
	var clientOpts []func(*s3.Options)
	for _, p := range []struct {
		name string
		set  func(*s3.Options, bool)
	}{
		{"use_path_style", func(o *s3.Options, v bool) { o.UsePathStyle = v }},
		{"disable_https", func(o *s3.Options, v bool) { o.EndpointOptions.DisableHTTPS = v }},
	} {
		if !q.Has(p.name) {
			continue
		}
		v, err := strconv.ParseBool(q.Get(p.name))
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %s: %w", u.Redacted(), p.name, err)
		}
		q.Del(p.name)
		set := p.set
		clientOpts = append(clientOpts, func(o *s3.Options) { set(o, v) })
	}
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", u.Redacted(), err)
	}
	if opts.AccessKeyID != "" && opts.SecretAccessKey != "" {
		cfg.Credentials = credentials.NewStaticCredentialsProvider(opts.AccessKeyID, opts.SecretAccessKey, "")
	}
	headerTimeout := opts.ResponseHeaderTimeout
	if headerTimeout <= 0 {
		headerTimeout = DefaultResponseHeaderTimeout
	}
	cfg.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.ResponseHeaderTimeout = headerTimeout
	})
	// The SDK's own retries (3 tries, backoff up to 20 s) would multiply
	// with the callers' (sessionlog's retry budget): one dead endpoint cost
	// a minute per look. The callers retry; the client tries once.
	clientOpts = append(clientOpts, func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
	client := s3.NewFromConfig(cfg, clientOpts...)
	b, err := s3blob.OpenBucket(ctx, client, u.Host, &s3blob.Options{RequestChecksumCalculation: cfg.RequestChecksumCalculation})
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", u.Redacted(), err)
	}
	return &blobBucket{b: b, s3: true}, nil
}
