package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// The Sessions list is a stream of Server-Sent Events: the Sessions the
// user may list, narrowed by the page's filters, as a snapshot, then as
// they change.

// heartbeat keeps an idle event stream open through proxies and tells
// the server when the page has gone.
const heartbeat = 20 * time.Second

// maxScopeNamespaces bounds the namespaces whose Sessions are listed one
// by one for a user who may not list them across namespaces.
const maxScopeNamespaces = 50

// listScope is where a list of Sessions reads: every namespace at once
// (All), or the namespaces named. Note says why it is not what the page
// asked for.
type listScope struct {
	All        bool     `json:"all"`
	Namespaces []string `json:"namespaces"`
	Note       string   `json:"note,omitempty"`
}

// namespaceList is the answer of one list request: the Sessions of a
// namespace ("" for all of them) and the version to watch them from.
type namespaceList struct {
	namespace string
	list      *turnlogv1.SessionList
}

// sessionStream is one page's list: the namespace it asked for ("" for
// every namespace), its filter, and where the Sessions are listed once
// that is known.
type sessionStream struct {
	srv       *Server
	stream    *eventStream
	namespace string
	filter    sessionFilter
	scope     *listScope
}

// watchSessions streams the Sessions of a namespace (or of all those the
// user may list), narrowed by the filter of the query: a "scope" saying
// where they were listed, a "snapshot" of them all (with a "search" report
// when the filter has text), then an "upsert" or "delete" per change; an
// "error" when the list or the watch fails, after which it lists again;
// an "invalid" filter ends it.
func (s *Server) watchSessions(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, errors.New("streaming is not supported"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	stream := &eventStream{w: w, flush: flusher.Flush}
	q := r.URL.Query()
	filter, err := parseFilter(q)
	if err == nil && filter.text != "" && s.opts.Store == nil {
		err = errors.New("text: searching the last user messages reads the Sessions' logs: start turnlog ui with --store-url (or $TURNLOG_STORE_URL)")
	}
	if err != nil {
		stream.send("invalid", map[string]string{"error": err.Error()})
		return
	}
	ss := &sessionStream{srv: s, stream: stream, namespace: q.Get("namespace"), filter: filter}
	ctx := r.Context()
	for ctx.Err() == nil {
		err := ss.run(ctx)
		if ctx.Err() != nil || stream.err != nil {
			return
		}
		if err != nil {
			stream.send("error", map[string]string{"error": oneLine(err)})
			select {
			case <-ctx.Done():
			case <-time.After(3 * time.Second):
			}
		}
	}
}

// run lists the Sessions, watches them from the lists' versions, sends
// them, then what the watches say until one ends.
func (ss *sessionStream) run(ctx context.Context) error {
	lists, err := ss.list(ctx)
	if err != nil {
		return err
	}
	// The watches start before the snapshot is sent: a change the page
	// makes once it has the snapshot comes after their start.
	events, stop, err := ss.watch(ctx, lists)
	if err != nil {
		return fmt.Errorf("watch Sessions: %w", err)
	}
	defer stop()
	ss.stream.send("scope", ss.scope)
	var items []*turnlogv1.Session
	for _, l := range lists {
		for i := range l.list.Items {
			items = append(items, &l.list.Items[i])
		}
	}
	views, report := ss.snapshot(ctx, items)
	ss.stream.send("snapshot", views)
	if ss.filter.text != "" {
		ss.stream.send("search", report)
	}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			ss.stream.comment()
		case ev := <-events:
			session, isSession := ev.Object.(*turnlogv1.Session)
			switch {
			case ev.Type == watch.Error:
				return nil // the version expired, or a watch ended: list again
			case !isSession:
			case ev.Type == watch.Deleted:
				ss.stream.send("delete", map[string]string{"namespace": session.Namespace, "name": session.Name})
			case ev.Type == watch.Added || ev.Type == watch.Modified:
				if v, ok := ss.view(ctx, session); ok {
					ss.stream.send("upsert", v)
				} else {
					ss.stream.send("delete", map[string]string{"namespace": session.Namespace, "name": session.Name})
				}
			}
		}
		if ss.stream.err != nil {
			return ss.stream.err
		}
	}
}

