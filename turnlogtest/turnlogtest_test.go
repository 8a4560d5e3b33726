package turnlogtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// noControlPlaneEnv leaves findControlPlane nowhere to look but an empty
// home.
func noControlPlaneEnv(t *testing.T) (home string) {
	home = t.TempDir()
	for _, v := range []string{"KUBEBUILDER_ASSETS", "CONTROL_PLANE_DIR", "ENVTEST_ROOT", "XDG_DATA_HOME"} {
		t.Setenv(v, "")
	}
	t.Setenv("HOME", home)
	return home
}

// fakeControlPlane makes dir look like a setup-envtest version directory.
func fakeControlPlane(t *testing.T, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range controlPlaneBinaries {
		if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNoControlPlaneSaysWhereItLookedAndHowToGetOne(t *testing.T) {
	home := noControlPlaneEnv(t)
	_, err := New(context.Background())
	if err == nil {
		t.Fatal("New started without a control plane")
	}
	want := filepath.Join(home, ".local/share/kubebuilder-envtest/k8s", "*-"+runtime.GOOS+"-"+runtime.GOARCH)
	for _, s := range []string{"no control plane", "$KUBEBUILDER_ASSETS is unset", want, "setup-envtest use " + KubernetesVersion, "make control-plane"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not say %q:\n%v", s, err)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line:\n%v", err)
	}

	empty := t.TempDir()
	t.Setenv("KUBEBUILDER_ASSETS", empty)
	_, err = New(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no kube-apiserver, etcd in "+empty+" ($KUBEBUILDER_ASSETS)") {
		t.Errorf("with KUBEBUILDER_ASSETS an empty directory: %v", err)
	}
}

func TestFindsTheControlPlaneWhereSetupEnvtestPutsIt(t *testing.T) {
	home := noControlPlaneEnv(t)
	root := filepath.Join(home, ".local/share/kubebuilder-envtest/k8s")
	platform := "-" + runtime.GOOS + "-" + runtime.GOARCH
	fakeControlPlane(t, filepath.Join(root, "1.30.0"+platform))
	fakeControlPlane(t, filepath.Join(root, "1.36.1"+platform))
	fakeControlPlane(t, filepath.Join(root, "1.99.0-plan9-mips")) // another platform's
	if err := os.MkdirAll(filepath.Join(root, "1.98.0"+platform), 0o755); err != nil {
		t.Fatal(err) // a download that did not finish
	}
	if dir, err := findControlPlane(""); err != nil || dir != filepath.Join(root, "1.36.1"+platform) {
		t.Errorf("without %s: %s, %v; want the newest complete version of this platform, 1.36.1", KubernetesVersion, dir, err)
	}
	fakeControlPlane(t, filepath.Join(root, KubernetesVersion+platform))
	if dir, err := findControlPlane(""); err != nil || dir != filepath.Join(root, KubernetesVersion+platform) {
		t.Errorf("with %s: %s, %v; want %s, the version turnlog is tested on", KubernetesVersion, dir, err, KubernetesVersion)
	}

	// hack/controlplane.sh's layout under its own root.
	other := filepath.Join(t.TempDir(), "envtest")
	fakeControlPlane(t, filepath.Join(other, "k8s", KubernetesVersion+platform))
	t.Setenv("ENVTEST_ROOT", other)
	if dir, err := findControlPlane(""); err != nil || dir != filepath.Join(other, "k8s", KubernetesVersion+platform) {
		t.Errorf("with ENVTEST_ROOT: %s, %v", dir, err)
	}

	// An explicit directory wins, and is not second-guessed.
	assets := t.TempDir()
	fakeControlPlane(t, assets)
	t.Setenv("KUBEBUILDER_ASSETS", assets)
	if dir, err := findControlPlane(""); err != nil || dir != assets {
		t.Errorf("with KUBEBUILDER_ASSETS: %s, %v", dir, err)
	}
	given := t.TempDir()
	if _, err := findControlPlane(given); err == nil || !strings.Contains(err.Error(), given+" (WithControlPlane)") {
		t.Errorf("WithControlPlane of an empty directory: %v", err)
	}
}

func TestRefusesOptionsItCannotRunWith(t *testing.T) {
	for _, c := range []struct {
		opt  Option
		want string
	}{
		{WithWorkerMode("thread"), `unknown worker mode "thread"`},
		{WithPollInterval(0), "poll interval must be positive"},
		{WithNamespaces("Team_A"), `namespace "Team_A"`},
		{WithStoreURL("mem://"), "use file:///dir"},
	} {
		if _, err := New(context.Background(), c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error saying %q", err, c.want)
		}
	}
}

var model = agenthost.Adapter{Kind: "pi-ai", API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5"}

// oneTurn is a complete turn of a log.
func oneTurn() []agenthost.Event {
	return []agenthost.Event{
		agenthost.SessionStart(model),
		agenthost.TurnStart(1),
		agenthost.UserText(1, "hi"),
		agenthost.ResponseStart(1, 0, model),
		agenthost.TextDelta(1, 0, 0, "hello"),
		agenthost.ResponseFinish(1, 0, agenthost.StopReasonStop, nil, nil),
		agenthost.TurnEnd(1, agenthost.StopReasonStop),
	}
}

// TestStartWithOptions runs turnlog for one namespace on a store the test
// gives, and checks what a test using it relies on: the kubeconfig works,
// the admission policy is enforced, Sessions in the namespace are
// reconciled and others are not, and Stop stops the API server.
func TestStartWithOptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	storeDir := t.TempDir()
	tl := Start(t, WithNamespaces("team-a"), WithStoreURL("file://"+storeDir), WithPollInterval(200*time.Millisecond))
	if tl.StoreURL != "file://"+storeDir {
		t.Errorf("StoreURL = %s, want the one given", tl.StoreURL)
	}

	// The kubeconfig file reaches the same API server.
	cfg, err := clientcmd.BuildConfigFromFlags("", tl.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := client.New(cfg, client.Options{Scheme: tl.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	st, err := agenthost.OpenStore(ctx, tl.StoreURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, ns := range []string{"team-a", "default"} {
		if _, err := st.ImportSession(ctx, kube, ns, "chat", oneTurn(), nil); err != nil {
			t.Fatalf("import into %s: %v", ns, err)
		}
	}
	ready := func(ns string) string {
		s := &turnlogv1.Session{}
		if err := tl.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "chat"}, s); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady); c != nil {
			return string(c.Status) + "/" + c.Reason
		}
		return "no Ready condition"
	}
	for ready("team-a") != "True/Current" {
		if ctx.Err() != nil {
			t.Fatalf("the Session in the watched namespace is %s", ready("team-a"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(storeDir, "team-a", "chat")); err != nil {
		t.Errorf("the log is not in the store given: %v", err)
	}
	// Several polls later, the other namespace's Session is still untouched.
	time.Sleep(time.Second)
	if got := ready("default"); got != "no Ready condition" {
		t.Errorf("a Session outside the watched namespace is %s", got)
	}

	// A tenant who may write Sessions may still not claim to be a fork's
	// child; the policy may take a moment to be enforced.
	tenant := tenantClient(t, ctx, tl, "team-a", "alice")
	forged := &turnlogv1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "forged"},
		Spec: turnlogv1.SessionSpec{ForkedFrom: &turnlogv1.ForkOrigin{
			Session: "chat", UID: "b1e3a0c2-0000-4000-8000-000000000001", Fork: "forged", ForkUID: "b1e3a0c2-0000-4000-8000-000000000002",
			AnchorSeq: 6, CutSeq: 6,
		}},
	}
	for {
		err := tenant.Create(ctx, forged.DeepCopy(), client.DryRunAll)
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "spec.forkedFrom is set only by the turnlog manager") {
			break
		}
		// Admitted (the policy not enforced yet) or refused by RBAC (the
		// Role not seen yet).
		if ctx.Err() != nil || (err != nil && !apierrors.IsForbidden(err)) {
			t.Fatalf("a tenant's forged spec.forkedFrom: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := tl.Stop(); err != nil {
		t.Fatal(err)
	}
	err = kube.List(context.Background(), &turnlogv1.SessionList{})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after Stop, the API server answers: %v", err)
	}
	if _, err := os.Stat(storeDir); err != nil {
		t.Errorf("Stop removed the store it was given: %v", err)
	}
}

// tenantClient gives user every right on Sessions in ns and returns a
// client acting as that user.
func tenantClient(t *testing.T, ctx context.Context, tl *Env, ns, user string) client.Client {
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sessions"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"turnlog.dev"}, Resources: []string{"sessions"}, Verbs: []string{"*"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sessions-" + user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	}
	for _, o := range []client.Object{role, binding} {
		if err := tl.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(tl.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: tl.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
