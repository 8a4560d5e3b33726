package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// retryTurns go on from the sample's aborted turn 3 (seq 16) in the child
// forked from its stopped message: an answer carrying another library's
// replay state, which replay degrades, then a turn stopped while it
// streamed.
const retryTurns = `{"seq":17,"type":"turn/start","turn":4}
{"seq":18,"type":"user/message","turn":4,"content":[{"type":"text","text":"Only the first step, briefly."}]}
{"seq":19,"type":"response/start","turn":4,"response":0,"adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}
{"seq":20,"type":"chunk","turn":4,"response":0,"block":0,"delta":{"type":"text","text":"Check that the registry answers from inside the cluster."}}
{"seq":21,"type":"response/finish","turn":4,"response":0,"stopReason":"stop","replayState":{"kind":"other-library","version":1,"response":{}}}
{"seq":22,"type":"turn/end","turn":4,"reason":"stop"}
{"seq":23,"type":"turn/start","turn":5}
{"seq":24,"type":"user/message","turn":5,"content":"And the second step?"}
{"seq":25,"type":"response/start","turn":5,"response":0}
{"seq":26,"type":"chunk","turn":5,"response":0,"block":0,"delta":{"type":"text","text":"Then re-run the pipe"}}
{"seq":27,"type":"turn/end","turn":5,"reason":"aborted"}
`

// earlyTurn goes on from the sample's turn 2 (seq 11) in a sibling of
// the child above, forked before the runbook was asked for.
const earlyTurn = `{"seq":12,"type":"turn/start","turn":3}
{"seq":13,"type":"user/message","turn":3,"content":[{"type":"text","text":"Skip the retry: roll back to yesterday's image."}]}
{"seq":14,"type":"response/start","turn":3,"response":0,"adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5"}}
{"seq":15,"type":"chunk","turn":3,"response":0,"block":0,"delta":{"type":"text","text":"Rolling back: set the image tag to yesterday's and apply."}}
{"seq":16,"type":"response/finish","turn":3,"response":0,"stopReason":"stop"}
{"seq":17,"type":"turn/end","turn":3,"reason":"stop"}
`

// comparisonShown is what the compare page shows: the shared line and
// how many lines it takes, the two columns' heads, and a row per turn.
type comparisonShown struct {
	Path        string
	Shared      string
	SharedLines int
	Heads       []string
	Branches    string // all the text of the two columns
	Rows        []comparedRow
}

type comparedRow struct {
	Turn             int
	A, B             string // each column's text
	AFrozen, BFrozen string // the frozen text in each, greyed
	ADegraded        string // the degraded marks in each
	BDegraded        string
}

const readComparison = `(() => {
	const shared = document.getElementById('shared');
	const range = document.createRange();
	range.selectNodeContents(shared);
	const cell = (tr, side, sel) => [...tr.querySelectorAll('td.side-' + side + ' ' + sel)].map((n) => n.textContent).join(' | ');
	return {
		Path: location.pathname,
		Shared: shared.textContent,
		SharedLines: new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size,
		Heads: [...document.querySelectorAll('#branches thead th')].map((th) => th.textContent),
		Branches: document.getElementById('branches').textContent,
		Rows: [...document.querySelectorAll('#branches tbody tr.row')].map((tr) => ({
			Turn: Number(tr.dataset.turn),
			A: tr.querySelector('td.side-a').textContent, B: tr.querySelector('td.side-b').textContent,
			AFrozen: cell(tr, 'a', '.frozen .frozen-text'), BFrozen: cell(tr, 'b', '.frozen .frozen-text'),
			ADegraded: cell(tr, 'a', 'li.message.degraded .badge.warn'), BDegraded: cell(tr, 'b', 'li.message.degraded .badge.warn'),
		})),
	};
})()`

// compareParentAndChild continues the fork's child with turns of its own,
// then picks the source and the child in the source's fork tree: the
// page shows their shared prefix on one line, cut at 16, and the turns
// after it side by side, the source's on the left.
func (r *uiRun) compareParentAndChild() {
	t := r.t
	r.appendTo("support-chat-retry", retryTurns)
	waitSession(r.ctx, t, r.tl.Client, "support-chat-retry", 27)
	got := r.pick("support-chat", "support-chat-retry")
	browse(t, r.page, "screenshot the comparison", r.shots("ui-compare.png"))
	wantComparison(t, got, comparisonShown{
		Path:        "/compare/default/support-chat/default/support-chat-retry",
		Shared:      "shared: seq 0–16, turns 1–3, 5 messages; cut at seq 16 (turn 3, aborted)",
		SharedLines: 1,
		Heads:       []string{"A: default/support-chat — head 22, replayed through 22", "B: default/support-chat-retry — head 27, replayed through 27"},
		Rows: []comparedRow{
			{Turn: 4, A: sampleTurn4 + "|First, check whether the registry is reachable from the cluster.",
				B: "Only the first step, briefly.|Check that the registry answers from inside the cluster.", BDegraded: "degraded: kind"},
			{Turn: 5, B: "And the second step?", BFrozen: "Then re-run the pipe"},
		},
	}, "Our nightly deploy failed", sampleFrozen)
}