// list lists the Sessions of the stream's scope, finding the scope on
// the first call.
func (ss *sessionStream) list(ctx context.Context) ([]namespaceList, error) {
	if ss.scope == nil {
		return ss.resolve(ctx)
	}
	if ss.scope.All {
		l, err := ss.listIn(ctx, "")
		return []namespaceList{l}, err
	}
	out := make([]namespaceList, 0, len(ss.scope.Namespaces))
	for _, ns := range ss.scope.Namespaces {
		l, err := ss.listIn(ctx, ns)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// resolve lists the namespace asked for, or every namespace; a user who
// may not list Sessions across namespaces gets those of the namespaces it
// may, and a note that says so.
func (ss *sessionStream) resolve(ctx context.Context) ([]namespaceList, error) {
	l, err := ss.listIn(ctx, ss.namespace)
	switch {
	case err == nil && ss.namespace != "":
		ss.scope = &listScope{Namespaces: []string{ss.namespace}}
	case err == nil:
		ss.scope = &listScope{All: true}
	case ss.namespace == "" && apierrors.IsForbidden(err):
		return ss.fallback(ctx, err)
	default:
		return nil, err
	}
	return []namespaceList{l}, nil
}

// fallback finds the namespaces whose Sessions the user may list after
// the API server refused a list across namespaces (denied): each
// namespace the user may list (the first maxScopeNamespaces of them),
// tried in turn, else the namespace turnlog ui was started on.
func (ss *sessionStream) fallback(ctx context.Context, denied error) ([]namespaceList, error) {
	why := "You may not list Sessions across namespaces (" + apiWords(denied) + ")"
	namespaces := &corev1.NamespaceList{}
	err := ss.srv.opts.Kube.List(ctx, namespaces)
	if apierrors.IsForbidden(err) {
		why += " nor namespaces"
	} else if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var lists []namespaceList
	var names []string
	tried := 0
	for i := range namespaces.Items {
		if tried == maxScopeNamespaces {
			break
		}
		tried++
		l, err := ss.listIn(ctx, namespaces.Items[i].Name)
		switch {
		case apierrors.IsForbidden(err):
		case err != nil:
			return nil, err
		default:
			lists, names = append(lists, l), append(names, l.namespace)
		}
	}
	if len(lists) > 0 {
		note := fmt.Sprintf("%s: showing the namespaces where you may, %s", why, strings.Join(names, ", "))
		if tried < len(namespaces.Items) {
			note += fmt.Sprintf(" (of the first %d of %d namespaces)", tried, len(namespaces.Items))
		}
		ss.scope = &listScope{Namespaces: names, Note: note + "."}
		return lists, nil
	}
	home := ss.srv.opts.Namespace
	l, err := ss.listIn(ctx, home)
	if err != nil {
		return nil, fmt.Errorf("%s, nor in namespace %s: %w", why, home, err)
	}
	ss.scope = &listScope{Namespaces: []string{home},
		Note: fmt.Sprintf("%s: showing namespace %s, turnlog ui's (-n, else your kubeconfig context's).", why, home)}
	return []namespaceList{l}, nil
}

// listIn lists the Sessions of namespace ("" for all namespaces) that the
// filter's label selector picks.
func (ss *sessionStream) listIn(ctx context.Context, namespace string) (namespaceList, error) {
	list := &turnlogv1.SessionList{}
	if err := ss.srv.opts.Kube.List(ctx, list, ss.listOptions(namespace)...); err != nil {
		where := "namespace " + namespace
		if namespace == "" {
			where = "all namespaces"
		}
		return namespaceList{}, fmt.Errorf("list Sessions in %s: %w", where, err)
	}
	return namespaceList{namespace: namespace, list: list}, nil
}

func (ss *sessionStream) listOptions(namespace string) []client.ListOption {
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	if ss.filter.selector != nil {
		opts = append(opts, client.MatchingLabelsSelector{Selector: ss.filter.selector})
	}
	return opts
}

// watch watches each list's namespace from its version, their events
// merged into one channel; a watch that ends is an Error event there.
// stop stops them all.
func (ss *sessionStream) watch(ctx context.Context, lists []namespaceList) (<-chan watch.Event, func(), error) {
	wctx, cancel := context.WithCancel(ctx)
	events := make(chan watch.Event)
	var watchers []watch.Interface
	stop := func() {
		cancel()
		for _, w := range watchers {
			w.Stop()
		}
	}
	for _, l := range lists {
		opts := append(ss.listOptions(l.namespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: l.list.ResourceVersion}})
		wi, err := ss.srv.opts.Kube.Watch(wctx, &turnlogv1.SessionList{}, opts...)
		if err != nil {
			stop()
			return nil, nil, err
		}
		watchers = append(watchers, wi)
		go forward(wctx, wi.ResultChan(), events)
	}
	return events, stop, nil
}

// forward passes a watch's events on until it ends, which it passes on
// as an Error event, or until ctx is done.
func forward(ctx context.Context, from <-chan watch.Event, to chan<- watch.Event) {
	for {
		var ev watch.Event
		var open bool
		select {
		case ev, open = <-from:
		case <-ctx.Done():
			return
		}
		if !open {
			ev = watch.Event{Type: watch.Error}
		}
		select {
		case to <- ev:
		case <-ctx.Done():
			return
		}
		if !open {
			return
		}
	}
}

// snapshot is the views of the Sessions that pass the filter, and, when
// it has text, what the search read.
func (ss *sessionStream) snapshot(ctx context.Context, items []*turnlogv1.Session) ([]sessionView, searchReport) {
	views := []sessionView{}
	var candidates []*turnlogv1.Session
	for _, s := range items {
		if v := viewSession(s); ss.filter.matches(v) {
			views, candidates = append(views, v), append(candidates, s)
		}
	}
	if ss.filter.text == "" {
		return views, searchReport{}
	}
	texts, report := ss.srv.searchLastUsers(ctx, candidates)
	kept := views[:0]
	for i, v := range views {
		text, read := texts[candidates[i].UID]
		if read && ss.filter.matchesText(text) {
			v.LastUser = clip(text, lastUserShown)
			kept = append(kept, v)
		}
	}
	return kept, report
}

// view is a Session's view and whether it passes the filter, its last
// user message read (or taken from the cache) when the filter has text.
func (ss *sessionStream) view(ctx context.Context, s *turnlogv1.Session) (sessionView, bool) {
	v := viewSession(s)
	if !ss.filter.matches(v) || ss.filter.text == "" {
		return v, ss.filter.matches(v)
	}
	text, err := ss.srv.lastUser(ctx, s)
	if err != nil {
		return v, false
	}
	v.LastUser = clip(text, lastUserShown)
	return v, ss.filter.matchesText(text)
}

// apiWords are the API server's own words in err, or err's.
func apiWords(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return oneLine(err)
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// clip cuts text to n characters.
func clip(text string, n int) string {
	if r := []rune(text); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return text
}
