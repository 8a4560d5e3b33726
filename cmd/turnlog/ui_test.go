package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/testutil/controlplane"
	"github.com/turnlog/turnlog/internal/testutil/loggen"
	"github.com/turnlog/turnlog/turnlogtest"
)

// The sample Session's stopped response: frozen partial text that the page
// shows greyed and never as part of the transcript.
const (
	sampleFrozen   = "Runbook: 1. Check the registry status page"
	sampleFrozenAt = "15.1" // its turn/end is seq 16: the frozen node is 16 - 0.9
	sampleTurn4    = "Stop. Just the first step, please."
)

// TestUIInBrowser runs `turnlog ui` against a local cluster holding the
// sample Session and drives it from headless Chromium as a person would:
// the list, the Session with its degraded message and greyed frozen text,
// a fork from the stopped message, a fork whose name is taken, the child;
// the comparison of the child with its source and of two siblings; the
// list's filters; and a user who may read one namespace and fork nothing.
// UI_SCREENSHOTS=DIR (relative to the repository) saves the pages.
func TestUIInBrowser(t *testing.T) {
	r := startUIRun(t)
	for _, step := range []struct {
		name string
		run  func()
	}{
		{"the Sessions list", r.sessionsList}, {"the Session page", r.sessionPage}, {"a fork from the stopped message", r.forkFromStopped},
		{"the child's page", r.childPage}, {"a refused block", r.refusedSession}, {"a comparison of parent and child", r.compareParentAndChild},
		{"a comparison of siblings", r.compareSiblings}, {"the list's filters", r.search}, {"a user who may read one namespace", r.limitedUser},
	} {
		started := time.Now()
		step.run()
		t.Logf("%s: %.1f s", step.name, time.Since(started).Seconds())
	}
}

// uiRun is one run of TestUIInBrowser: the cluster, the `turnlog ui` it
// drives, and the browser's tabs.
type uiRun struct {
	t     *testing.T
	ctx   context.Context
	tl    *turnlogtest.Env
	url   string
	page  context.Context // the tab the test drives
	list  context.Context // a second tab that keeps the Sessions list open
	shots func(name string) chromedp.Action[chromedp.Void]
}

// startUIRun starts turnlog as `make dev` runs it (the controllers with
// local workers, a file:// store, namespace default, a short poll) with
// the sample Session, `turnlog ui` on it, and the browser.
func startUIRun(t *testing.T) *uiRun {
	browser := findChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	controlplane.SkipIfMissing(t)
	tl := turnlogtest.Start(t, turnlogtest.WithControlPlane(controlplane.Assets()), turnlogtest.WithNamespaces("default"),
		turnlogtest.WithPollInterval(200*time.Millisecond))
	importSample(ctx, t, tl)
	waitSession(ctx, t, tl.Client, "support-chat", 22)
	r := &uiRun{t: t, ctx: ctx, tl: tl, url: startUI(ctx, t, tl), shots: screenshots(t)}
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))...)
	t.Cleanup(cancelAlloc)
	var cancelPage context.CancelFunc
	r.page, cancelPage = chromedp.NewContext(alloc)
	t.Cleanup(cancelPage)
	// The first run starts the browser, which lives as long as its context.
	if err := chromedp.Do(r.page); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	return r
}

// at is the URL of a path of the page.
func (r *uiRun) at(path string) string { return strings.TrimSuffix(r.url, "/") + path }

// sessionsList: the sample Session with its status, from the watch; a
// second tab keeps the list open, where the child must appear without a
// reload.
func (r *uiRun) sessionsList() {
	row := `tr[data-session="default/support-chat"]`
	browse(r.t, r.page, "the Sessions list",
		chromedp.Navigate(r.url),
		poll(textIs(row+" .ready", "True")+" && "+textIs(row+" .head", "22")+" && "+textIs(row+" .turns", "4")+
			" && "+textIs(row+" .causes", "version:3")+" && "+textIs(row+" .degraded", "1")))
	var cancel context.CancelFunc
	r.list, cancel = chromedp.NewContext(r.page)
	r.t.Cleanup(cancel)
	if err := chromedp.Do(r.list); err != nil {
		r.t.Fatal(err)
	}
	browse(r.t, r.list, "the list in a second tab", chromedp.Navigate(r.url), poll(textIs(row+" .ready", "True")))
}

