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
	m := localManager("deletion")
	var (
		ns     string
		bucket store.Bucket
		sio    *SessionIO
	)
	BeforeAll(func() { ns, bucket, sio = m.ns, m.bucket(), m.sio })

	objects := func(s *turnlogv1.Session) []string { return rootKeys(bucket, s) }
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

	It("keeps what forks refer to until the last of them is deleted, in any order, and then leaves nothing", func() {
		log := readLog("aborted-turn.jsonl")
		src := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "tree", Namespace: ns}, Spec: turnlogv1.SessionSpec{Retention: turnlogv1.RetentionDelete}}
		Expect(k8sClient.Create(ctx, src)).To(Succeed())
		// A segment per turn: seq 0..7, 8..15, 16..21.
		_, _, err := sio.Import(ctx, ns, "tree", bytes.NewReader(logLines(log, 8)))
		Expect(err).NotTo(HaveOccurred())
		_, _, err = sio.Append(ctx, ns, "tree", bytes.NewReader(logLines(log, 16)[len(logLines(log, 8)):]))
		Expect(err).NotTo(HaveOccurred())
		_, _, err = sio.Append(ctx, ns, "tree", bytes.NewReader(log[len(logLines(log, 16)):]))
		Expect(err).NotTo(HaveOccurred())
		src = waitReady(ns, "tree")

		fork := func(name, source, at string) *turnlogv1.Session {
			GinkgoHelper()
			Expect(k8sClient.Create(ctx, newFork(ns, name, source, at))).To(Succeed())
			Eventually(func(g Gomega) string {
				f := getFork(ns, name)(g)
				return cond(f.Status.Conditions, turnlogv1.ConditionSucceeded) + "/" + f.Status.Prefix
			}).Should(Equal("True/Forked/Referenced"))
			return waitReady(ns, name)
		}
		// The child refers to the source's three segments.
		child := fork("tree-child", "tree", "21")
		Expect(getFork(ns, "tree-child")(Default).Status.Conditions[0].Message).To(ContainSubstring("referring to the source's seq 0..21"))
		Expect(objects(child)).To(ContainElement(HaveSuffix("/log/references.json")))
		Expect(objects(src)).To(ContainElement(HaveSuffix(fmt.Sprintf("/pins/%s.json", child.UID))))
		// A fork of the fork refers to the source directly.
		grandchild := fork("tree-grandchild", "tree-child", "15")
		Expect(exportLog(sio, ns, "tree-grandchild")).To(Equal(string(logLines(log, 16))))

		deleted(src)
		Expect(withoutTranscriptParts(objects(src))).To(ConsistOf(
			HaveSuffix("/log/00000000000000000000.jsonl"), HaveSuffix("/log/00000000000000000008.jsonl"), HaveSuffix("/log/00000000000000000016.jsonl"), HaveSuffix("/deleted.json"),
			HaveSuffix(fmt.Sprintf("/pins/%s.json", child.UID)), HaveSuffix(fmt.Sprintf("/pins/%s.json", grandchild.UID))),
			"the deleted source keeps the segments its forks refer to, its transcript's parts, and nothing else")
		Expect(exportLog(sio, ns, "tree-child")).To(Equal(string(log)))
		Expect(exportLog(sio, ns, "tree-grandchild")).To(Equal(string(logLines(log, 16))))

		// A fork applied now copies the range of the deleted source, and says so.
		Expect(k8sClient.Create(ctx, newFork(ns, "tree-late", "tree-child", "21"))).To(Succeed())
		Eventually(func(g Gomega) string {
			f := getFork(ns, "tree-late")(g)
			return cond(f.Status.Conditions, turnlogv1.ConditionSucceeded) + "/" + f.Status.Prefix
		}).Should(Equal("True/Forked/Copied"))
		Expect(getFork(ns, "tree-late")(Default).Status.Conditions[0].Message).To(ContainSubstring("copied because Session tree (uid " + string(src.UID) + ")"))
		late := waitReady(ns, "tree-late")
		Expect(exportLog(sio, ns, "tree-late")).To(Equal(string(log)))

		deleted(child)
		Expect(withoutTranscriptParts(objects(src))).To(ConsistOf(
			HaveSuffix("/log/00000000000000000000.jsonl"), HaveSuffix("/log/00000000000000000008.jsonl"), HaveSuffix("/deleted.json"),
			HaveSuffix(fmt.Sprintf("/pins/%s.json", grandchild.UID))), "the grandchild's pin still keeps the segments it refers to")
		Expect(exportLog(sio, ns, "tree-grandchild")).To(Equal(string(logLines(log, 16))))
		deleted(grandchild)
		deleted(late)
		for _, s := range []*turnlogv1.Session{src, child, grandchild, late} {
			Expect(objects(s)).To(BeEmpty(), "Session %s", s.Name)
		}
	})

})

// withoutTranscriptParts is keys but for transcript parts, which a
// deleted Session keeps while a child may share them.
func withoutTranscriptParts(keys []string) []string {
	var out []string
	for _, k := range keys {
		if !strings.Contains(k, "/derived/transcript/") || !strings.HasSuffix(k, ".jsonl") {
			out = append(out, k)
		}
	}
	return out
}

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
