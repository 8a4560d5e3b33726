package store

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	"gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob" // gs://
	_ "gocloud.dev/blob/memblob" // mem://
	"gocloud.dev/blob/s3blob"
)

// Options adjust Open. The zero value is fine.
type Options struct {
	// AccessKeyID and SecretAccessKey, when both are set, are static
	// credentials for s3:// URLs. Otherwise the AWS default chain applies
	// (environment, shared config, web identity).
	AccessKeyID     string
	SecretAccessKey string
}

// Open opens the bucket named by a URL:
//
//	mem://                          an in-process bucket, gone on Close
//	file:///abs/dir[?create_dir=true]
//	s3://bucket?region=R[&endpoint=http://host:port&use_path_style=true&disable_https=true]
//	gs://bucket
//	azblob://container
//
// s3:// takes the query parameters of gocloud.dev/aws.V2ConfigFromURLParams
// plus use_path_style and disable_https; gs:// and azblob:// are opened by
// gocloud with their default credentials.
func Open(ctx context.Context, rawURL string, opts *Options) (Bucket, error) {
	if opts == nil {
		opts = &Options{}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open bucket: %w", err)
	}
	switch u.Scheme {
	case "file":
		return openFile(u)
	case "s3":
		return openS3(ctx, u, opts)
	case "mem", "gs", "azblob":
		b, err := blob.OpenBucket(ctx, rawURL)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", u.Redacted(), err)
		}
		return &blobBucket{b: b}, nil
	default:
		return nil, fmt.Errorf("open bucket %s: unsupported scheme %q (want mem, file, s3, gs or azblob)", u.Redacted(), u.Scheme)
	}
}

func openFile(u *url.URL) (Bucket, error) {
	if u.Host != "" && u.Host != "localhost" {
		return nil, fmt.Errorf("open bucket %s: file URLs name a local directory: file:///path", u.Redacted())
	}
	q := u.Query()
	create := false
	for k := range q {
		if k != "create_dir" {
			return nil, fmt.Errorf("open bucket %s: unknown parameter %q", u.Redacted(), k)
		}
		v, err := strconv.ParseBool(q.Get(k))
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
	b, err := fileblob.OpenBucket(u.Path, nil)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", u.Redacted(), err)
	}
	return &fileBucket{blobBucket: blobBucket{b: b}, root: u.Path}, nil
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
	client := s3.NewFromConfig(cfg, clientOpts...)
	b, err := s3blob.OpenBucket(ctx, client, u.Host, &s3blob.Options{RequestChecksumCalculation: cfg.RequestChecksumCalculation})
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", u.Redacted(), err)
	}
	return &blobBucket{b: b, s3: true}, nil
}
