package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/store"
)

// TestOpenRefusesUnlistedParameters walks the query parameters through
// which a URL's author could make the process read a file, pick an
// identity or a host: each is refused by name before any library sees it.
func TestOpenRefusesUnlistedParameters(t *testing.T) {
	for _, c := range []struct{ url, param string }{
		{"gs://any-bucket?private_key_path=/dev/zero", "private_key_path"},
		{"gs://b?access_id=x", "access_id"},
		{"gs://b?universe_domain=attacker.example", "universe_domain"},
		{"gs://b?anonymous=true", "anonymous"},
		{"s3://b?region=us-east-1&role=arn:aws:iam::1:role/x", "role"},
		{"s3://b?web_identity_token_file=/var/run/secrets/token", "web_identity_token_file"},
		{"s3://b?profile=admin", "profile"},
		{"s3://b?awssdk=v1", "awssdk"},
		{"s3://b?hostname_immutable=true", "hostname_immutable"},
		{"s3://b?rate_limiter_capacity=1", "rate_limiter_capacity"},
		{"azblob://c?storage_account=other", "storage_account"},
		{"azblob://c?cdn=true", "cdn"},
		{"file:///etc?metadata=skip", "metadata"},
		{"mem://?x=1", "x"},
	} {
		b, err := store.Open(context.Background(), c.url, nil)
		if err == nil {
			b.Close()
			t.Errorf("Open(%q) succeeded, want %q refused", c.url, c.param)
			continue
		}
		if want := `parameter "` + c.param + `" is not supported`; !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want it to say %s", c.url, err, want)
		}
		if store.CheckURL(c.url) == nil {
			t.Errorf("CheckURL(%q) accepted what Open refuses", c.url)
		}
	}
	for _, u := range []string{
		"s3://b?region=us-east-1&region=eu-west-1",
		"s3://key:secret@b?region=us-east-1",
		"s3://b?region=us-east-1#x",
	} {
		if err := store.CheckURL(u); err == nil {
			t.Errorf("CheckURL(%q) accepted it", u)
		}
	}
}

// TestOpenAcceptsListedParameters: what operators need still opens.
func TestOpenAcceptsListedParameters(t *testing.T) {
	for _, u := range []string{
		"mem://",
		"file://" + t.TempDir() + "/sub?create_dir=true",
		"s3://bucket?region=us-east-1&endpoint=http://127.0.0.1:1&use_path_style=true&disable_https=true&dualstack=false&fips=false",
		"s3://bucket?region=us-east-1&request_checksum_calculation=when_required&response_checksum_validation=when_required",
	} {
		b, err := store.Open(context.Background(), u, nil)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		b.Close()
	}
}
