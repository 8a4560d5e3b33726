// Package cmdkit is what the turnlog command and the kubectl-turnlog plugin
// share: connecting to the cluster and to a Session's object store, and
// the commands that print a Session's log and stored transcript, so both
// print the same bytes.
package cmdkit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/store"
)

// StoreFlags give a command the object store a Session's log is in.
type StoreFlags struct {
	URL, Prefix string
}

// Add adds --store-url and --store-prefix, which default to
// $TURNLOG_STORE_URL and $TURNLOG_STORE_PREFIX.
func (f *StoreFlags) Add(fs *flag.FlagSet) {
	fs.StringVar(&f.URL, "store-url", os.Getenv("TURNLOG_STORE_URL"), "URL of the Session's object store (the one its spec.storage.store names on the manager), with your own credentials in the environment; default: $TURNLOG_STORE_URL")
	fs.StringVar(&f.Prefix, "store-prefix", os.Getenv("TURNLOG_STORE_PREFIX"), "the prefix the operator configured for that store, if any; default: $TURNLOG_STORE_PREFIX")
}

// Open checks the flags and opens the store. Whatever store a Session
// names, the one at URL is taken to be it: the user was given its URL.
func (f *StoreFlags) Open(ctx context.Context) (*agenthost.Store, error) {
	if f.URL == "" {
		return nil, errors.New("--store-url (or $TURNLOG_STORE_URL) is required")
	}
	if err := store.CheckURL(f.URL); err != nil {
		return nil, fmt.Errorf("--store-url: %w", err)
	}
	if f.Prefix != "" {
		if err := store.ValidateKey(f.Prefix); err != nil {
			return nil, fmt.Errorf("--store-prefix %q: %w", f.Prefix, err)
		}
	}
	return agenthost.OpenStore(ctx, f.URL, &agenthost.StoreOptions{Prefix: f.Prefix})
}

// Client returns a client for turnlog's kinds and core Events in the
// cluster cc names, and namespace, or if it is empty the namespace of
// cc's context. The client can watch, for `turnlog ui`'s live lists.
func Client(cc clientcmd.ClientConfig, namespace string) (client.WithWatch, string, error) {
	return ClientAt(cc, namespace, 0)
}

// ClientAt is Client with client-go's request rate limit set to qps a
// second (bursts of twice that); 0 keeps client-go's default of 5, which
// suits a command that makes a few requests, not one that makes one per
// Session of a store.
func ClientAt(cc clientcmd.ClientConfig, namespace string, qps float32) (client.WithWatch, string, error) {
	if namespace == "" {
		var err error
		if namespace, _, err = cc.Namespace(); err != nil {
			return nil, "", err
		}
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, int(2*qps)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(turnlogv1.AddToScheme(scheme))
	utilruntime.Must(corev1.AddToScheme(scheme))
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", err
	}
	return c, namespace, nil
}

// WriteJSON writes v as indented JSON, as every turnlog command that
// prints a document does.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Transcript writes the transcript the workers stored for log's Session as
// JSON: the same bytes as `turnlog replay --through SEQ` of the exported
// log, SEQ being the last replayed turn/end. Fields of override that are
// set replace those of the Session's spec.adapter.
func Transcript(ctx context.Context, log *agenthost.Log, namespace, name string, override agenthost.Adapter, w io.Writer) error {
	target := log.Target().Overridden(override)
	tr, err := log.WithTarget(target).Transcript(ctx)
	if errors.Is(err, agenthost.ErrNotReplayed) {
		line := ""
		if target.ReleaseLine != "" {
			line = " on release line " + target.ReleaseLine
		}
		return fmt.Errorf("Session %s/%s has not been replayed for target %s/%s/%s/%s%s yet (%w); it is replayed for its spec.adapter, once a turn has ended",
			namespace, name, target.Kind, target.API, target.Provider, target.Model, line, err)
	}
	if err != nil {
		return err
	}
	return WriteJSON(w, tr)
}

// Export writes the Session's log as JSON Lines, buffered.
func Export(ctx context.Context, log *agenthost.Log, w io.Writer) error {
	bw := bufio.NewWriter(w)
	if err := log.Export(ctx, bw); err != nil {
		return err
	}
	return bw.Flush()
}