// sessionPage: the degraded message marked with the Event's words, the
// stopped response greyed outside the transcript.
func (r *uiRun) sessionPage() {
	t := r.t
	browse(t, r.page, "the Session page",
		click(`tr[data-session="default/support-chat"] a.session-link`),
		poll(`document.querySelector('li.message.degraded[data-seq="3"] .degraded-note')?.textContent.includes("seq 3 replayed provider-neutral")`),
		chromedp.WaitVisible(chromedp.CSS(`.frozen .frozen-text`)))
	got := evaluate[sessionFacts](t, r.page, "read the Session page", fmt.Sprintf(`(() => {
		const frozen = [...document.querySelectorAll('.frozen')].find((f) => f.textContent.includes(%[1]q));
		const text = frozen && frozen.querySelector('.frozen-text');
		const body = document.querySelector('.transcript li.message .body');
		return {
			Degraded: document.querySelector('li.message.degraded[data-seq="3"]')?.textContent || "",
			Frozen: !!text && text.textContent.includes(%[1]q),
			FrozenInTranscript: [...document.querySelectorAll('.transcript')].some((l) => l.textContent.includes(%[1]q)) || !!(frozen && frozen.closest('.transcript')),
			FrozenColor: text ? getComputedStyle(text).color : "",
			FrozenStyle: text ? getComputedStyle(text).fontStyle : "",
			BodyColor: body ? getComputedStyle(body).color : "",
			ForkAt: frozen?.querySelector('button.fork')?.dataset.forkAt || "",
			Turn4: [...document.querySelectorAll('.transcript')].some((l) => l.textContent.includes(%[2]q)),
		};
	})()`, sampleFrozen, sampleTurn4))
	if !strings.Contains(got.Degraded, "degraded: version") {
		t.Errorf("the degraded message at seq 3 does not show its cause: %q", got.Degraded)
	}
	if !got.Frozen || got.FrozenInTranscript {
		t.Errorf("frozen text shown: %v, inside the transcript: %v; want shown, outside", got.Frozen, got.FrozenInTranscript)
	}
	if got.FrozenColor == got.BodyColor || got.FrozenStyle != "italic" {
		t.Errorf("frozen text is not greyed: color %s (transcript %s), font-style %s", got.FrozenColor, got.BodyColor, got.FrozenStyle)
	}
	if !got.Turn4 {
		t.Error("the transcript does not show turn 4")
	}
	if got.ForkAt != sampleFrozenAt {
		t.Errorf("the stopped message forks at %q, want the frozen node %s", got.ForkAt, sampleFrozenAt)
	}
	browse(t, r.page, "screenshot the Session", r.shots("ui-session.png"))
}

// forkFromStopped: one click on the stopped message forks at its frozen
// node; the same name again shows the API server's refusal where it was
// clicked; the list left open shows the child.
func (r *uiRun) forkFromStopped() {
	t := r.t
	status := `.frozen[data-seq="15"] .fork-status`
	browse(t, r.page, "fork from the stopped message",
		chromedp.SetValue(chromedp.CSS("#fork-name"), "support-chat-retry"),
		click(`.frozen[data-seq="15"] button.fork`),
		poll(`document.querySelector('`+status+`.done a.child')?.textContent === "support-chat-retry"`))
	fork := &turnlogv1.SessionFork{}
	if err := r.tl.Client.Get(r.ctx, client.ObjectKey{Namespace: "default", Name: "support-chat-retry"}, fork); err != nil {
		t.Fatal(err)
	}
	if cut := fork.Status.CutSeq; fork.Spec.AtSeq != sampleFrozenAt || cut == nil || *cut != 16 {
		t.Errorf("SessionFork atSeq %q cut %s, want atSeq %q (the frozen node, as sent) cut 16", fork.Spec.AtSeq, fmtSeq(cut), sampleFrozenAt)
	}
	waitSession(r.ctx, t, r.tl.Client, "support-chat-retry", 16)
	browse(t, r.page, "fork with a name taken",
		click(`.frozen[data-seq="15"] button.fork`),
		poll(`document.querySelector('`+status+`.error')?.textContent.includes("already exists")`))
	t.Logf("refusal shown: %s", evaluate[string](t, r.page, "read the refusal", `document.querySelector('`+status+`').textContent`))
	child := `tr[data-session="default/support-chat-retry"]`
	browse(t, r.list, "the child in the open list", poll(textIs(child+" .forked-from", "support-chat @ 16")))
}

