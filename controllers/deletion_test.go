package controllers

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/store"
)

// Deleting a Session, with each spec.retention.
var _ = Describe("Session deletion", Ordered, func() {
	var (
		ns     string
		stores *BucketCache
		bucket store.Bucket
		sio    *SessionIO
		stop   func()
	)

	BeforeAll(func() {
		ns = newNamespace("deletion")
		stores = storesAt("mem://")
		var err error
		bucket, err = stores.buckets.Bucket(ctx, "mem://")
		Expect(err).NotTo(HaveOccurred())
		sio = &SessionIO{Client: k8sClient, Stores: stores}
		stop = startManager(ns, Config{Stores: stores, WorkerMode: WorkerModeLocal, PollInterval: time.Hour})
	})
	AfterAll(func() {
		stop()
		Expect(stores.Close()).To(Succeed())
	})

	// objects lists the keys stored for a Session.
	objects := func(s *turnlogv1.Session) []string {
		GinkgoHelper()
		var keys []string
		for o, err := range bucket.List(ctx, fmt.Sprintf("%s/%s/%s/", s.Namespace, s.Name, s.UID)) {
			Expect(err).NotTo(HaveOccurred())
			keys = append(keys, o.Key)
		}
		return keys
	}
	imported := func(name string, retention turnlogv1.RetentionPolicy) *turnlogv1.Session {
		GinkgoHelper()
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: turnlogv1.SessionSpec{Retention: retention}}
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
		_, _, err := sio.Import(ctx, ns, name, bytes.NewReader(readLog("aborted-turn.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		return waitReady(ns, name)
	}
	deleted := func(s *turnlogv1.Session) {
		GinkgoHelper()
		Expect(k8sClient.Delete(ctx, s)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(s), &turnlogv1.Session{}))
		}).Should(BeTrue())
	}

	It("deletes the log and derived data with retention Delete, and nothing of other Sessions", func() {
		doomed := imported("chat", turnlogv1.RetentionDelete)
		// A name that extends the deleted one's must not match its prefix.
		neighbour := imported("chat-2", turnlogv1.RetentionDelete)
		Expect(objects(doomed)).To(ContainElement(HaveSuffix(".jsonl")))
		Expect(objects(doomed)).To(ContainElement(ContainSubstring("/derived/")))
		kept := objects(neighbour)

		deleted(doomed)
		Expect(objects(doomed)).To(BeEmpty())
		Expect(objects(neighbour)).To(Equal(kept))
		Expect(exportLog(sio, ns, "chat-2")).To(Equal(string(readLog("aborted-turn.jsonl"))))
	})

	It("keeps every object with retention Retain", func() {
		retained := imported("audit", turnlogv1.RetentionRetain)
		// The whole log is taken in (the nudge after the import may still
		// bring a reconcile) before the objects are counted.
		var before []string
		Eventually(func(g Gomega) {
			s := getSession(ns, "audit")(g)
			g.Expect(s.Status.Replay).NotTo(BeNil())
			g.Expect(s.Status.Replay.ThroughSeq).To(BeEquivalentTo(21))
			before = objects(retained)
		}).Should(Succeed())
		Consistently(func() []string { return objects(retained) }).WithTimeout(time.Second).Should(Equal(before))
		Expect(strings.Join(before, " ")).To(ContainSubstring("/log/"))
		Expect(strings.Join(before, " ")).To(ContainSubstring("/derived/"))
		deleted(retained)
		after := objects(retained)
		Expect(after).To(Equal(before), "objects gone: %v; objects added: %v", without(before, after), without(after, before))
	})
})

// without is what of xs is not in ys.
func without(xs, ys []string) []string {
	var out []string
	for _, x := range xs {
		if !slices.Contains(ys, x) {
			out = append(out, x)
		}
	}
	return out
}
