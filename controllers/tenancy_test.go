package controllers

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/store"
)

// Two tenants, alice in one namespace and bob in another, each allowed
// everything on Sessions and SessionForks in their own namespace and
// nothing else, talk to the API server as themselves (impersonated) and try
// what a tenant could do to the shared manager or to the other tenant:
// make the manager read files or call hosts of their choosing, read its
// backend's errors, forge a fork's child, reach into the other namespace's
// logs, orphan a log, or hold a deletion forever.
var _ = Describe("Tenants", Ordered, func() {
	const (
		deletionTimeout = 4 * time.Second
		forgedMessage   = "spec.forkedFrom is set only by the turnlog manager"
		backendSecret   = "backend-says-AKIA-and-a-private-body"
	)
	var (
		teamA, teamB string
		// system is the manager's own namespace, where it records logs
		// left behind.
		system      string
		alice, bob  client.Client
		stores      *BucketCache
		sio         *SessionIO
		storeDir    string
		outsideDir  string
		attacker    *listener
		backend     *httptest.Server
		backendHits atomic.Int32
		stop        func()
	)

	BeforeAll(func() {
		teamA, teamB = newNamespace("team-a"), newNamespace("team-b")
		system = newNamespace("turnlog-system")
		alice, bob = tenant(teamA, "alice"), tenant(teamB, "bob")
		attacker = listen()
		// The operator's store that fails: an S3 endpoint refusing every
		// request with a body that must never reach a tenant.
		backend = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			backendHits.Add(1)
			http.Error(w, backendSecret, http.StatusForbidden)
		}))
		DeferCleanup(backend.Close)

		storeDir = GinkgoT().TempDir()
		// A directory of the manager's that is not the store's.
		outsideDir = GinkgoT().TempDir()
		var err error
		stores, err = NewBucketCache([]StoreConfig{
			{Name: "default", URL: "file://" + storeDir, Prefix: "tenants"},
			{Name: "broken", URL: "s3://logs?region=us-east-1&use_path_style=true&disable_https=true&endpoint=" + backend.URL},
			// A store that cannot even be opened, as when its volume is gone.
			{Name: "unreachable", URL: "file://" + filepath.Join(storeDir, "gone")},
		}, &store.Options{AccessKeyID: "AKIDOPERATOR", SecretAccessKey: "operator-secret"})
		Expect(err).NotTo(HaveOccurred())
		sio = &SessionIO{Client: k8sClient, Stores: stores}
		stop = startManagerIn([]string{teamA, teamB}, Config{
			Stores: stores, WorkerMode: WorkerModeLocal, PollInterval: time.Hour, DeletionTimeout: deletionTimeout,
			OrphanNamespace: system, OrphanSweepInterval: 2 * time.Second,
		})

		By("waiting until the API server enforces the admission policy")
		Eventually(func() string {
			err := alice.Create(ctx, forged(teamA, "probe"), client.DryRunAll)
			if err == nil {
				return "admitted"
			}
			return err.Error()
		}).Should(ContainSubstring(forgedMessage))
	})
	AfterAll(func() {
		stop()
		Expect(stores.Close()).To(Succeed())
		Expect(attacker.accepted.Load()).To(BeZero(), "a tenant made the manager connect to its listener")
	})

	// rawSession is a Session as a tenant may write it with kubectl,
	// fields this API does not have included.
	rawSession := func(ns, name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "turnlog.dev/v1alpha1", "kind": "Session",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     spec,
		}}
	}
	// dirs lists a directory of the default store.
	dirs := func(path ...string) []string {
		GinkgoHelper()
		entries, err := os.ReadDir(filepath.Join(append([]string{storeDir}, path...)...))
		Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}

	It("keeps each tenant out of the other's namespace", func() {
		Expect(bob.Create(ctx, &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: teamB}})).To(Succeed())
		err := alice.Get(ctx, client.ObjectKey{Namespace: teamB, Name: "victim"}, &turnlogv1.Session{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		err = alice.Create(ctx, &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: teamB}})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})

	It("cannot express a store URL, endpoint, credentials file or key prefix in a Session", func() {
		for name, storage := range map[string]map[string]any{
			"gcs-key-file": {"url": "gs://any-bucket?private_key_path=/dev/zero"},
			"s3-endpoint":  {"url": "s3://b?region=us-east-1&endpoint=http://" + attacker.ln.Addr().String() + "&use_path_style=true&disable_https=true"},
			"disk-probe":   {"url": "file:///etc?create_dir=true"},
			"other-ns":     {"prefix": teamB + "/victim"},
		} {
			By(name + ": refused where the request asks for strict field validation, as kubectl does")
			err := alice.Create(ctx, rawSession(teamA, name, map[string]any{"storage": storage}), client.FieldValidation("Strict"))
			Expect(apierrors.IsBadRequest(err) || apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
			for field := range storage {
				Expect(err.Error()).To(ContainSubstring(`unknown field "spec.storage.` + field + `"`))
			}

			By(name + ": dropped by the API server otherwise; the Session is in the default store")
			Expect(alice.Create(ctx, rawSession(teamA, name, map[string]any{"storage": storage}))).To(Succeed())
			s := &turnlogv1.Session{}
			Expect(alice.Get(ctx, client.ObjectKey{Namespace: teamA, Name: name}, s)).To(Succeed())
			Expect(s.Spec.Storage).To(Equal(turnlogv1.SessionStorage{Store: "default"}))
			Eventually(func(g Gomega) {
				s := getSession(teamA, name)(g)
				g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/EmptyLog"))
				g.Expect(s.Status.Location).To(Equal("default:tenants/" + teamA + "/" + name + "/" + string(s.UID)))
			}).Should(Succeed())
		}

		By("refusing anything but a store name in spec.storage.store")
		for _, name := range []string{"s3://b?endpoint=http://" + attacker.ln.Addr().String(), "../" + teamB, "Default", "a/b", strings.Repeat("a", 64)} {
			err := alice.Create(ctx, rawSession(teamA, "bad-store", map[string]any{"storage": map[string]any{"store": name}}))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "store %q: got %v", name, err)
		}
	})

	It("reports a store the manager does not have as StoreNotFound, and contacts nothing", func() {
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: teamA},
			Spec: turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: "attacker-endpoint"}}}
		Expect(alice.Create(ctx, s)).To(Succeed())
		Eventually(func(g Gomega) {
			s := getSession(teamA, "elsewhere")(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/StoreNotFound"))
			g.Expect(s.Status.Conditions).To(ContainElement(HaveField("Message",
				`store "attacker-endpoint" is not configured on the manager (configured stores: broken, default, unreachable)`)))
		}).Should(Succeed())
		Expect(attacker.accepted.Load()).To(BeZero())
	})

	It("shows a failing store's errors to the tenant only as a stable message", func() {
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "on-broken", Namespace: teamA},
			Spec: turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: "broken"}}}
		Expect(alice.Create(ctx, s)).To(Succeed())
		var ready metav1.Condition
		Eventually(func(g Gomega) {
			s := getSession(teamA, "on-broken")(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/StoreUnavailable"))
			for _, c := range s.Status.Conditions {
				if c.Type == turnlogv1.ConditionReady {
					ready = c
				}
			}
		}).Should(Succeed())
		Expect(backendHits.Load()).To(BeNumerically(">", 0), "the store was not even asked")
		Expect(ready.Message).To(ContainSubstring(`store "broken"`))
		Expect(ready.Message).To(ContainSubstring("the details are in the manager's log"))
		host := strings.TrimPrefix(backend.URL, "http://")
		for _, leak := range []string{backendSecret, host, "127.0.0.1", "AKIDOPERATOR", "403"} {
			Expect(ready.Message).NotTo(ContainSubstring(leak))
		}
	})

	It("refuses a forged spec.forkedFrom on create and on update, and admits the manager's", func() {
		err := alice.Create(ctx, forged(teamA, "forged"))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring(forgedMessage))
		err = bob.Create(ctx, forged(teamB, "forged"))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)

		plain := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: teamA}}
		Expect(alice.Create(ctx, plain)).To(Succeed())
		base := plain.DeepCopy()
		plain.Spec.ForkedFrom = forged(teamA, "plain").Spec.ForkedFrom
		err = alice.Patch(ctx, plain, client.MergeFrom(base))
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)

		By("admitting the same Session from the manager's identity")
		Expect(k8sClient.Create(ctx, forged(teamA, "forged"), client.DryRunAll)).To(Succeed())
	})

	It("adopts as a fork's child only the Session the manager created for that fork", func() {
		log := readLog("aborted-turn.jsonl")
		_, _, err := sio.Import(ctx, teamB, "victim", bytes.NewReader(log))
		Expect(err).NotTo(HaveOccurred())
		victim := waitReady(teamB, "victim")
		victimFiles := dirs("tenants", teamB, "victim", string(victim.UID), "log")
		_, _, err = sio.Import(ctx, teamA, "source", bytes.NewReader(log))
		Expect(err).NotTo(HaveOccurred())
		waitReady(teamA, "source")

		By("squatting the child's name with a Session of alice's own")
		Expect(alice.Create(ctx, &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "squat", Namespace: teamA}})).To(Succeed())
		squat := newFork(teamA, "squat-fork", "source", "9")
		squat.Spec.Target.Name = "squat"
		Expect(alice.Create(ctx, squat)).To(Succeed())
		Eventually(func(g Gomega) string {
			return cond(getFork(teamA, "squat-fork")(g).Status.Conditions, turnlogv1.ConditionSucceeded)
		}).Should(Equal("False/TargetExists"))
		Expect(getSession(teamA, "squat")(Default).Status.HeadSeq).To(BeNil(), "the squatter's log was written")

		By("naming the other namespace's Session as the source")
		Expect(alice.Create(ctx, newFork(teamA, "steal", "victim", "9"))).To(Succeed())
		Eventually(func(g Gomega) string {
			return cond(getFork(teamA, "steal")(g).Status.Conditions, turnlogv1.ConditionSucceeded)
		}).Should(Equal("False/SourceNotFound"))

		By("forking for real")
		retry := newFork(teamA, "retry", "source", "9")
		Expect(alice.Create(ctx, retry)).To(Succeed())
		Eventually(func(g Gomega) string {
			return cond(getFork(teamA, "retry")(g).Status.Conditions, turnlogv1.ConditionSucceeded)
		}).Should(Equal("True/Forked"))
		child := waitReady(teamA, "retry")
		Expect(child.Spec.ForkedFrom.ForkUID).To(Equal(string(getFork(teamA, "retry")(Default).UID)))
		Expect(dirs("tenants", teamA, "retry", string(child.UID), "log")).NotTo(BeEmpty())

		By("letting alice edit her child otherwise")
		base := child.DeepCopy()
		child.Labels["team"] = "support"
		Expect(alice.Patch(ctx, child, client.MergeFrom(base))).To(Succeed())

		By("leaving the other namespace's log as it was")
		Expect(dirs("tenants")).To(ConsistOf(teamA, teamB))
		Expect(dirs("tenants", teamB)).To(ConsistOf("victim"))
		Expect(dirs("tenants", teamB, "victim", string(victim.UID), "log")).To(Equal(victimFiles))
		Expect(exportLog(sio, teamB, "victim")).To(Equal(string(log)))
	})

	// A host writes its own Session's root in the file:// store directly,
	// so it can put a symbolic link there, into another namespace's root or
	// out of the store, or a FIFO where a segment goes. The manager, which
	// can read and write every namespace's roots, must refuse each with a
	// reason and one Event, fork nothing from it, delete nothing through it,
	// and never block on it.
	var (
		target                   *turnlogv1.Session
		targetRoot, outside      string
		targetSeg0, targetBefore string
		targetFiles              map[string]string
	)
	// theTarget is bob's Session that alice's links point to, and a file
	// outside the store, both written once.
	theTarget := func() {
		GinkgoHelper()
		if target != nil {
			return
		}
		_, _, err := sio.Import(ctx, teamB, "target", bytes.NewReader(readLog("model-switch.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		target = waitReady(teamB, "target")
		targetRoot = filepath.Join("tenants", teamB, "target", string(target.UID))
		targetSeg0 = filepath.Join(targetRoot, "log", "00000000000000000000.jsonl")
		Expect(filepath.Join(storeDir, targetSeg0)).To(BeARegularFile())
		outside = filepath.Join(outsideDir, "outside.jsonl")
		Expect(os.WriteFile(outside, readLog("model-switch.jsonl"), 0o644)).To(Succeed())
		targetBefore = exportLog(sio, teamB, "target")
		targetFiles = fileTree(filepath.Join(storeDir, targetRoot), outsideDir)
	}
	const seg0 = "00000000000000000000.jsonl"
	// replace removes the file or directory at rel, a path relative to the
	// store's directory, and has put put something else there.
	replace := func(rel string, put func(path string) error) {
		GinkgoHelper()
		p := filepath.Join(storeDir, rel)
		Expect(os.RemoveAll(p)).To(Succeed())
		Expect(put(p)).To(Succeed())
	}
	for _, c := range []struct {
		name string
		// plant turns alice's Session root (relative to the store's
		// directory) into the attack and returns the key of the entry that
		// must be refused.
		plant func(root string) string
		kind  string
	}{
		{"segment-link", func(root string) string {
			at := filepath.Join(root, "log", seg0)
			replace(at, func(p string) error { return os.Symlink(relTo(filepath.Dir(at), targetSeg0), p) })
			return at
		}, "a symbolic link"},
		{"log-link", func(root string) string {
			at := filepath.Join(root, "log")
			replace(at, func(p string) error { return os.Symlink(relTo(root, filepath.Join(targetRoot, "log")), p) })
			return at
		}, "a symbolic link"},
		{"root-link", func(root string) string {
			replace(root, func(p string) error { return os.Symlink(relTo(filepath.Dir(root), targetRoot), p) })
			return root
		}, "a symbolic link"},
		{"outside-link", func(root string) string {
			at := filepath.Join(root, "log", seg0)
			replace(at, func(p string) error { return os.Symlink(outside, p) })
			return at
		}, "a symbolic link"},
		{"fifo", func(root string) string {
			at := filepath.Join(root, "log", seg0)
			replace(at, func(p string) error { return syscall.Mkfifo(p, 0o644) })
			return at
		}, "a named pipe (FIFO)"},
	} {
		It("refuses a Session root's "+c.name+", forks nothing from it and deletes nothing through it", func() {
			theTarget()
			name := "refused-" + c.name
			_, _, err := sio.Import(ctx, teamA, name, bytes.NewReader(readLog("aborted-turn.jsonl")))
			Expect(err).NotTo(HaveOccurred())
			s := waitReady(teamA, name)
			Expect(filepath.Join(storeDir, "tenants", teamA, name, string(s.UID), "log", seg0)).To(BeARegularFile())

			By("planting " + c.kind + " and nudging the Session, as its host can")
			at := c.plant(filepath.Join("tenants", teamA, name, string(s.UID)))
			base := s.DeepCopy()
			s.Annotations[turnlogv1.AnnotationRequestedAt] = time.Now().UTC().Format(time.RFC3339Nano)
			Expect(alice.Patch(ctx, s, client.MergeFrom(base))).To(Succeed())

			By("refusing it: Ready=False, ObjectRefused, naming the entry and what it is")
			Eventually(func(g Gomega) {
				s := getSession(teamA, name)(g)
				g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/" + turnlogv1.ReasonObjectRefused))
				ready := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
				g.Expect(ready.Message).To(ContainSubstring(`store "default" refused ` + at + ": it is " + c.kind))
				g.Expect(ready.Message).NotTo(ContainSubstring(storeDir))
				g.Expect(ready.Message).NotTo(ContainSubstring(outside))
			}).Should(Succeed())
			oneEvent := And(HaveField("Type", "Warning"), HaveField("Series", BeNil()),
				HaveField("Note", ContainSubstring("refused "+at+": it is "+c.kind)))
			Eventually(sessionEvents(teamA, name, turnlogv1.EventObjectRefused)).Should(ConsistOf(oneEvent))
			// The controller keeps looking, with backoff; the Event is not
			// raised again (a repeat would turn it into a series).
			Consistently(sessionEvents(teamA, name, turnlogv1.EventObjectRefused)).WithTimeout(3 * time.Second).Should(ConsistOf(oneEvent))

			By("forking it: nothing is copied, no child is made")
			Expect(alice.Create(ctx, newFork(teamA, name+"-fork", name, "9"))).To(Succeed())
			Eventually(func(g Gomega) {
				f := getFork(teamA, name+"-fork")(g)
				g.Expect(cond(f.Status.Conditions, turnlogv1.ConditionSucceeded)).To(Equal("Unknown/Forking"))
				g.Expect(meta.FindStatusCondition(f.Status.Conditions, turnlogv1.ConditionSucceeded).Message).To(ContainSubstring("refused " + at))
			}).Should(Succeed())
			Consistently(func(g Gomega) {
				err := k8sClient.Get(ctx, client.ObjectKey{Namespace: teamA, Name: name + "-fork"}, &turnlogv1.Session{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the fork made a child: %v", err)
				g.Expect(filepath.Join(storeDir, "tenants", teamA, name+"-fork")).NotTo(BeAnExistingFile())
			}).WithTimeout(2 * time.Second).Should(Succeed())
			Expect(alice.Delete(ctx, &turnlogv1.SessionFork{ObjectMeta: metav1.ObjectMeta{Name: name + "-fork", Namespace: teamA}})).To(Succeed())

			By("deleting it with retention Delete: the entry itself goes, nothing it points to")
			Expect(alice.Delete(ctx, &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: teamA}})).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: teamA, Name: name}, &turnlogv1.Session{}))
			}).Should(BeTrue())
			Expect(sessionEvents(teamA, name, turnlogv1.EventLogOrphaned)(Default)).To(BeEmpty())
			_, err = os.Lstat(filepath.Join(storeDir, at))
			Expect(errors.Is(err, fs.ErrNotExist)).To(BeTrue(), "the refused entry is still there: %v", err)

			By("leaving the other namespace's Session and the outside file byte for byte as they were")
			Expect(fileTree(filepath.Join(storeDir, targetRoot), outsideDir)).To(Equal(targetFiles))
			Expect(exportLog(sio, teamB, "target")).To(Equal(targetBefore))
			Expect(cond(getSession(teamB, "target")(Default).Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"))
		})
	}

	It("refuses a references manifest a host forged, follows nothing outside the namespace, and deletes through no pin", func() {
		theTarget()
		name := "forger"
		_, _, err := sio.Import(ctx, teamA, name, bytes.NewReader(readLog("aborted-turn.jsonl")))
		Expect(err).NotTo(HaveOccurred())
		s := waitReady(teamA, name)
		root := filepath.Join(storeDir, "tenants", teamA, name, string(s.UID))
		target := getSession(teamB, "target")(Default)

		By("planting a manifest that names the other namespace's Session, as its host can")
		manifest := fmt.Sprintf(`{"version":1,"refs":[{"session":"../../%s/target","uid":%q,"through":3}]}`, teamB, target.UID)
		Expect(os.WriteFile(filepath.Join(root, "log", "references.json"), []byte(manifest), 0o644)).To(Succeed())
		base := s.DeepCopy()
		s.Annotations[turnlogv1.AnnotationRequestedAt] = time.Now().UTC().Format(time.RFC3339Nano)
		Expect(alice.Patch(ctx, s, client.MergeFrom(base))).To(Succeed())
		Eventually(func(g Gomega) {
			s := getSession(teamA, name)(g)
			g.Expect(cond(s.Status.Conditions, turnlogv1.ConditionReady)).To(Equal("False/" + turnlogv1.ReasonObjectRefused))
			msg := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady).Message
			g.Expect(msg).To(ContainSubstring("log/references.json: references manifest refused: reference 0: location session"))
			g.Expect(msg).To(ContainSubstring("written by the manager alone"))
		}).Should(Succeed())
		Eventually(sessionEvents(teamA, name, turnlogv1.EventObjectRefused)).Should(ConsistOf(
			And(HaveField("Type", "Warning"), HaveField("Note", ContainSubstring("references.json")))))

		By("planting pins that claim children in both namespaces, and deleting the Session")
		Expect(os.MkdirAll(filepath.Join(root, "pins"), 0o755)).To(Succeed())
		for uid, child := range map[string]string{"forged-1": "../../" + teamB + "/target", "forged-2": "nobody", string(target.UID): "target"} {
			pin := fmt.Sprintf(`{"session":%q,"uid":%q}`, child, uid)
			Expect(os.WriteFile(filepath.Join(root, "pins", uid+".json"), []byte(pin), 0o644)).To(Succeed())
		}
		Expect(alice.Delete(ctx, &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: teamA}})).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: teamA, Name: name}, &turnlogv1.Session{}))
		}).Should(BeTrue())
		if _, err := os.Stat(root); err == nil {
			Expect(fileTree(root)).To(BeEmpty(), "no pin a host wrote keeps anything of a deleted Session")
		}

		By("leaving the other namespace's Session byte for byte as it was")
		Expect(fileTree(filepath.Join(storeDir, targetRoot), outsideDir)).To(Equal(targetFiles))
		Expect(exportLog(sio, teamB, "target")).To(Equal(targetBefore))
		Expect(cond(getSession(teamB, "target")(Default).Status.Conditions, turnlogv1.ConditionReady)).To(Equal("True/Current"))
	})

	It("refuses edits of storage and retention, which would move or orphan the log", func() {
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "settled", Namespace: teamA},
			Spec: turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: "broken"}, Retention: turnlogv1.RetentionDelete}}
		Expect(alice.Create(ctx, s)).To(Succeed())

		// Merge patches, as kubectl edit and patch send: no resourceVersion,
		// so the manager's own writes cannot make them conflict.
		moved := s.DeepCopy()
		moved.Spec.Storage.Store = "default"
		err := alice.Patch(ctx, moved, client.MergeFrom(s))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("storage is immutable"))

		dropped := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"storage":null}}`))
		err = alice.Patch(ctx, s.DeepCopy(), dropped)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)

		kept := s.DeepCopy()
		kept.Spec.Retention = turnlogv1.RetentionRetain
		err = alice.Patch(ctx, kept, client.MergeFrom(s))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("retention is immutable"))
	})

	It("refuses target.labels that a Session could not carry", func() {
		for _, labels := range []map[string]turnlogv1.LabelValue{
			{"bad key!": "x"},
			{"team": "bad value!"},
			{strings.Repeat("k", 64): "x"},
			{"team": turnlogv1.LabelValue(strings.Repeat("v", 64))},
			{"/team": "x"},
			{"Example.com/team": "x"},
		} {
			f := newFork(teamA, "labelled", "source", "9")
			f.Spec.Target.Labels = labels
			err := alice.Create(ctx, f, client.DryRunAll)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "labels %v: got %v", labels, err)
			Expect(err.Error()).To(ContainSubstring("target.labels"))
		}
		f := newFork(teamA, "labelled", "source", "9")
		f.Spec.Target.Labels = map[string]turnlogv1.LabelValue{"example.com/team": "support", "tier": "", "a_b.c-d": "A_1.b-2"}
		Expect(alice.Create(ctx, f, client.DryRunAll)).To(Succeed())
	})

	It("cannot remove turnlog's finalizer to orphan a Session's log", func() {
		kept := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: teamA}}
		// Its store fails, so its deletion waits (DeletionBlocked) for the
		// deletion timeout: long enough to try to strip it meanwhile.
		stuck := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "kept-stuck", Namespace: teamA},
			Spec: turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: "broken"}}}
		for _, s := range []*turnlogv1.Session{kept, stuck} {
			Expect(alice.Create(ctx, s)).To(Succeed())
			Eventually(func(g Gomega) []string {
				return getSession(teamA, s.Name)(g).Finalizers
			}).Should(ContainElement(turnlogv1.FinalizerRetention))
		}
		strip := func(c client.Client, s *turnlogv1.Session) error {
			got := &turnlogv1.Session{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
				return err
			}
			patch := client.MergeFrom(got.DeepCopy())
			got.Finalizers = nil
			return c.Patch(ctx, got, patch)
		}
		const refused = "the finalizer turnlog.dev/retention is removed only by the turnlog manager"
		By("refused to the tenant before deletion, with a message naming the finalizer")
		Eventually(func() error { return strip(alice, kept) }).Should(MatchError(ContainSubstring(refused)))
		err := strip(alice, kept)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)

		By("and during deletion")
		Expect(alice.Delete(ctx, stuck)).To(Succeed())
		Eventually(func(g Gomega) string {
			return cond(getSession(teamA, stuck.Name)(g).Status.Conditions, turnlogv1.ConditionReady)
		}).Should(Equal("False/" + turnlogv1.ReasonDeletionBlocked))
		Expect(strip(alice, stuck)).To(MatchError(ContainSubstring(refused)))

		By("the manager applies the retention and removes it itself")
		Expect(alice.Delete(ctx, kept)).To(Succeed())
		for _, s := range []*turnlogv1.Session{kept, stuck} {
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(s), &turnlogv1.Session{}))
			}).WithTimeout(deletionTimeout+time.Minute).Should(BeTrue(), s.Name)
		}
		// The file store leaves the emptied directories.
		var left []string
		Expect(filepath.WalkDir(filepath.Join(storeDir, "tenants", teamA, "kept"), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				left = append(left, path)
			}
			return err
		})).To(Or(Succeed(), MatchError(os.ErrNotExist)))
		Expect(left).To(BeEmpty(), "objects of the deleted Session kept")
	})

	It("releases a deleted Session whose store cannot be opened after the deletion timeout", func() {
		for _, name := range []string{"unreachable", "attacker-endpoint"} {
			s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "doomed-" + name, Namespace: teamA},
				Spec: turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: name}, Retention: turnlogv1.RetentionDelete}}
			Expect(alice.Create(ctx, s)).To(Succeed())
		}
		for _, name := range []string{"doomed-unreachable", "doomed-attacker-endpoint"} {
			Eventually(func(g Gomega) []string {
				return getSession(teamA, name)(g).Finalizers
			}).Should(ContainElement(turnlogv1.FinalizerRetention))
		}
		doomedUID := getSession(teamA, "doomed-unreachable")(Default).UID
		start := time.Now()
		for _, name := range []string{"doomed-unreachable", "doomed-attacker-endpoint"} {
			Expect(alice.Delete(ctx, &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: teamA}})).To(Succeed())
		}
		for _, name := range []string{"doomed-unreachable", "doomed-attacker-endpoint"} {
			Eventually(func(g Gomega) string {
				return cond(getSession(teamA, name)(g).Status.Conditions, turnlogv1.ConditionReady)
			}).Should(Equal("False/DeletionBlocked"), name)
		}
		for _, name := range []string{"doomed-unreachable", "doomed-attacker-endpoint"} {
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: teamA, Name: name}, &turnlogv1.Session{}))
			}).WithTimeout(deletionTimeout+time.Minute).Should(BeTrue(), name)
			Eventually(sessionEvents(teamA, name, turnlogv1.EventLogOrphaned)).Should(ConsistOf(And(
				HaveField("Type", "Warning"), HaveField("Note", ContainSubstring("gave up deleting the log at")))))
		}
		// The manager did try for the bounded time instead of letting go at once.
		Expect(time.Since(start)).To(BeNumerically(">=", deletionTimeout-time.Second))

		By("recording each log left behind in the manager's namespace, with why the sweep could not delete it yet")
		records := func(g Gomega) map[string]map[string]string {
			list := &corev1.ConfigMapList{}
			g.Expect(k8sClient.List(ctx, list, client.InNamespace(system), client.MatchingLabels{LabelOrphanedLog: "true"})).To(Succeed())
			out := map[string]map[string]string{}
			for _, cm := range list.Items {
				out[cm.Data["namespace"]+"/"+cm.Data["session"]] = cm.Data
			}
			return out
		}
		Eventually(func(g Gomega) {
			r := records(g)
			// Only the Sessions whose store failed past the timeout: every
			// other deletion of this suite deleted its log.
			g.Expect(r).To(HaveLen(3))
			g.Expect(r).To(HaveKeyWithValue(teamA+"/doomed-unreachable", And(
				HaveKeyWithValue("store", "unreachable"), HaveKeyWithValue("location", ""),
				HaveKeyWithValue("lastError", ContainSubstring(`store "unreachable" could not be used`)))))
			g.Expect(r).To(HaveKeyWithValue(teamA+"/doomed-attacker-endpoint", HaveKeyWithValue("lastError",
				ContainSubstring(`store "attacker-endpoint" is not configured on the manager`))))
			g.Expect(r).To(HaveKeyWithValue(teamA+"/kept-stuck", And(
				HaveKeyWithValue("location", HavePrefix("broken:"+teamA+"/kept-stuck/")),
				HaveKeyWithValue("lastError", ContainSubstring(`store "broken" could not be used`)))))
			for _, data := range r {
				for k, v := range data {
					g.Expect(v).NotTo(ContainSubstring(backendSecret), k)
				}
			}
		}).Should(Succeed())
		Expect(sessionEvents(teamA, "doomed-unreachable", turnlogv1.EventLogOrphaned)(Default)).To(ConsistOf(
			HaveField("Note", ContainSubstring("recorded in ConfigMap "+system+"/"+recordName(string(doomedUID))))))

		By("deleting the log once its store answers, and nothing beside it")
		gone := filepath.Join(storeDir, "gone")
		root := filepath.Join(gone, teamA, "doomed-unreachable", string(doomedUID))
		neighbours := []string{
			filepath.Join(gone, teamA, "doomed-unreachable", "another-uid", "log", "00000000000000000000.jsonl"),
			filepath.Join(gone, teamA, "doomed-unreachable-2", string(doomedUID), "log", "00000000000000000000.jsonl"),
			filepath.Join(gone, teamB, "doomed-unreachable", string(doomedUID), "log", "00000000000000000000.jsonl"),
		}
		for _, f := range append([]string{filepath.Join(root, "log", "00000000000000000000.jsonl"), filepath.Join(root, "derived", "assembly")}, neighbours...) {
			Expect(os.MkdirAll(filepath.Dir(f), 0o755)).To(Succeed())
			Expect(os.WriteFile(f, []byte(`{"seq":0}`+"\n"), 0o644)).To(Succeed())
		}
		before := fileTree(filepath.Dir(neighbours[0]), filepath.Dir(neighbours[1]), filepath.Dir(neighbours[2]))
		Eventually(func(g Gomega) {
			g.Expect(records(g)).NotTo(HaveKey(teamA + "/doomed-unreachable"))
		}).Should(Succeed())
		Expect(fileTree(root)).To(BeEmpty())
		Expect(fileTree(filepath.Dir(neighbours[0]), filepath.Dir(neighbours[1]), filepath.Dir(neighbours[2]))).To(Equal(before))
		Eventually(func(g Gomega) []string {
			list := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, list, client.InNamespace(system))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Reason == turnlogv1.EventOrphanedLogDeleted && e.Regarding.Name == recordName(string(doomedUID)) {
					notes = append(notes, e.Note)
				}
			}
			return notes
		}).Should(ConsistOf(fmt.Sprintf("deleted the log Session %s/doomed-unreachable left at unreachable:%s/doomed-unreachable/%s (2 objects)", teamA, teamA, doomedUID)))
		// The others stay recorded while their stores fail.
		Consistently(func(g Gomega) {
			g.Expect(records(g)).To(HaveLen(2))
		}).WithTimeout(3 * time.Second).Should(Succeed())
	})

	It("refuses the same URL parameters in the operator's own store configuration", func() {
		_, err := ParseStoreFlag("keys=gs://b?private_key_path=/dev/zero")
		Expect(err).To(MatchError(ContainSubstring(`parameter "private_key_path" is not supported`)))
		path := filepath.Join(GinkgoT().TempDir(), "stores")
		Expect(os.WriteFile(path, []byte("# name url prefix\ndefault mem://\nlogs s3://b?region=us-east-1&profile=admin team\n"), 0o600)).To(Succeed())
		_, err = ReadStoresFile(path)
		Expect(err).To(MatchError(ContainSubstring(path + `:3: store logs: open bucket s3://b?region=us-east-1&profile=admin: parameter "profile" is not supported`)))
	})
})

