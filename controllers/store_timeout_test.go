package controllers

import (
	"bytes"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/store"
)

// A store that accepts connections and never answers (an S3 endpoint
// behind a dead proxy) must not hold the controller: the look at its
// Session gives up after --store-timeout and says so, and the Sessions
// queued behind it are reconciled.
var _ = Describe("A store that never answers", Ordered, func() {
	var (
		ns     string
		stores *BucketCache
		sio    *SessionIO
		stop   func()
	)
	BeforeAll(func() {
		ns = newNamespace("hung")
		var err error
		stores, err = NewBucketCache([]StoreConfig{
			{Name: turnlogv1.DefaultStore, URL: "file://" + GinkgoT().TempDir()},
			{Name: "hung", URL: hangingS3()},
		}, &store.Options{AccessKeyID: "AKIDOPERATOR", SecretAccessKey: "operator-secret"})
		Expect(err).NotTo(HaveOccurred())
		sio = &SessionIO{Client: k8sClient, Stores: stores}
		stop = startManager(ns, Config{Stores: stores, WorkerMode: WorkerModeLocal, PollInterval: time.Hour, StoreTimeout: 2 * time.Second})
	})
	AfterAll(func() {
		stop()
		Expect(stores.Close()).To(Succeed())
	})

	It("reports the timeout and goes on with the other Sessions", func() {
		stuck := &turnlogv1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: ns},
			Spec:       turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: "hung"}},
		}
		Expect(k8sClient.Create(ctx, stuck)).To(Succeed())
		Eventually(func(g Gomega) {
			c := meta.FindStatusCondition(getSession(ns, "stuck")(g).Status.Conditions, turnlogv1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(turnlogv1.ReasonStoreUnavailable))
			g.Expect(c.Message).To(ContainSubstring(`store "hung" timed out`))
		}).WithTimeout(30 * time.Second).Should(Succeed())

		// Queued behind the stuck Session's looks, which each end at the
		// timeout.
		_, _, err := sio.Import(ctx, ns, "healthy", bytes.NewReader(readLog("aborted-turn.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) string {
			return cond(getSession(ns, "healthy")(g).Status.Conditions, turnlogv1.ConditionReady)
		}).WithTimeout(30 * time.Second).Should(Equal("True/Current"))
	})
})