// compareSiblings forks the sample again before its runbook turn and
// continues that child too, then compares the two children, picked in
// their source's tree: the prefix is turns 1-2, and each sibling's turn 3
// stands beside the other's, the stopped one with its frozen text.
func (r *uiRun) compareSiblings() {
	t := r.t
	fork := &turnlogv1.SessionFork{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "support-chat-early"},
		Spec: turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: "support-chat"}, AtSeq: "11",
			Target: turnlogv1.ForkTarget{Name: "support-chat-early"}}}
	if err := r.tl.Client.Create(r.ctx, fork); err != nil {
		t.Fatal(err)
	}
	waitSession(r.ctx, t, r.tl.Client, "support-chat-early", 11)
	r.appendTo("support-chat-early", earlyTurn)
	waitSession(r.ctx, t, r.tl.Client, "support-chat-early", 17)
	got := r.pick("support-chat-retry", "support-chat-early")
	wantComparison(t, got, comparisonShown{
		Path:        "/compare/default/support-chat-retry/default/support-chat-early",
		Shared:      "shared: seq 0–11, turns 1–2, 4 messages; cut at seq 11 (turn 2, stop)",
		SharedLines: 1,
		Heads:       []string{"A: default/support-chat-retry — head 27, replayed through 27", "B: default/support-chat-early — head 17, replayed through 17"},
		Rows: []comparedRow{
			{Turn: 3, A: "Write the full runbook for this.", AFrozen: sampleFrozen,
				B: "Skip the retry: roll back to yesterday's image.|Rolling back: set the image tag to yesterday's and apply."},
			{Turn: 4, A: "Only the first step, briefly.|Check that the registry answers from inside the cluster.", ADegraded: "degraded: kind"},
			{Turn: 5, A: "And the second step?", AFrozen: "Then re-run the pipe"},
		},
	}, "Our nightly deploy failed", "How do we make it retry?")
	browse(t, r.page, "a comparison with a Session that is not there",
		chromedp.Navigate(r.at("/compare/default/support-chat/default/nope")),
		poll(`document.getElementById('page-error')?.textContent === "Session default/nope not found"`))
}

// appendTo appends JSON Lines to Session name's log, as a host does, and
// nudges it.
func (r *uiRun) appendTo(name, lines string) {
	r.t.Helper()
	st, err := agenthost.OpenStore(r.ctx, r.tl.StoreURL, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	defer st.Close()
	log, err := st.OpenSession(r.ctx, r.tl.Client, "default", name)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, _, err := log.AppendFrom(r.ctx, strings.NewReader(lines)); err != nil {
		r.t.Fatal(err)
	}
	if err := log.Nudge(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

// pick ticks a, then b, in the fork tree of the sample's page, compares
// them, and reads the comparison.
func (r *uiRun) pick(a, b string) comparisonShown {
	box := func(name string) string { return fmt.Sprintf(`#tree input.pick[data-session=%q]`, name) }
	browse(r.t, r.page, "pick "+a+" and "+b+" in the fork tree",
		chromedp.Navigate(r.at("/s/default/support-chat")),
		poll(`document.querySelector('`+box(a)+`') !== null && document.querySelector('`+box(b)+`') !== null`),
		click(box(a)), click(box(b)),
		poll(`!document.getElementById('compare-picked').disabled`),
		click("#compare-picked"),
		poll(`location.pathname.startsWith("/compare/") && document.getElementById('branches') !== null`))
	return evaluate[comparisonShown](r.t, r.page, "read the comparison", readComparison)
}

// wantComparison checks the comparison shown: its path, the shared line
// and its height, the heads, and per row each column's text (its
// messages' text, wanted as "first|second"), frozen text and degraded
// marks; text of the shared prefix (notShown) must appear in neither
// column.
func wantComparison(t *testing.T, got, want comparisonShown, notShown ...string) {
	t.Helper()
	if got.Path != want.Path || got.Shared != want.Shared || got.SharedLines != want.SharedLines || !slices.Equal(got.Heads, want.Heads) {
		t.Errorf("the comparison at %s shows\n  %q on %d lines, heads %q\nwant at %s\n  %q on %d line, heads %q",
			got.Path, got.Shared, got.SharedLines, got.Heads, want.Path, want.Shared, want.SharedLines, want.Heads)
	}
	for _, text := range notShown {
		if strings.Contains(got.Branches, text) {
			t.Errorf("the branches show %q, of the shared prefix", text)
		}
	}
	if len(got.Rows) != len(want.Rows) {
		t.Fatalf("rows %+v, want turns %+v", got.Rows, want.Rows)
	}
	for i, w := range want.Rows {
		g := got.Rows[i]
		if g.Turn != w.Turn || !holds(g.A, w.A) || !holds(g.B, w.B) || g.AFrozen != w.AFrozen || g.BFrozen != w.BFrozen ||
			g.ADegraded != w.ADegraded || g.BDegraded != w.BDegraded {
			t.Errorf("row %d: %+v\nwant %+v", i, g, w)
		}
	}
}

// holds reports whether a column's text holds the texts wanted, in order
// ("a|b"), and nothing when none is wanted.
func holds(column, want string) bool {
	if want == "" {
		return strings.TrimSpace(column) == ""
	}
	for part := range strings.SplitSeq(want, "|") {
		i := strings.Index(column, part)
		if i < 0 {
			return false
		}
		column = column[i+len(part):]
	}
	return true
}

// search labels the sample, adds a Session in another namespace, and
// narrows the list by each filter.
func (r *uiRun) search() {
	t := r.t
	sample := &turnlogv1.Session{}
	if err := r.tl.Client.Get(r.ctx, client.ObjectKey{Namespace: "default", Name: "support-chat"}, sample); err != nil {
		t.Fatal(err)
	}
	sample.Labels = map[string]string{"team": "support"}
	if err := r.tl.Client.Update(r.ctx, sample); err != nil {
		t.Fatal(err)
	}
	other := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
		&turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "billing"}}}
	for _, o := range other {
		if err := r.tl.Client.Create(r.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"default/refused-chat", "default/support-chat", "default/support-chat-early", "default/support-chat-retry"}
	browse(t, r.page, "the whole list", chromedp.Navigate(r.at("/?namespace=default")), poll(rowsAre(all)), r.shots("ui-sessions.png"))
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"namespace=default&name=RETRY", []string{"default/support-chat-retry"}},
		{"namespace=default&label=team%3Dsupport", []string{"default/support-chat"}},
		{"all=1&ready=Unknown", []string{"team-b/billing"}},
		{"namespace=team-b", []string{"team-b/billing"}},
		{"namespace=default&degraded=1", all[1:]},
		{"namespace=default&refused=1", all[:1]},
		{"namespace=default&text=roll+back", []string{"default/support-chat-early"}},
		{"namespace=default&text=step", []string{"default/support-chat", "default/support-chat-retry"}},
	} {
		browse(t, r.page, "the list narrowed by "+c.query, chromedp.Navigate(r.at("/?"+c.query)), poll(rowsAre(c.want)))
	}
	browse(t, r.page, "the last user messages found",
		poll(textIs(`tr[data-session="default/support-chat-retry"] .last-user`, "And the second step?")+
			` && document.getElementById('search-note').textContent.startsWith("Searched the last user message of 4 Sessions.")`),
		r.shots("ui-search.png"))
}

