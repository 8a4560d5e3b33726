package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// pluginChildTurns continue the fork's child after its cut at the
// sample's aborted turn 3 (seq 16): an answer carrying another library's
// replay state, which replay degrades, then a turn stopped while it
// streamed.
const pluginChildTurns = `{"seq":17,"type":"turn/start","turn":4,"time":"2026-12-01T11:00:17.000Z"}
{"seq":18,"type":"user/message","turn":4,"time":"2026-12-01T11:00:18.000Z","content":[{"type":"text","text":"Only the first step, briefly."}]}
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

// kubectlPlugin runs `kubectl turnlog ARGS` through the real kubectl, which
// finds kubectl-turnlog on PATH (dir first), against the suite's cluster,
// namespace and store (from $TURNLOG_STORE_URL, as a user sets it). It
// returns stdout, stderr and the exit code.
func kubectlPlugin(dir string, args ...string) (string, string, int) {
	GinkgoHelper()
	full := append([]string{"turnlog"}, args...)
	full = append(full, "--kubeconfig", env.kubeconfig, "-n", env.namespace)
	cmd := exec.Command(env.kubectl, full...)
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "TURNLOG_STORE_URL="+env.storeURL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		code = exit.ExitCode()
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	return stdout.String(), stderr.String(), code
}

// tableRows splits a table the plugin printed into rows of cells by column
// header, as getRow does for kubectl get.
func tableRows(out string) []map[string]string {
	GinkgoHelper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	Expect(len(lines)).To(BeNumerically(">=", 2), out)
	header := columnGap.Split(strings.TrimSpace(lines[0]), -1)
	var rows []map[string]string
	for _, line := range lines[1:] {
		cells := columnGap.Split(strings.TrimSpace(line), -1)
		Expect(cells).To(HaveLen(len(header)), "%q in:\n%s", line, out)
		row := map[string]string{}
		for i, h := range header {
			row[h] = cells[i]
		}
		rows = append(rows, row)
	}
	return rows
}

// The plugin as an operator uses it: kubectl finds kubectl-turnlog on PATH,
// and its answers match what kubectl get, turnlog export and turnlog
// transcript say about the same Sessions.
var _ = Describe("the kubectl plugin", Ordered, func() {
	const source, child = "plugin-chat", "plugin-chat-retry"
	var bin string

	BeforeAll(func(ctx SpecContext) {
		bin = GinkgoT().TempDir()
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "kubectl-turnlog"), "./cmd/kubectl-turnlog")
		build.Dir = env.root
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build ./cmd/kubectl-turnlog:\n%s", out)
		importSample(source)
		expectSessionShows(source, map[string]string{"HEAD": "22", "TURNS": "4", "DEGRADED": "1"})
	})

	It("is found by kubectl plugin discovery", func() {
		cmd := exec.Command(env.kubectl, "plugin", "list")
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, _ := cmd.Output() // exits 1 when other PATH entries hold no plugins
		Expect(string(out)).To(ContainSubstring(filepath.Join(bin, "kubectl-turnlog")))
	})

	It("lists the Session with its degraded message, its cause and its context size", func() {
		out, errOut, code := kubectlPlugin(bin, "sessions")
		Expect(code).To(Equal(0), errOut)
		var row map[string]string
		for _, r := range tableRows(out) {
			if r["NAME"] == source {
				row = r
			}
		}
		Expect(row).NotTo(BeNil(), out)
		context := kubectl("get", "session", source, "-o", "jsonpath={.status.replay.contextMessages}")
		Expect(row).To(Equal(map[string]string{"NAME": source, "READY": "True", "HEAD": "22", "TURNS": "4",
			"CONTEXT": context, "DEGRADED": "1", "CAUSES": "version:3", "REFUSED": "-"}))
	})

	It("lists each turn as a fork point", func() {
		out, errOut, code := kubectlPlugin(bin, "fork-points", source)
		Expect(code).To(Equal(0), errOut)
		Expect(tableRows(out)).To(Equal([]map[string]string{
			{"CUT": "4", "TURN": "1", "END": "stop", "DEGRADED": "yes (version)", "REFUSED": "no", "USER": "Our nightly deploy failed. What happened?"},
			{"CUT": "11", "TURN": "2", "END": "stop", "DEGRADED": "no", "REFUSED": "no", "USER": "How do we make it retry?"},
			{"CUT": "16", "TURN": "3", "END": "aborted", "DEGRADED": "no", "REFUSED": "no", "USER": "Write the full runbook for this."},
			{"CUT": "22", "TURN": "4", "END": "stop", "DEGRADED": "no", "REFUSED": "no", "USER": "Stop. Just the first step, please."},
		}))
	})

	It("forks, waits for the child and prints it with its cut", func() {
		out, errOut, code := kubectlPlugin(bin, "fork", source, "--at", "15.1", "--name", child)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(Equal("sessionfork/" + child + ": session/" + child + " forked from " + source +
			" at 15.1: cut at seq 16 (turn 3, aborted), anchor 15\n"))
		Expect(jsonpath("session", child, "{.spec.forkedFrom.session} {.spec.forkedFrom.cutSeq}")).To(Equal(source + " 16"))

		By("running the same fork again: the existing fork is reported, another one is refused")
		again, errOut, code := kubectlPlugin(bin, "fork", source, "--at", "15.1", "--name", child)
		Expect(code).To(Equal(0), errOut)
		Expect(again).To(Equal(out))
		_, errOut, code = kubectlPlugin(bin, "fork", source, "--at", "4", "--name", child)
		Expect(code).To(Equal(1))
		Expect(errOut).To(Equal("kubectl turnlog fork: SessionFork " + env.namespace + "/" + child + " already exists and forks " +
			source + " at 15.1, not " + source + " at 4\n"))

		By("forking without --name: the API server names the fork and its child")
		out, errOut, code = kubectlPlugin(bin, "fork", source, "--at", "4")
		Expect(code).To(Equal(0), errOut)
		named := regexp.MustCompile(`^sessionfork/(` + source + `-fork-[a-z0-9]{5}): session/(\S+) forked from ` + source +
			` at 4: cut at seq 4 \(turn 1, stop\), anchor 4\n$`).FindStringSubmatch(out)
		Expect(named).NotTo(BeNil(), out)
		Expect(named[2]).To(Equal(named[1]), "the child takes the fork's name")
		Expect([]byte(turnlog("export", "--session", named[2]))).To(Equal(sampleLines(readSample(), 5)))

		By("printing the child's log: the source's first 17 lines, as turnlog export does")
		log, errOut, code := kubectlPlugin(bin, "log", child)
		Expect(code).To(Equal(0), errOut)
		Expect([]byte(log)).To(Equal(sampleLines(readSample(), forkCutLines)))
		Expect(log).To(Equal(turnlog("export", "--session", child)))
	})

	It("prints the stored transcript as turnlog transcript does", func() {
		out, errOut, code := kubectlPlugin(bin, "transcript", source)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(ContainSubstring(`"throughSeq": 22`))
		Expect(out).To(Equal(turnlog("transcript", "--session", source)))
	})

	It("lists the Session's Events and its forks'", func() {
		Eventually(func(g Gomega) {
			out, errOut, code := kubectlPlugin(bin, "events", source)
			g.Expect(code).To(Equal(0), errOut)
			var degraded, forked []map[string]string
			for _, r := range tableRows(out) {
				switch {
				case r["REASON"] == "ReplayDegraded" && r["OBJECT"] == "session/"+source:
					degraded = append(degraded, r)
				case r["REASON"] == "Forked" && r["OBJECT"] == "sessionfork/"+child:
					forked = append(forked, r)
				}
			}
			g.Expect(degraded).To(HaveExactElements(And(HaveKeyWithValue("TYPE", "Warning"),
				HaveKeyWithValue("MESSAGE", And(ContainSubstring("seq 3 "), ContainSubstring("cause version"))))), out)
			g.Expect(forked).To(HaveExactElements(HaveKeyWithValue("TYPE", "Normal")), out)
		}).Should(Succeed())
	})

	It("compares the source with its child, continued, side by side from the cut", func() {
		Expect(turnlogWithInput([]byte(pluginChildTurns), "append", "--session", child)).To(ContainSubstring("appended seq 17..27"))
		expectSessionShows(child, map[string]string{"HEAD": "27", "TURNS": "5", "DEGRADED": "2"})

		out, errOut, code := kubectlPlugin(bin, "diff", source, child, "--width", "120")
		Expect(code).To(Equal(0), errOut)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		Expect(lines[0]).To(Equal("shared: seq 0-16, turns 1-3, 5 messages; cut at seq 16 (turn 3, aborted)"), out)
		// The branches are two columns with " │ " between them; a row
		// whose right column is empty ends at the "│".
		var left, right []string
		for _, line := range lines[2:] {
			l, r, found := strings.Cut(line+" ", " │ ")
			if !found {
				Expect(line).To(MatchRegexp(`^─+┼─+$`), out)
				continue
			}
			if l = strings.TrimSpace(l); l != "" {
				left = append(left, l)
			}
			if r = strings.TrimSpace(r); r != "" {
				right = append(right, r)
			}
		}
		Expect(left).To(Equal([]string{
			"A: " + env.namespace + "/" + source, "head 22, replayed through 22",
			"turn 4, seq 17-22, stop",
			"user: Stop. Just the first step, please.",
			"assistant [native]: First, check whether the registry is",
			"reachable from the cluster.",
		}), out)
		Expect(right).To(Equal([]string{
			"B: " + env.namespace + "/" + child, "head 27, replayed through 27",
			"turn 4, seq 17-22, stop",
			"user: Only the first step, briefly.",
			"assistant [foreign, degraded: kind]: Check that the",
			"registry answers from inside the cluster.",
			"turn 5, seq 23-27, aborted",
			"user: And the second step?",
			"frozen [stopped]: Then re-run the pipe",
		}), out)
	})

	It("refuses a bad command line and a missing Session in one line", func() {
		_, errOut, code := kubectlPlugin(bin, "fork", source)
		Expect(code).To(Equal(2))
		Expect(strings.SplitN(errOut, "\n", 2)[0]).To(Equal("kubectl turnlog fork: --at is required: the seq to fork at, e.g. 41 or 40.1 (see fork-points)"))

		out, errOut, code := kubectlPlugin(bin, "fork-points", "nope")
		Expect(code).To(Equal(1))
		Expect(out).To(BeEmpty())
		Expect(errOut).To(HavePrefix("kubectl turnlog fork-points: Session " + env.namespace + "/nope: "))
		Expect(errOut).To(ContainSubstring("not found"))
		Expect(strings.Count(errOut, "\n")).To(Equal(1), errOut)
	})
})
