package controllers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/forkcut"
)

// The API as a user meets it through kubectl: what the CRDs accept, refuse
// and print, before any controller runs.
var _ = Describe("turnlog.dev/v1alpha1 API", func() {
	var ns string

	BeforeEach(func() {
		namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "api-"}}
		Expect(k8sClient.Create(ctx, namespace)).To(Succeed())
		ns = namespace.Name
	})

	newFork := func(name, atSeq string) *turnlogv1.SessionFork {
		return &turnlogv1.SessionFork{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: turnlogv1.SessionForkSpec{
				Source: turnlogv1.SessionReference{Name: "support-chat"},
				AtSeq:  atSeq,
			},
		}
	}

	It("accepts the samples in config/samples", func() {
		session := &turnlogv1.Session{}
		fork := &turnlogv1.SessionFork{}
		for file, obj := range map[string]client.Object{
			"turnlog_v1alpha1_session.yaml":     session,
			"turnlog_v1alpha1_sessionfork.yaml": fork,
		} {
			data, err := os.ReadFile(filepath.Join("..", "config", "samples", file))
			Expect(err).NotTo(HaveOccurred())
			Expect(yaml.UnmarshalStrict(data, obj)).To(Succeed(), file)
			obj.SetNamespace(ns)
			Expect(k8sClient.Create(ctx, obj)).To(Succeed(), file)
		}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(session), session)).To(Succeed())
		Expect(session.Spec.Retention).To(Equal(turnlogv1.RetentionDelete))
		Expect(fork.Spec.AtSeq).To(Equal("15.1"))
	})

	It("refuses a Session without spec in words a user can act on", func() {
		for kind, fields := range map[string]map[string]any{"Session": {}, "SessionFork": {}} {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "turnlog.dev/v1alpha1", "kind": kind,
				"metadata": map[string]any{"name": "no-spec", "namespace": ns},
			}}
			for k, v := range fields {
				obj.Object[k] = v
			}
			err := k8sClient.Create(ctx, obj)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: got %v", kind, err)
			Expect(err.Error()).To(ContainSubstring("spec: Required value"), kind)
			Expect(err.Error()).NotTo(ContainSubstring("no such key"), kind)
		}
	})

	It("defaults retention to Delete", func() {
		session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}}
		Expect(k8sClient.Create(ctx, session)).To(Succeed())
		Expect(session.Spec.Retention).To(Equal(turnlogv1.RetentionDelete))
	})

	DescribeTable("accepts non-negative decimal atSeq values",
		func(atSeq string) {
			Expect(k8sClient.Create(ctx, newFork(fmt.Sprintf("ok-%d", len(atSeq)), atSeq))).To(Succeed())
		},
		Entry("zero", "0"),
		Entry("an event seq", "41"),
		Entry("a frozen node", "41.1"),
		Entry("the largest seq", "9223372036854775807"),
		Entry("19 digits with leading zeros", "0000000000000000041.5"),
	)

	DescribeTable("refuses bad atSeq values with a message a user understands",
		func(atSeq string) {
			err := k8sClient.Create(ctx, newFork("bad", atSeq))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
			Expect(err.Error()).To(ContainSubstring("spec.atSeq"))
			Expect(err.Error()).To(ContainSubstring(`atSeq must be a non-negative decimal such as "41" or "41.1"`))
		},
		Entry("negative", "-1"),
		Entry("negative fraction", "-0.5"),
		Entry("exponent", "1e3"),
		Entry("NaN", "NaN"),
		Entry("infinity", "Inf"),
		Entry("empty", ""),
		Entry("21 integer digits", "123456789012345678901"),
		Entry("one past the largest seq", "9223372036854775808"),
		Entry("41 fraction digits", "1."+strings.Repeat("9", 41)),
		Entry("leading space", " 41"),
		Entry("trailing dot", "41."),
		Entry("leading dot", ".5"),
		Entry("sign", "+41"),
	)

	It("admits exactly the atSeq values the controller's parser accepts", func() {
		nines := func(n int) string { return strings.Repeat("9", n) }
		values := []string{
			"0", "41", "41.1", "007", "41.9999999999999999999", "1." + nines(40), "1." + nines(41),
			"9223372036854775807", "9223372036854775807." + nines(40), "9223372036854775808", "9223372036854775810",
			"9999999999999999999", "1000000000000000000", "0000000000000000000", "00000000000000000000",
			"12345678901234567890", "41.", ".5", "-1", "+41", " 41", "41 ", "41\n", "\n41", "1e3", "NaN", "Inf",
			"", ".", "٤١", "4.1.1", "0x10", "41,5", "4_1",
		}
		for i, atSeq := range values {
			_, perr := forkcut.ParseAtSeq(atSeq)
			err := k8sClient.Create(ctx, newFork(fmt.Sprintf("edge-%d", i), atSeq), client.DryRunAll)
			Expect(err == nil).To(Equal(perr == nil), "atSeq %q: API server says %v, the controller's parser %v", atSeq, err, perr)
			if err != nil {
				Expect(apierrors.IsInvalid(err)).To(BeTrue(), "atSeq %q: %v", atSeq, err)
			}
		}
	})

	It("keeps a SessionFork's spec immutable", func() {
		fork := newFork("immutable", "41.1")
		Expect(k8sClient.Create(ctx, fork)).To(Succeed())
		fork.Spec.AtSeq = "42"
		err := k8sClient.Update(ctx, fork)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("SessionFork spec is immutable"))
	})

	It("refuses forkedFrom added to an existing Session", func() {
		session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "not-a-child", Namespace: ns}}
		Expect(k8sClient.Create(ctx, session)).To(Succeed())
		session.Spec.ForkedFrom = &turnlogv1.ForkOrigin{Session: "other", AnchorSeq: 1, CutSeq: 3}
		err := k8sClient.Update(ctx, session)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("forkedFrom is set only when a SessionFork creates the Session"))
	})

	It("writes status only through the status subresource", func() {
		session := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "with-status", Namespace: ns}}
		Expect(k8sClient.Create(ctx, session)).To(Succeed())

		head := int64(45)
		session.Status.HeadSeq = &head
		Expect(k8sClient.Update(ctx, session)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(session), session)).To(Succeed())
		Expect(session.Status.HeadSeq).To(BeNil(), "a spec update must not write status")

		session.Status = turnlogv1.SessionStatus{
			HeadSeq:     &head,
			Turns:       7,
			LastTurnEnd: &turnlogv1.TurnEnd{Seq: 45, Turn: 7, Reason: "aborted"},
			Replay:      &turnlogv1.ReplaySummary{ThroughSeq: 45, Native: 5, Foreign: 2, Degraded: 1},
		}
		meta.SetStatusCondition(&session.Status.Conditions, metav1.Condition{
			Type: turnlogv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Replayed", Message: "transcript current through seq 45",
		})
		Expect(k8sClient.Status().Update(ctx, session)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(session), session)).To(Succeed())
		Expect(*session.Status.HeadSeq).To(Equal(int64(45)))
		Expect(meta.IsStatusConditionTrue(session.Status.Conditions, turnlogv1.ConditionReady)).To(BeTrue())

		By("showing the status in kubectl's printer columns")
		out := kubectl("get", "sess", "with-status", "-n", ns)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		Expect(lines).To(HaveLen(2))
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "HEAD", "TURNS", "LAST", "END", "DEGRADED", "READY", "AGE"}))
		Expect(strings.Fields(lines[1])[:6]).To(Equal([]string{"with-status", "45", "7", "aborted", "1", "True"}))
	})

	It("prints a SessionFork's source, atSeq, cut, child and outcome", func() {
		fork := newFork("printed", "15.1")
		Expect(k8sClient.Create(ctx, fork)).To(Succeed())
		cut := int64(17)
		fork.Status.CutSeq = &cut
		fork.Status.ChildName = "printed"
		fork.Status.Prefix = turnlogv1.PrefixReferenced
		meta.SetStatusCondition(&fork.Status.Conditions, metav1.Condition{
			Type: turnlogv1.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: turnlogv1.ReasonForked, Message: "child Session printed holds seq 0..17",
		})
		Expect(k8sClient.Status().Update(ctx, fork)).To(Succeed())

		out := kubectl("get", "sfork", "-n", ns)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		Expect(lines).To(HaveLen(2))
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "SOURCE", "AT", "CUT", "CHILD", "PREFIX", "SUCCEEDED", "AGE"}))
		Expect(strings.Fields(lines[1])[:7]).To(Equal([]string{"printed", "support-chat", "15.1", "17", "printed", "Referenced", "True"}))

		By("listing both kinds under the turnlog category")
		Expect(kubectl("get", "turnlog", "-n", ns, "-o", "name")).To(ContainSubstring("sessionfork.turnlog.dev/printed"))
	})
})