// rowsAre is a JavaScript test that the Sessions list shows exactly
// these Sessions (namespace/name), in order.
func rowsAre(sessions []string) string {
	want, _ := json.Marshal(sessions)
	return fmt.Sprintf(`JSON.stringify([...document.querySelectorAll('#sessions tbody tr')].map((tr) => tr.dataset.session)) === %q`, want)
}

// limitedUser runs a second `turnlog ui` as a user who may read Sessions,
// SessionForks and Events in namespace default, and nothing else: asked
// for every namespace, it lists default's and says why; a fork is
// refused with the API server's words.
func (r *uiRun) limitedUser() {
	t := r.t
	kubeconfig := r.limitedKubeconfig("viewer", "default")
	url, _ := startUIWith(r.ctx, t, turnlogBin, "--kubeconfig", kubeconfig, "--store-url", r.tl.StoreURL)
	// The tab the test drives goes to the viewer's page: a Session's
	// page opened in a tab of its own can stall headless Chromium.
	tab := r.page
	browse(t, tab, "the viewer's list of every namespace",
		chromedp.Navigate(url+"?all=1"),
		poll(rowsAre([]string{"default/refused-chat", "default/support-chat", "default/support-chat-early", "default/support-chat-retry"})),
		poll(`document.getElementById('scope-note')?.textContent.startsWith("You may not list Sessions across namespaces (sessions.turnlog.dev is forbidden: User \"viewer\" cannot list resource \"sessions\"")`+
			` && document.getElementById('scope-note').textContent.endsWith("nor namespaces: showing namespace default, turnlog ui's (-n, else your kubeconfig context's).")`))
	status := `.frozen[data-seq="15"] .fork-status`
	browse(t, tab, "the viewer forks",
		chromedp.Navigate(strings.TrimSuffix(url, "/")+"/s/default/support-chat"),
		click(`.frozen[data-seq="15"] button.fork`),
		poll(`document.querySelector('`+status+`.error')?.textContent.includes('sessionforks.turnlog.dev is forbidden: User "viewer" cannot create resource "sessionforks" in API group "turnlog.dev" in the namespace "default"')`))
}

// limitedKubeconfig gives user the right to read Sessions, SessionForks
// and Events in namespace ns and writes a kubeconfig that acts as user
// (the API server authorizes each request as user), with ns as its
// context's namespace.
func (r *uiRun) limitedKubeconfig(user, ns string) string {
	t := r.t
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "turnlog-reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{turnlogv1.GroupVersion.Group}, Resources: []string{"sessions", "sessionforks"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "turnlog-reader-" + user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
	for _, o := range []client.Object{role, binding} {
		if err := r.tl.Client.Create(r.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := clientcmd.LoadFromFile(r.tl.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	for _, c := range cfg.Contexts {
		c.Namespace = ns
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-"+user)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