// childPage: the child, from the fork tree: turns 1-3, the stopped
// response greyed and out of its transcript, no turn 4; its tree links
// the parent.
func (r *uiRun) childPage() {
	t := r.t
	browse(t, r.page, "the child's page",
		click(`#tree a[href="/s/default/support-chat-retry"]`),
		poll(`document.querySelector('#tree a[href="/s/default/support-chat"]') !== null && document.querySelectorAll('.transcript li.message').length > 0`))
	// The page renders again as the child's status changes (showing
	// "Loading…" meanwhile): read it once it is there.
	var childPage struct{ Loaded, FrozenInTranscript, Turn4 bool }
	for range 50 {
		childPage = evaluate[struct{ Loaded, FrozenInTranscript, Turn4 bool }](t, r.page, "read the child's page", fmt.Sprintf(`(() => {
			const c = document.getElementById('conversation');
			return {
				Loaded: !!c && document.querySelectorAll('.transcript li.message').length > 0,
				FrozenInTranscript: [...document.querySelectorAll('.transcript')].some((l) => l.textContent.includes(%[1]q)),
				Turn4: !!c && c.textContent.includes(%[2]q),
			};
		})()`, sampleFrozen, sampleTurn4))
		if childPage.Loaded {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !childPage.Loaded {
		t.Fatal("the child's page did not render its conversation")
	}
	browse(t, r.page, "screenshot the child", r.shots("ui-child.png"))
	if childPage.FrozenInTranscript || childPage.Turn4 {
		t.Errorf("child's transcript: frozen text in it %v, turn 4 in it %v; want neither", childPage.FrozenInTranscript, childPage.Turn4)
	}
}

// refusedSession: a Session whose provider refused a thinking block: the
// message that carries it says so in replay's words, the summary counts
// it, and the answers that only reported it are not marked.
func (r *uiRun) refusedSession() {
	importLog(r.ctx, r.t, r.tl, "refused-chat", bytes.NewReader(loggen.RefusedLog(3)))
	waitSession(r.ctx, r.t, r.tl.Client, "refused-chat", 12)
	browse(r.t, r.page, "a Session with a refused block",
		chromedp.Navigate(r.at("/s/default/refused-chat")),
		poll(`document.querySelector('li.message.refused[data-seq="3"] .refused-note')?.textContent.includes(`+
			`"thinking block 0 of seq 3 kept, as pi keeps it: refused by anthropic (prefix_binding_mismatch) at messages.2.content.0, reported at seq 7")`),
		poll(`document.getElementById('refused')?.textContent.startsWith("1 thinking block the provider refused — sent again, as pi does")`))
	if marked := evaluate[int](r.t, r.page, "count the refused messages", `document.querySelectorAll('li.message.refused').length`); marked != 1 {
		r.t.Errorf("%d messages marked refused, want seq 3's alone", marked)
	}
}

// sessionFacts are what the Session page shows a person.
type sessionFacts struct {
	Degraded, FrozenColor, BodyColor, FrozenStyle, ForkAt string
	Frozen, FrozenInTranscript, Turn4                     bool
}

func fmtSeq(v *int64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}

// findChromium returns Debian's chromium: on PATH, else /usr/bin/chromium.
// Without it the test is skipped, except under CI=true.
func findChromium(t *testing.T) string {
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH or in /usr/bin: run `make browser` (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH or in /usr/bin: run `make browser` (apt-get install chromium)")
	return ""
}

func importSample(ctx context.Context, t *testing.T, tl *turnlogtest.Env) {
	t.Helper()
	f, err := os.Open("../../config/samples/support-chat.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	importLog(ctx, t, tl, "support-chat", f)
}

// importLog imports the log r holds as Session name of namespace default.
func importLog(ctx context.Context, t *testing.T, tl *turnlogtest.Env, name string, r io.Reader) {
	t.Helper()
	events, err := agenthost.ReadEvents(bufio.NewReader(r), 0)
	if err != nil {
		t.Fatal(err)
	}
	st, err := agenthost.OpenStore(ctx, tl.StoreURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.ImportSession(ctx, tl.Client, "default", name, events, nil); err != nil {
		t.Fatal(err)
	}
}

// waitSession waits until the Session is Ready and replayed through seq.
func waitSession(ctx context.Context, t *testing.T, kube client.Client, name string, seq int64) {
	t.Helper()
	s := &turnlogv1.Session{}
	for {
		err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, s)
		if err == nil && meta.IsStatusConditionTrue(s.Status.Conditions, turnlogv1.ConditionReady) &&
			s.Status.Replay != nil && s.Status.Replay.ThroughSeq >= seq {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Session %s not Ready and replayed through %d: %v %+v", name, seq, err, s.Status)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startUI runs `turnlog ui` on a free port with the cluster's kubeconfig
// and store, as a user would, and returns the URL it prints.
func startUI(ctx context.Context, t *testing.T, tl *turnlogtest.Env) string {
	t.Helper()
	url, _ := startUIBinary(ctx, t, tl, turnlogBin)
	return url
}

// startUIBinary runs `ui` of the turnlog binary bin, as startUI does, and
// returns the URL it prints and its process id.
func startUIBinary(ctx context.Context, t *testing.T, tl *turnlogtest.Env, bin string) (string, int) {
	t.Helper()
	return startUIWith(ctx, t, bin, "--kubeconfig", tl.Kubeconfig, "-n", "default", "--store-url", tl.StoreURL)
}

// startUIWith runs `bin ui --port 0` with the flags given and returns the
// URL it prints and its process id.
func startUIWith(ctx context.Context, t *testing.T, bin string, flags ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append([]string{"ui", "--port", "0"}, flags...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("turnlog ui printed no URL: %v", err)
	}
	fields := strings.Fields(line)
	if len(fields) < 3 || !strings.HasPrefix(fields[2], "http://127.0.0.1:") {
		t.Fatalf("turnlog ui printed %q, want its URL on 127.0.0.1", line)
	}
	return fields[2], cmd.Process.Pid
}

// browse runs browser actions, failing the test with what was being done.
func browse(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	evaluate[chromedp.Void](t, ctx, what, "", actions...)
}

// evaluate runs browser actions, then the JavaScript expression (if any),
// and returns its value; it fails the test with what was being done and
// the page's text. Each call has a minute.
func evaluate[T any](t *testing.T, ctx context.Context, what, expr string, actions ...chromedp.Action[chromedp.Void]) T {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var v T
	err := chromedp.Do(step, actions...)
	if err == nil && expr != "" {
		v, err = chromedp.Run(step, chromedp.Evaluate[T](expr))
	}
	if err != nil {
		read, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, _ := chromedp.Run(read, chromedp.Evaluate[string](`location.href + "\n" + (document.querySelector("main")?.innerText ?? "")`))
		t.Fatalf("%s: %v\npage:\n%s", what, err, body)
	}
	return v
}

// poll waits until the JavaScript expression is true, in the page a
// click has just navigated to too.
func poll(expr string) chromedp.Action[chromedp.Void] {
	return again(chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond)),
		"navigated", "Cannot find context")
}

// click clicks the element selector finds. The page renders again as
// status changes arrive from the watch, so the node found can be gone
// before the click lands: then it finds the element again, as a person
// whose button moved under the pointer would click again.
func click(selector string) chromedp.Action[chromedp.Void] {
	return again(chromedp.Click(chromedp.CSS(selector)), "Could not find node", "No node with given id", "detached")
}

// again runs action until it succeeds, fails with an error other than
// one naming a transient cause, or ctx ends.
func again(action chromedp.Action[chromedp.Void], transient ...string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tab *chromedp.Target) (chromedp.Void, error) {
		for {
			_, err := action(ctx, tab)
			if err == nil || ctx.Err() != nil || !slices.ContainsFunc(transient, func(s string) bool { return strings.Contains(err.Error(), s) }) {
				return chromedp.Void{}, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// textIs is a JavaScript test of an element's text.
func textIs(selector, text string) string {
	return fmt.Sprintf(`(document.querySelector(%q)?.textContent.trim() === %q)`, selector, text)
}

// screenshots returns an action that saves the page as a PNG in
// $UI_SCREENSHOTS (relative to the repository), or does nothing.
func screenshots(t *testing.T) func(name string) chromedp.Action[chromedp.Void] {
	dir := os.Getenv("UI_SCREENSHOTS")
	return func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tab *chromedp.Target) error {
			if dir == "" {
				return nil
			}
			png, err := chromedp.FullScreenshot(100)(ctx, tab)
			if err != nil {
				return err
			}
			path := dir
			if !filepath.IsAbs(path) {
				path = filepath.Join("..", "..", dir)
			}
			t.Logf("screenshot %s", filepath.Join(path, name))
			return os.WriteFile(filepath.Join(path, name), png, 0o644)
		})
	}
}

// lastTurnShown is put in the page before its scripts run: it records, as
// window.__lastTurnShownAt, the time since the navigation began at which
// the Session's last turn was first drawn (the frame after it entered the
// DOM), whichever page draws it.
const lastTurnShown = `(() => {
	const selector = %q;
	const seen = () => {
		if (!document.querySelector(selector)) return false;
		requestAnimationFrame(() => setTimeout(() => { window.__lastTurnShownAt = performance.now(); }, 0));
		return true;
	};
	document.addEventListener("DOMContentLoaded", () => {
		if (seen()) return;
		const watch = new MutationObserver(() => { if (seen()) watch.disconnect(); });
		watch.observe(document.body, { childList: true, subtree: true });
	});
})()`

// longPage is what TestUILongSession measures of one `turnlog ui`.
type longPage struct {
	FirstPaint time.Duration
	Nodes      float64 // the DOM's nodes (Performance.getMetrics)
	HeapMiB    float64 // the JS heap used, after a garbage collection
	AnswerKiB  float64 // the API's answers for the load
	RSSMiB     float64 // turnlog ui's resident set after the load
	PeakMiB    float64 // and its peak since it started
	ReadMiB    float64 // what turnlog ui read (rchar: the store's files, the API server's answers)
}

func (p longPage) String() string {
	return fmt.Sprintf("last turn shown after %.1f s, %.0f DOM nodes, JS heap %.1f MiB; API answers %.1f KiB; turnlog ui read %.1f MiB, RSS %.0f MiB (peak %.0f MiB)",
		p.FirstPaint.Seconds(), p.Nodes, p.HeapMiB, p.AnswerKiB, p.ReadMiB, p.RSSMiB, p.PeakMiB)
}

// procStatus reads a /proc/PID file's "Key: value" lines.
func procStatus(t *testing.T, pid int, file string) map[string]float64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, ":")
		if f := strings.Fields(v); ok && len(f) > 0 {
			out[k], _ = strconv.ParseFloat(f[0], 64)
		}
	}
	return out
}

// openLong starts a browser of its own on the long Session's page of the
// `turnlog ui` at url (process pid), waits for its last turn and measures
// the load.
func openLong(ctx context.Context, t *testing.T, browser, url string, pid int, lastTurn int) (context.Context, longPage) {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))...)
	t.Cleanup(cancelAlloc)
	page, cancelPage := chromedp.NewContext(alloc)
	t.Cleanup(cancelPage)
	if err := chromedp.Do(page); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	readBefore := procStatus(t, pid, "io")["rchar"]
	script := fmt.Sprintf(lastTurnShown, fmt.Sprintf(`section.turn[data-turn="%d"]`, lastTurn))
	browse(t, page, "open the long Session",
		chromedp.Func(func(ctx context.Context, tab *chromedp.Target) error {
			if _, err := cdp.Call(ctx, tab, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: script}); err != nil {
				return err
			}
			_, err := cdp.Call(ctx, tab, performance.Enable, performance.EnableParams{})
			return err
		}),
		chromedp.Navigate(strings.TrimSuffix(url, "/")+"/s/default/long"),
		poll(`window.__lastTurnShownAt !== undefined`))
	var p longPage
	p.FirstPaint = time.Duration(evaluate[float64](t, page, "read the first paint", `window.__lastTurnShownAt`) * float64(time.Millisecond))
	p.AnswerKiB = evaluate[float64](t, page, "read the API's answers", `performance.getEntriesByType("resource")
		.filter((r) => r.name.includes("/api/sessions/default/long")).reduce((n, r) => n + r.encodedBodySize, 0) / 1024`)
	browse(t, page, "collect the page's garbage", chromedp.Func(func(ctx context.Context, tab *chromedp.Target) error {
		_, err := cdp.Call(ctx, tab, heapprofiler.CollectGarbage, cdp.Empty{})
		return err
	}))
	got, err := chromedp.Run(page, func(ctx context.Context, tab *chromedp.Target) (performance.GetMetricsResult, error) {
		return cdp.Call(ctx, tab, performance.GetMetrics, cdp.Empty{})
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range got.Metrics {
		switch m.Name {
		case "Nodes":
			p.Nodes = m.Value
		case "JSHeapUsedSize":
			p.HeapMiB = m.Value / (1 << 20)
		}
	}
	status := procStatus(t, pid, "status")
	p.RSSMiB, p.PeakMiB = status["VmRSS"]/1024, status["VmHWM"]/1024
	p.ReadMiB = (procStatus(t, pid, "io")["rchar"] - readBefore) / (1 << 20)
	return page, p
}

// TestUILongSession imports a 10,000-turn pi session with `turnlog
// import --format pi-session` and opens it in `turnlog ui`: the last turns
// are shown, scrolling to the top loads the turns before them, and a turn
// appended live is added alone. It measures the load (the first paint of
// the last turn, the DOM's nodes, the JS heap, the API's answers,
// turnlog ui's memory), and, with UI_BASELINE_BIN, the same load of
// another build of turnlog (the one before windows) in the same run; see
// docs/benchmarks.md. Minutes long, it runs only with UI_LONG=1
// (UI_LONG_TURNS changes the number of turns).
func TestUILongSession(t *testing.T) {
	if os.Getenv("UI_LONG") == "" {
		t.Skip("UI_LONG=1 runs it (a 10,000-turn Session, minutes)")
	}
	browser := findChromium(t)
	controlplane.SkipIfMissing(t)
	turns := 10000
	if n, err := strconv.Atoi(os.Getenv("UI_LONG_TURNS")); err == nil && n > 100 {
		turns = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tl := turnlogtest.Start(t, turnlogtest.WithControlPlane(controlplane.Assets()), turnlogtest.WithNamespaces("default"),
		turnlogtest.WithPollInterval(200*time.Millisecond))
	file := filepath.Join(t.TempDir(), "long.jsonl")
	if err := os.WriteFile(file, loggen.LongPiSession(turns), 0o644); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	out := runOK(t, "", "import", "--format", "pi-session", "--session", "long", "--kubeconfig", tl.Kubeconfig, "-n", "default", "--store-url", tl.StoreURL, file)
	var events int64
	if _, err := fmt.Sscanf(out, "session/long: imported %d events", &events); err != nil {
		t.Fatalf("turnlog import printed %q", out)
	}
	waitSession(ctx, t, tl.Client, "long", events-1)
	t.Logf("%d turns (%d events) imported and replayed in %s", turns, events, time.Since(started).Round(time.Second))

	if base := os.Getenv("UI_BASELINE_BIN"); base != "" {
		url, pid := startUIBinary(ctx, t, tl, base)
		_, before := openLong(ctx, t, browser, url, pid, turns)
		t.Logf("before (%s): %s", base, before)
	}
	url, pid := startUIBinary(ctx, t, tl, turnlogBin)
	idle := procStatus(t, pid, "status")["VmRSS"] / 1024
	page, after := openLong(ctx, t, browser, url, pid, turns)
	t.Logf("after: %s; RSS %.0f MiB before the load", after, idle)

	// The last turns, in order, end with the Session's last.
	wantTurns(t, page, "the last turns", turns-49, turns)

	// Scrolled to the top, the page loads the 50 turns before, once.
	browse(t, page, "scroll to the top", chromedp.Func(func(ctx context.Context, tab *chromedp.Target) error {
		_, err := chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)(ctx, tab)
		return err
	}), poll(`document.querySelectorAll("#turns section.turn").length >= 100`))
	wantTurns(t, page, "after scrolling to the top", turns-99, turns)

	// A turn appended live is added alone: the turns shown stay as they
	// are, the new one after them.
	browse(t, page, "hold the turns shown", chromedp.Func(func(ctx context.Context, tab *chromedp.Target) error {
		_, err := chromedp.Evaluate[chromedp.Void](`window.__kept = [...document.querySelectorAll("#turns section.turn")]`)(ctx, tab)
		return err
	}))
	next := int64(turns + 1)
	appendTurn(ctx, t, tl, "long", events, next)
	browse(t, page, "the live turn", poll(fmt.Sprintf(`document.querySelector('#turns section.turn[data-turn="%d"] li.message.role-assistant') !== null`, next)))
	wantTurns(t, page, "after a live turn", turns-99, turns+1)
	if kept := evaluate[bool](t, page, "check the turns shown stayed", `window.__kept.every((s) => s.isConnected)`); !kept {
		t.Error("the live update drew turns again that it had not changed")
	}
	answers := func(query string) float64 {
		return evaluate[float64](t, page, "read the answers to "+query, fmt.Sprintf(`performance.getEntriesByType("resource")
			.filter((r) => r.name.includes("/turns?") && r.name.includes(%q)).reduce((n, r) => n + r.encodedBodySize, 0) / 1024`, query))
	}
	status := procStatus(t, pid, "status")
	t.Logf("after: earlier turns' answer %.1f KiB; live updates' answers %.1f KiB; turnlog ui RSS %.0f MiB (peak %.0f MiB)",
		answers("before="), answers("from="), status["VmRSS"]/1024, status["VmHWM"]/1024)
}

// wantTurns checks that the page shows the turns from to to, in order.
func wantTurns(t *testing.T, page context.Context, what string, from, to int) {
	t.Helper()
	got := evaluate[[]int](t, page, "read the turns shown", `[...document.querySelectorAll("#turns section.turn")].map((s) => Number(s.dataset.turn))`)
	want := make([]int, 0, to-from+1)
	for n := from; n <= to; n++ {
		want = append(want, n)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: turns %v, want %d to %d", what, got, from, to)
	}
}

// appendTurn appends turn turn, a question and a streamed answer, to the
// log of Session name at seq next, as a host does, and nudges the
// Session.
func appendTurn(ctx context.Context, t *testing.T, tl *turnlogtest.Env, name string, next, turn int64) {
	t.Helper()
	st, err := agenthost.OpenStore(ctx, tl.StoreURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log, err := st.OpenSession(ctx, tl.Client, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.AppendAt(ctx, next, []agenthost.Event{agenthost.TurnStart(turn), agenthost.UserText(turn, "One more, live."),
		agenthost.ResponseStart(turn, 0, loggen.Adapter), agenthost.TextDelta(turn, 0, 0, "Answered live."),
		agenthost.ResponseFinish(turn, 0, agenthost.StopReasonStop, nil, nil), agenthost.TurnEnd(turn, agenthost.StopReasonStop)}); err != nil {
		t.Fatal(err)
	}
	if err := log.Nudge(ctx); err != nil {
		t.Fatal(err)
	}
}