var _ = Describe("config/default", func() {
	It("is accepted by the API server as a deployment (server-side dry run)", func() {
		// A dry run does not create the namespace the other objects go to.
		namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "turnlog-system"}}
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, namespace))).To(Succeed())

		manifests := filepath.Join(GinkgoT().TempDir(), "default.yaml")
		Expect(os.WriteFile(manifests, []byte(kubectl("kustomize", filepath.Join("..", "config", "default"))), 0o600)).To(Succeed())
		out := kubectl("apply", "--dry-run=server", "-f", manifests)
		Expect(out).To(ContainSubstring("deployment.apps/turnlog-manager created (server dry run)"))
		Expect(out).To(ContainSubstring("customresourcedefinition.apiextensions.k8s.io/sessionforks.turnlog.dev"))
	})
})

var _ = Describe("config/namespaced", func() {
	It("binds the manager's permissions only in the namespaces it watches (server-side dry run)", func() {
		for _, name := range []string{"turnlog-system", "team-a", "team-b"} {
			namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
			Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, namespace))).To(Succeed())
		}
		built := kubectl("kustomize", filepath.Join("..", "config", "namespaced"))
		manifests := filepath.Join(GinkgoT().TempDir(), "namespaced.yaml")
		Expect(os.WriteFile(manifests, []byte(built), 0o600)).To(Succeed())
		out := kubectl("apply", "--dry-run=server", "-f", manifests)
		Expect(out).To(ContainSubstring("rolebinding.rbac.authorization.k8s.io/turnlog-manager created (server dry run)"))
		Expect(out).NotTo(ContainSubstring("clusterrolebinding.rbac.authorization.k8s.io/turnlog-manager "))
		Expect(built).To(ContainSubstring("--watch-namespace=team-a"))
		Expect(out).To(ContainSubstring("validatingadmissionpolicy.admissionregistration.k8s.io/turnlog-forkedfrom"))
	})
})

// kubectl runs the control plane's kubectl against the test API server as
// an admin and returns its stdout.
func kubectl(args ...string) string {
	GinkgoHelper()
	cmd := exec.Command(filepath.Join(controlPlaneDir(), "kubectl"), append([]string{"--kubeconfig", kubeconfigPath}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "kubectl %s: %s", strings.Join(args, " "), stderr.String())
	return string(out)
}