// relTo is the relative link from the directory dir to target, both
// relative to the same directory.
func relTo(dir, target string) string {
	GinkgoHelper()
	rel, err := filepath.Rel(dir, target)
	Expect(err).NotTo(HaveOccurred())
	return rel
}

// fileTree maps every file, link and special file under dirs to its
// content (a link to its target), so that two trees are equal only if
// nothing under them changed.
func fileTree(dirs ...string) map[string]string {
	GinkgoHelper()
	out := map[string]string{}
	for _, d := range dirs {
		Expect(filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case e.Type()&fs.ModeSymlink != 0:
				target, err := os.Readlink(path)
				out[path] = "link to " + target
				return err
			case e.Type().IsRegular():
				data, err := os.ReadFile(path)
				out[path] = string(data)
				return err
			case !e.IsDir():
				out[path] = e.Type().String()
			}
			return nil
		})).To(Succeed())
	}
	return out
}

// tenant gives user everything on Sessions and SessionForks in ns, and
// nothing else, and returns a client that acts as that user.
func tenant(ns, user string) client.Client {
	GinkgoHelper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "turnlog-tenant", Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"turnlog.dev"}, Resources: []string{"sessions", "sessionforks"}, Verbs: []string{"*"}},
			{APIGroups: []string{"turnlog.dev"}, Resources: []string{"sessions/status", "sessionforks/status"}, Verbs: []string{"get"}},
		},
	}
	Expect(k8sClient.Create(ctx, role)).To(Succeed())
	Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "turnlog-tenant-" + user, Namespace: ns},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	})).To(Succeed())
	return impersonating(user)
}

// impersonating is a client of the suite's API server that acts as user,
// with what RBAC grants that user alone.
func impersonating(user string) client.Client {
	GinkgoHelper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user}
	cl, err := client.New(c, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}

// forged is a Session claiming to be a fork's child.
func forged(ns, name string) *turnlogv1.Session {
	return &turnlogv1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: turnlogv1.SessionSpec{ForkedFrom: &turnlogv1.ForkOrigin{
			Session: "source", UID: "b1e3a0c2-0000-4000-8000-000000000001", Fork: name, ForkUID: "b1e3a0c2-0000-4000-8000-000000000002",
			AnchorSeq: 9, CutSeq: 15,
		}},
	}
}

// listener counts the connections made to it.
type listener struct {
	ln       net.Listener
	accepted atomic.Int32
}

func listen() *listener {
	GinkgoHelper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	l := &listener{ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			conn.Close()
		}
	}()
	DeferCleanup(ln.Close)
	return l
}
