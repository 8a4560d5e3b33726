package worker

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/internal/derived"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// fillDistinct sets every field of v, nested structs included, to a value
// no other field has, so that a field the command line leaves out, or
// binds to another field's flag, comes back different.
func fillDistinct(t *testing.T, v reflect.Value, path string, n *int) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fillDistinct(t, v.Field(i), path+"."+v.Type().Field(i).Name, n)
		}
	case reflect.String:
		*n++
		v.SetString(fmt.Sprintf("v%d-%s", *n, strings.ToLower(path[strings.LastIndex(path, ".")+1:])))
	case reflect.Int, reflect.Int32, reflect.Int64:
		*n++
		v.SetInt(int64(*n))
	case reflect.Bool:
		v.SetBool(true)
	default:
		t.Fatalf("Invocation%s is a %s: teach fillDistinct to fill it, and the command line to carry it", path, v.Kind())
	}
}

// TestInvocationRoundTrip: every field of a run reaches the worker through
// its command line, whatever is added to Invocation later.
func TestInvocationRoundTrip(t *testing.T) {
	var every Invocation
	n := 0
	fillDistinct(t, reflect.ValueOf(&every).Elem(), "", &n)
	// The fields whose values are checked when parsed.
	every.Task = derived.TaskReplay
	every.Target.ReleaseLine = turnlog.ReleaseLine073
	every.Target.RefusedBlocks = turnlog.RefusedBlocksDrop

	loc := sessionlog.Location{Namespace: "team-a", Session: "chat", UID: "0d9e"}
	cases := []struct {
		name string
		inv  Invocation
	}{
		{"every field set", every},
		{"assembly: no target", Invocation{Task: derived.TaskAssemble, StoreURL: "file:///var/store", Location: loc}},
		{"replay under 1.x", Invocation{Task: derived.TaskReplay, StoreURL: "s3://logs?region=us-east-1&endpoint=http://127.0.0.1:9000", Location: loc,
			Target: turnlog.Adapter{Kind: "pi-ai", API: "openai-responses", Provider: "openai", Model: "gpt-5", ReleaseLine: turnlog.ReleaseLine1}}},
		{"replay under 0.73, a prefix with slashes, a model with spaces and =", Invocation{Task: derived.TaskReplay, StoreURL: "mem://",
			Location: sessionlog.Location{Prefix: "tenants/a", Namespace: "ns", Session: "s", UID: "u"},
			Target:   turnlog.Adapter{Model: "my model=fast", ReleaseLine: turnlog.ReleaseLine073}}},
		{"replay for the log's own adapter", Invocation{Task: derived.TaskReplay, StoreURL: "mem://", Location: loc}},
		{"a fork's child dropping refused blocks", Invocation{Task: derived.TaskReplay, StoreURL: "mem://", Location: loc,
			Target: turnlog.Adapter{RefusedBlocks: turnlog.RefusedBlocksDrop}, SentKeptThrough: 41}},
	}
	for _, c := range cases {
		args := c.inv.Args()
		if args[0] != "worker" {
			t.Errorf("%s: command line %q does not start with the worker subcommand", c.name, args)
			continue
		}
		var stderr bytes.Buffer
		got, err := ParseArgs(args[1:], &stderr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v: %s", c.name, args, err, stderr.String())
			continue
		}
		if !reflect.DeepEqual(got, c.inv) {
			t.Errorf("%s: through the command line %q\n got %+v\nwant %+v", c.name, args, got, c.inv)
		}
	}
}

// TestParseArgsRefuses: a command line a worker cannot run is a usage
// error naming what is wrong, before anything is opened.
func TestParseArgsRefuses(t *testing.T) {
	base := Invocation{Task: derived.TaskReplay, StoreURL: "mem://", Location: sessionlog.Location{Namespace: "ns", Session: "s", UID: "u"}}
	line := base
	line.Target.ReleaseLine = "0.8"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no task", nil, "usage: turnlog worker"},
		{"unknown task", []string{"compact"}, `unknown worker task "compact"`},
		{"no store", []string{"replay", "--namespace=ns", "--session=s", "--uid=u"}, "--store-url, --namespace, --session and --uid are required"},
		{"an unknown release line", line.Args()[1:], `--target-release-line: release line "0.8" is not one turnlog replays by`},
		{"a stray argument", append(base.Args()[1:], "extra"), "and nothing else"},
		{"an unknown refused-blocks choice", append(base.Args()[1:], "--target-refused-blocks=drop"), `--target-refused-blocks: refusedBlocks "drop" is not "Keep" or "Drop"`},
		{"a negative cut", append(base.Args()[1:], "--sent-kept-through=-1"), "--sent-kept-through: -1 is not a seq"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		if _, err := ParseArgs(c.args, &stderr); err == nil || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%s: ParseArgs(%q) = %v, stderr %q; want it refused saying %q", c.name, c.args, err, stderr.String(), c.want)
		}
	}
}
