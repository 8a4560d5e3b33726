package controllers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/store"
)

// startManager runs the turnlog controllers for one namespace, as
// `turnlog manager` does, until the returned function stops them. Each
// group of specs gets its own namespace and manager, so the API specs'
// objects are never reconciled.
func startManager(namespace string, conf Config) (stop func()) {
	GinkgoHelper()
	return startManagerIn([]string{namespace}, conf)
}

// startManagerIn runs the controllers for several namespaces, as
// `turnlog manager --watch-namespace ...` does.
func startManagerIn(namespaces []string, conf Config) (stop func()) {
	GinkgoHelper()
	opts := CacheOptions(namespaces...)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  opts,
		// Several managers run the same controllers in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	mctx, cancel := context.WithCancel(ctx)
	Expect(Setup(mctx, mgr, conf)).To(Succeed())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(mctx)).To(Succeed())
	}()
	return func() {
		cancel()
		<-done
	}
}

// storesAt is the manager's stores: "default" at url, and more.
func storesAt(url string, more ...StoreConfig) *BucketCache {
	GinkgoHelper()
	c, err := NewBucketCache(append([]StoreConfig{{Name: turnlogv1.DefaultStore, URL: url}}, more...), nil)
	Expect(err).NotTo(HaveOccurred())
	return c
}

// newNamespace creates a namespace named after the specs that use it.
func newNamespace(prefix string) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// readLog reads a log file of testdata/logs.
func readLog(name string) []byte {
	GinkgoHelper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "logs", name))
	Expect(err).NotTo(HaveOccurred())
	return data
}

// logLines returns the first n lines of a log, newline-terminated.
func logLines(log []byte, n int) []byte {
	lines := bytes.SplitAfter(log, []byte("\n"))
	return bytes.Join(lines[:n], nil)
}

// getSession fetches a Session's current state.
func getSession(ns, name string) func(Gomega) *turnlogv1.Session {
	return func(g Gomega) *turnlogv1.Session {
		s := &turnlogv1.Session{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		return s
	}
}

func getFork(ns, name string) func(Gomega) *turnlogv1.SessionFork {
	return func(g Gomega) *turnlogv1.SessionFork {
		f := &turnlogv1.SessionFork{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, f)).To(Succeed())
		return f
	}
}

// cond returns a condition's status and reason as "Status/Reason".
func cond(conds []metav1.Condition, t string) string {
	c := meta.FindStatusCondition(conds, t)
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%s/%s", c.Status, c.Reason)
}

// waitReady waits until the Session reports Ready=True, current with a
// log that has events, for its generation.
func waitReady(ns, name string) *turnlogv1.Session {
	GinkgoHelper()
	var s *turnlogv1.Session
	Eventually(func(g Gomega) {
		s = getSession(ns, name)(g)
		g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"))
		g.Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
	}).Should(Succeed())
	return s
}

// sessionEvents lists, through the events.k8s.io API, the Events about a
// Session with the given reason.
func sessionEvents(ns, name, reason string) func(Gomega) []eventsv1.Event {
	return func(g Gomega) []eventsv1.Event {
		list := &eventsv1.EventList{}
		g.Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		var out []eventsv1.Event
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				out = append(out, e)
			}
		}
		return out
	}
}

func notes(events []eventsv1.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Note
	}
	return out
}

// exportLog exports a Session's log as `turnlog export` does.
func exportLog(sio *SessionIO, ns, name string) string {
	GinkgoHelper()
	var out strings.Builder
	Expect(sio.Export(ctx, ns, name, &out)).To(Succeed())
	return out.String()
}

// forkEvents lists the Events about a SessionFork with the given reason.
func forkEvents(g Gomega, ns, name, reason string) []eventsv1.Event {
	list := &eventsv1.EventList{}
	g.Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "SessionFork" && e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// managed is what localManager gives the specs of a container.
type managed struct {
	ns     string
	stores *BucketCache
	sio    *SessionIO
	// conf is the manager's configuration; stop stops it (a spec that
	// stops it starts it again with startManager(m.ns, m.conf)).
	conf Config
	stop func()
}

// localManager registers, in the calling Ordered container, what most
// specs start from: a namespace of their own named after prefix, an
// in-memory store, a SessionIO on it, and the controllers with local
// workers watching the namespace until the container's specs are done;
// with, if given, changes their configuration.
func localManager(prefix string, with ...func(*Config)) *managed {
	m := &managed{}
	BeforeAll(func() {
		m.ns = newNamespace(prefix)
		m.stores = storesAt("mem://")
		m.sio = &SessionIO{Client: k8sClient, Stores: m.stores}
		m.conf = Config{Stores: m.stores, WorkerMode: WorkerModeLocal, PollInterval: time.Hour}
		for _, w := range with {
			w(&m.conf)
		}
		m.stop = startManager(m.ns, m.conf)
	})
	AfterAll(func() {
		m.stop()
		Expect(m.stores.Close()).To(Succeed())
	})
	return m
}

// bucket is the in-memory store the manager's Sessions are in.
func (m *managed) bucket() store.Bucket {
	GinkgoHelper()
	b, err := m.stores.buckets.Bucket(ctx, "mem://")
	Expect(err).NotTo(HaveOccurred())
	return b
}

// rootKeys lists the keys stored under a Session's own root.
func rootKeys(b store.Bucket, s *turnlogv1.Session) []string {
	GinkgoHelper()
	var keys []string
	for o, err := range b.List(ctx, fmt.Sprintf("%s/%s/%s/", s.Namespace, s.Name, s.UID)) {
		Expect(err).NotTo(HaveOccurred())
		keys = append(keys, o.Key)
	}
	return keys
}
