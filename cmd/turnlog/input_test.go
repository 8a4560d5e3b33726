package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// An offline command waiting for input stops at SIGINT or SIGTERM: one
// line on stderr and the shell's exit code for the signal.
func TestOfflineCommandsStopOnSignals(t *testing.T) {
	for _, c := range []struct {
		sig  syscall.Signal
		code int
		msg  string
	}{
		{syscall.SIGINT, 130, "interrupted (SIGINT)"},
		{syscall.SIGTERM, 143, "terminated (SIGTERM)"},
	} {
		for _, command := range [][]string{{"validate", "-"}, {"replay", "-"}, {"cut", "--at", "3", "-"}} {
			t.Run(c.sig.String()+"/"+command[0], func(t *testing.T) {
				cmd := exec.Command(turnlogBin, command...)
				r, stdin, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer stdin.Close()
				cmd.Stdin = r
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				r.Close()
				// Some input, then none: once the command has read the
				// line it has installed its signal handler (main does that
				// first) and is blocked reading. A fixed sleep is not
				// enough on a loaded machine.
				stdin.Write(logLine(0, `"type":"session/start"`))
				waitDrained(t, stdin)
				if err := cmd.Process.Signal(c.sig); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					cmd.Process.Kill()
					t.Fatalf("turnlog %s still running 10 s after %v", command[0], c.sig)
				}
				ee, ok := errors.AsType[*exec.ExitError](err)
				if !ok || ee.ExitCode() != c.code {
					t.Fatalf("turnlog %s after %v: %v, want exit code %d", command[0], c.sig, err, c.code)
				}
				if want := "turnlog " + command[0] + ": " + c.msg + "\n"; stderr.String() != want {
					t.Fatalf("stderr %q, want %q", stderr.String(), want)
				}
			})
		}
	}
}

// waitDrained waits until the reader of the pipe w has read everything
// written to it.
func waitDrained(t *testing.T, w *os.File) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		n, err := unix.IoctlGetInt(int(w.Fd()), unix.TIOCINQ)
		if err != nil {
			t.Fatalf("TIOCINQ (FIONREAD) on the command's stdin: %v", err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("the command did not read its input within 10 s")
}

func logLine(seq int, fields string) []byte {
	return []byte(`{"seq":` + string(rune('0'+seq)) + `,` + fields + "}\n")
}

// Invalid UTF-8 is refused where it is read — validate names the line,
// field and byte — and never reaches JSON output.
func TestInvalidUTF8(t *testing.T) {
	log := strings.Join([]string{
		`{"seq":0,"type":"session/start","adapter":{"kind":"pi-ai","api":"anthropic-messages","provider":"anthropic","model":"claude"}}`,
		`{"seq":1,"type":"turn/start","turn":1}`,
		`{"seq":2,"type":"user/message","turn":1,"content":[{"type":"text","text":"caf` + "\xe9" + `"}]}`,
		`{"seq":3,"type":"turn/end","turn":1,"reason":"stop"}`,
	}, "\n") + "\n"
	out, errOut, code := cli(t, log, "validate", "-")
	if code != 1 || out != "stdin: line 3: invalid UTF-8 in field content[0].text: byte 0xe9 at offset 77\n" {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, command := range [][]string{{"replay", "-"}, {"assemble", "-"}, {"fork-point", "--at", "1", "-"}} {
		out, errOut, code := cli(t, log, command...)
		if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "line 3: invalid UTF-8 in field content[0].text") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want one line naming line 3 and the field", command[0], code, out, errOut)
		}
		if !utf8.ValidString(out + errOut) {
			t.Errorf("%s wrote invalid UTF-8", command[0])
		}
	}
}

// A line that starts no JSON value is reported by what it starts with.
func TestNotJSONNamesWhatItFound(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"hello", `got 'h', which starts no JSON value`},
		{"\x01{}", `got '\x01', which starts no JSON value`},
		{"\xff\xfe", `invalid UTF-8 in the line: byte 0xff at offset 0`},
		{"42", `got a number`},
		{"trouble", `got 't', which starts no JSON value`},
	} {
		out, _, code := cli(t, c.line+"\n", "validate", "-")
		if code != 1 || !strings.Contains(out, "line 1: ") || !strings.Contains(out, c.want) || !utf8.ValidString(out) {
			t.Errorf("validate of %q: exit %d, %q; want %q", c.line, code, out, c.want)
		}
	}
}
