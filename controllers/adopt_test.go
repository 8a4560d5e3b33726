package controllers

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/adopt"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// The store as the source of truth (docs/backup-restore.md): Sessions
// restored from a backup with new uids find their logs through `turnlog
// adopt`, and a cluster that lost its Sessions gets them back from the
// manifests beside their logs, with no log rewritten and no worker run
// repeated.
var _ = Describe("Adoption from the store", Ordered, func() {
	m := localManager("adopt")
	var (
		ns     string
		bucket store.Bucket
		sio    *SessionIO
		log    = readLog("aborted-turn.jsonl")
	)
	BeforeAll(func() { ns, bucket, sio = m.ns, m.bucket(), m.sio })

	// adoptNamespace runs `turnlog adopt --namespace ns`.
	adoptNamespace := func(dryRun bool) (adopt.Report, string) {
		GinkgoHelper()
		var out bytes.Buffer
		report, err := adopt.Run(ctx, adopt.Options{Kube: k8sClient, Logs: sessionlog.New(bucket), Namespace: ns, DryRun: dryRun, Out: &out})
		Expect(err).NotTo(HaveOccurred(), out.String())
		GinkgoWriter.Printf("turnlog adopt --namespace %s (dry run %v):\n%s", ns, dryRun, out.String())
		return report, out.String()
	}
	transcriptOf := func(name string) derived.Transcript {
		GinkgoHelper()
		tr, _, err := sio.Transcript(ctx, ns, name, func(a turnlog.Adapter) turnlog.Adapter { return a })
		Expect(err).NotTo(HaveOccurred())
		return tr
	}
	// storedObjects is every object under the namespace's roots with its
	// bytes, but for the manifests, which adoption writes again.
	storedObjects := func() map[string]string {
		GinkgoHelper()
		out := map[string]string{}
		for o, err := range bucket.List(ctx, ns+"/") {
			Expect(err).NotTo(HaveOccurred())
			if strings.HasSuffix(o.Key, "/session.json") {
				continue
			}
			data, err := bucket.Get(ctx, o.Key)
			Expect(err).NotTo(HaveOccurred())
			out[o.Key] = string(data)
		}
		return out
	}
	gone := func(s *turnlogv1.Session) {
		GinkgoHelper()
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(s), &turnlogv1.Session{}))
		}).Should(BeTrue())
	}
	// backup is a Session as `kubectl get -o yaml` shows it and a backup
	// tool applies it again: no uid, resource version, status or
	// finalizers.
	backup := func(s *turnlogv1.Session) *turnlogv1.Session {
		return &turnlogv1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: s.Labels, Annotations: s.Annotations},
			Spec:       s.Spec,
		}
	}
	current := func(name string, head int64) *turnlogv1.Session {
		GinkgoHelper()
		var s *turnlogv1.Session
		Eventually(func(g Gomega) {
			s = getSession(ns, name)(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"))
			g.Expect(s.Status.HeadSeq).To(HaveValue(Equal(head)))
		}).Should(Succeed())
		return s
	}

	var (
		source, child       *turnlogv1.Session
		sourceTr, childTr   derived.Transcript
		restoredSourceUID   string
		objectsBeforeAdopt  map[string]string
		forkedFromBeforeAll *turnlogv1.ForkOrigin
	)

	It("writes a manifest beside each Session's log", func() {
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: ns, Labels: map[string]string{"team": "support"}},
			Spec: turnlogv1.SessionSpec{Retention: turnlogv1.RetentionRetain}}
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
		_, _, err := sio.Import(ctx, ns, "chat", bytes.NewReader(logLines(log, 16)))
		Expect(err).NotTo(HaveOccurred())
		source = current("chat", 15)
		Expect(k8sClient.Create(ctx, newFork(ns, "chat-retry", "chat", "7"))).To(Succeed())
		child = current("chat-retry", 7)
		forkedFromBeforeAll = child.Spec.ForkedFrom.DeepCopy()
		sourceTr, childTr = transcriptOf("chat"), transcriptOf("chat-retry")

		data, err := bucket.Get(ctx, fmt.Sprintf("%s/chat-retry/%s/session.json", ns, child.UID))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).To(ContainSubstring(`"forkedFrom":{"session":"chat","uid":"` + string(source.UID) + `"`))
		Expect(child.Status.Manifest).NotTo(BeEmpty())
	})

	It("points Sessions restored from a backup with new uids at their logs, through turnlog adopt, and only then", func() {
		saved := []*turnlogv1.Session{backup(source), backup(child)}
		for _, s := range []*turnlogv1.Session{child, source} {
			Expect(k8sClient.Delete(ctx, s)).To(Succeed())
			gone(s)
		}
		for _, s := range saved {
			Expect(k8sClient.Create(ctx, s)).To(Succeed())
		}
		// A Session created again starts empty: nothing implicit.
		Eventually(func(g Gomega) {
			s := getSession(ns, "chat")(g)
			g.Expect(string(s.UID)).NotTo(Equal(string(source.UID)))
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/EmptyLog"))
			restoredSourceUID = string(s.UID)
		}).Should(Succeed())

		report, out := adoptNamespace(true)
		Expect(report.Restored).To(Equal(2), out)
		Expect(getSession(ns, "chat")(Default).Spec.Storage.LogUID).To(BeEmpty(), "a dry run changes nothing")

		report, out = adoptNamespace(false)
		Expect(report).To(Equal(adopt.Report{Restored: 2}), out)
		Expect(out).To(ContainSubstring(fmt.Sprintf("session/chat in namespace %s restored: it had no log of its own (uid %s) and now reads the log at uid %s", ns, restoredSourceUID, source.UID)))
		restored := current("chat", 15)
		Expect(restored.Spec.Storage.LogUID).To(Equal(string(source.UID)))
		Expect(transcriptOf("chat")).To(Equal(sourceTr))
		restoredChild := current("chat-retry", 7)
		Expect(restoredChild.Spec.ForkedFrom).To(Equal(forkedFromBeforeAll))
		Expect(transcriptOf("chat-retry")).To(Equal(childTr))
		// The manifest the restored Session wrote in its own, empty root
		// is gone with the pointing.
		Eventually(func() error {
			_, err := bucket.Get(ctx, fmt.Sprintf("%s/chat/%s/session.json", ns, restoredSourceUID))
			return err
		}).Should(MatchError(store.ErrNotFound))

		report, out = adoptNamespace(false)
		Expect(report).To(Equal(adopt.Report{Adopted: 2}), "adopting twice changes nothing:\n%s", out)
	})

	It("gets a lost cluster's Sessions back from the store, with no log rewritten and no worker run repeated", func() {
		objectsBeforeAdopt = storedObjects()
		// The cluster loses the objects, not the store: the manager is
		// stopped, so nothing applies the retention as they go.
		m.stop()
		var all turnlogv1.SessionList
		Expect(k8sClient.List(ctx, &all, client.InNamespace(ns))).To(Succeed())
		for i := range all.Items {
			s := &all.Items[i]
			s.Finalizers = nil
			Expect(k8sClient.Update(ctx, s)).To(Succeed())
			Expect(k8sClient.Delete(ctx, s)).To(Succeed())
			gone(s)
		}
		var forks turnlogv1.SessionForkList
		Expect(k8sClient.List(ctx, &forks, client.InNamespace(ns))).To(Succeed())
		for i := range forks.Items {
			Expect(k8sClient.Delete(ctx, &forks.Items[i])).To(Succeed())
		}
		m.stop = startManager(ns, m.conf)

		report, out := adoptNamespace(true)
		Expect(report.Created).To(Equal(2), out)
		Expect(out).To(ContainSubstring("(dry run) session/chat-retry created in namespace " + ns + " from the log at uid " + string(child.UID) + ", forked from chat at seq 7"))
		var none turnlogv1.SessionList
		Expect(k8sClient.List(ctx, &none, client.InNamespace(ns))).To(Succeed())
		Expect(none.Items).To(BeEmpty(), "a dry run creates nothing")

		report, out = adoptNamespace(false)
		Expect(report).To(Equal(adopt.Report{Created: 2}), out)
		adoptedSource := current("chat", 15)
		Expect(adoptedSource.Labels).To(HaveKeyWithValue("team", "support"))
		Expect(adoptedSource.Spec.Retention).To(Equal(turnlogv1.RetentionRetain))
		adoptedChild := current("chat-retry", 7)
		Expect(adoptedChild.Spec.ForkedFrom).To(Equal(forkedFromBeforeAll))
		Expect(transcriptOf("chat")).To(Equal(sourceTr))
		Expect(transcriptOf("chat-retry")).To(Equal(childTr))
		Consistently(storedObjects).WithTimeout(2*time.Second).Should(Equal(objectsBeforeAdopt), "no log or derived object written again")

		report, out = adoptNamespace(false)
		Expect(report).To(Equal(adopt.Report{Adopted: 2}), "adopting twice changes nothing:\n%s", out)
	})

	It("goes on from there: a host appends, and a new fork of an adopted Session refers to its log", func() {
		_, _, err := sio.Append(ctx, ns, "chat", bytes.NewReader(log[len(logLines(log, 16)):]))
		Expect(err).NotTo(HaveOccurred())
		current("chat", 21)
		Expect(exportLog(sio, ns, "chat")).To(Equal(string(log)))
		Expect(k8sClient.Create(ctx, newFork(ns, "chat-again", "chat", "21"))).To(Succeed())
		Eventually(func(g Gomega) string {
			f := getFork(ns, "chat-again")(g)
			return cond(f.Status.Conditions, turnlogv1.ConditionSucceeded) + "/" + f.Status.Prefix
		}).Should(Equal("True/Forked/Referenced"))
		current("chat-again", 21)
		Expect(exportLog(sio, ns, "chat-again")).To(Equal(string(log)))
	})

	It("refuses a manifest that names another Session, in one line and an Event, and adopts the rest", func() {
		forged := fmt.Sprintf("%s/forged/u-forged/", ns)
		Expect(bucket.Put(ctx, forged+"session.json", []byte(`{"apiVersion":"turnlog.dev/v1alpha1","kind":"Session","metadata":{"namespace":"`+ns+`","name":"chat","uid":"u-forged"},"spec":{}}`), nil)).To(Succeed())
		Expect(bucket.Put(ctx, forged+"log/00000000000000000000.jsonl", logLines(log, 8), nil)).To(Succeed())
		report, out := adoptNamespace(false)
		Expect(report.Refused).To(Equal(1), out)
		Expect(out).To(ContainSubstring(fmt.Sprintf("%s/forged: not adopted: %ssession.json: names Session %s/chat, but is in the root of %s/forged", ns, forged, ns, ns)))
		Expect(report.Adopted).To(Equal(3), out)
		Eventually(sessionEvents(ns, "forged", "AdoptionRefused")).ShouldNot(BeEmpty())
	})
})
