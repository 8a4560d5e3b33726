// Command image builds the turnlog image without a Docker engine, from the
// Dockerfile's own recipe, as an OCI image archive for `ctr images import`
// (or any tool that reads an OCI layout):
//
//	go run ./hack/image --ref ghcr.io/turnlog/turnlog:dev --out bin/turnlog-image.tar
//
// It runs the Dockerfile's build stage on this machine in a temporary
// directory that holds only what the stage's COPY lines bring in from the
// build context, placed under its WORKDIR as COPY would place them, so a
// package the COPY lines miss fails here as it would in `docker build`; the
// RUN steps run there, with the stage's output directory mapped to a
// temporary one. It assembles the final stage's COPY --from, USER,
// ENTRYPOINT and CMD onto a distroless-style base (ociimage.NonrootBase)
// standing for gcr.io/distroless/static:nonroot. Anything else in the
// Dockerfile is refused with its line, so the two ways of building the image
// cannot drift apart silently.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/turnlog/turnlog/test/localcluster/ociimage"
)

// distrolessBase is the only base the final stage may use: the one
// ociimage.NonrootBase reproduces.
const distrolessBase = "gcr.io/distroless/static:nonroot"

// progress receives the build stage's RUN lines and their output.
var progress io.Writer = os.Stderr

func main() {
	dockerfile := flag.String("dockerfile", "Dockerfile", "the Dockerfile whose recipe to follow; its directory is the build context")
	ref := flag.String("ref", "ghcr.io/turnlog/turnlog:dev", "the image's name")
	out := flag.String("out", "bin/turnlog-image.tar", "the OCI image archive to write")
	var extra extraFiles
	flag.Var(&extra, "add", "SRC:DEST: also put local file SRC at DEST (a variant for tests; repeatable)")
	entrypoint := flag.String("entrypoint", "", "a JSON argv replacing the Dockerfile's ENTRYPOINT (a variant for tests)")
	flag.Parse()
	if err := build(*dockerfile, *ref, *out, extra, *entrypoint); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// extraFiles are the --add flags.
type extraFiles []ociimage.File

func (e *extraFiles) String() string { return fmt.Sprint(len(*e), " files") }

func (e *extraFiles) Set(v string) error {
	src, dest, ok := strings.Cut(v, ":")
	if !ok || src == "" || !strings.HasPrefix(dest, "/") {
		return fmt.Errorf("--add %q: want SRC:/DEST", v)
	}
	*e = append(*e, ociimage.File{Path: dest, Mode: 0o755, Source: src})
	return nil
}

// instruction is one Dockerfile line (continuations joined).
type instruction struct {
	line     int
	keyword  string // upper case
	argument string
}

// stage is one FROM section.
type stage struct {
	from, name string
	line       int
	steps      []instruction
}

func build(dockerfile, ref, out string, extra []ociimage.File, entrypoint string) error {
	stages, err := parse(dockerfile)
	if err != nil {
		return err
	}
	if len(stages) != 2 {
		return fmt.Errorf("%s: want a build stage and a final stage, found %d stages", dockerfile, len(stages))
	}
	work, err := os.MkdirTemp("", "turnlog-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	outputs, err := runBuildStage(dockerfile, stages[0], work)
	if err != nil {
		return err
	}
	img, err := finalStage(dockerfile, stages[1], stages[0].name, outputs)
	if err != nil {
		return err
	}
	img.Ref = ref
	img.Files = append(img.Files, extra...)
	if entrypoint != "" {
		if err := json.Unmarshal([]byte(entrypoint), &img.Entrypoint); err != nil {
			return fmt.Errorf("--entrypoint %s: want a JSON array: %w", entrypoint, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := ociimage.Write(out, img); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s)\n", out, ref)
	return nil
}

// parse reads the Dockerfile's stages.
func parse(path string) ([]stage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		stages []stage
		joined string
		start  int
	)
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if joined == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if joined == "" {
			start = i + 1
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			joined += cont + " "
			continue
		}
		joined += line
		keyword, argument, _ := strings.Cut(joined, " ")
		ins := instruction{line: start, keyword: strings.ToUpper(keyword), argument: strings.TrimSpace(argument)}
		joined = ""
		if ins.keyword == "FROM" {
			fields := strings.Fields(ins.argument)
			st := stage{from: fields[0], line: ins.line}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			} else if len(fields) != 1 {
				return nil, fmt.Errorf("%s:%d: FROM %s: want IMAGE [AS NAME]", path, ins.line, ins.argument)
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("%s:%d: %s before the first FROM", path, ins.line, ins.keyword)
		}
		stages[len(stages)-1].steps = append(stages[len(stages)-1].steps, ins)
	}
	return stages, nil
}

// runBuildStage runs the build stage the way Docker would, without Docker:
// the stage's filesystem is a directory, work/stage, that starts empty;
// WORKDIR and COPY act on it as on the stage's /, bringing in only what the
// COPY lines name from the build context (the Dockerfile's directory), and
// each RUN step runs, at its place in the stage, in the mirrored WORKDIR, with
// /out/ in its script mapped to the mirrored /out. So a package the COPY
// lines miss is missing here too, as it would be in `docker build`. It
// returns the directory standing for /out.
func runBuildStage(dockerfile string, st stage, work string) (string, error) {
	root := filepath.Join(work, "stage")
	outDir := stagePath(root, "/out")
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	return outDir, walkBuildStage(dockerfile, st, root, func(ins instruction, workdir string) error {
		script := strings.ReplaceAll(ins.argument, "/out/", outDir+"/")
		var output bytes.Buffer
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = stagePath(root, workdir)
		cmd.Stdout = io.MultiWriter(progress, &output)
		cmd.Stderr = cmd.Stdout
		fmt.Fprintf(progress, "%s:%d: RUN %s\n", dockerfile, ins.line, ins.argument)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s:%d: RUN %s: %s", dockerfile, ins.line, ins.argument, diagnose(err, output.String(), moduleOf(cmd.Dir)))
		}
		return nil
	})
}

// walkBuildStage applies the build stage's WORKDIR and COPY lines to the
// stage filesystem under root and hands each RUN step to run, with the
// WORKDIR (a stage path) it runs in. A nil run skips the RUN steps, leaving
// root as the build context the stage's commands would see.
func walkBuildStage(dockerfile string, st stage, root string, run func(ins instruction, workdir string) error) error {
	context := filepath.Dir(dockerfile)
	for _, ignore := range []string{filepath.Join(context, ".dockerignore"), dockerfile + ".dockerignore"} {
		// Docker would leave out what these exclude; that is not reproduced.
		if _, err := os.Stat(ignore); err == nil {
			return fmt.Errorf("%s: not supported: the build context would differ from Docker's", ignore)
		}
	}
	workdir := "/"
	for _, ins := range st.steps {
		switch ins.keyword {
		case "WORKDIR":
			workdir = path.Join(workdir, ins.argument)
			if path.IsAbs(ins.argument) {
				workdir = path.Clean(ins.argument)
			}
			if err := os.MkdirAll(stagePath(root, workdir), 0o755); err != nil {
				return err
			}
		case "COPY":
			if err := copyStep(context, root, workdir, ins.argument); err != nil {
				return fmt.Errorf("%s:%d: COPY %s: %w", dockerfile, ins.line, ins.argument, err)
			}
		case "RUN":
			if run != nil {
				if err := run(ins, workdir); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("%s:%d: %s is not supported in the build stage", dockerfile, ins.line, ins.keyword)
		}
	}
	return nil
}

// stagePath is where the stage path p (absolute, or relative to /) is
// mirrored under root.
func stagePath(root, p string) string {
	return filepath.Join(root, filepath.FromSlash(path.Clean("/"+p)))
}

// copyStep does what `COPY SRC... DEST` (or its JSON form) does in a stage
// whose WORKDIR is workdir: each source, a path or pattern relative to the
// build context, is copied to DEST (relative to workdir unless absolute); a
// directory's contents, not the directory itself, go into DEST.
func copyStep(context, root, workdir, argument string) error {
	var args []string
	if strings.HasPrefix(argument, "[") {
		if err := json.Unmarshal([]byte(argument), &args); err != nil {
			return fmt.Errorf("want a JSON array of strings: %w", err)
		}
	} else {
		args = strings.Fields(argument)
	}
	if len(args) > 0 && strings.HasPrefix(args[0], "--") {
		return fmt.Errorf("%s is not supported in the build stage", args[0])
	}
	if len(args) < 2 {
		return errors.New("want SRC... DEST")
	}
	srcs, dest := args[:len(args)-1], args[len(args)-1]
	intoDir := strings.HasSuffix(dest, "/") || dest == "." || dest == ".."
	if !path.IsAbs(dest) {
		dest = path.Join(workdir, dest)
	}
	target := stagePath(root, dest)
	var matches []string
	for _, src := range srcs {
		clean := filepath.Clean(filepath.FromSlash(src))
		if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
			return fmt.Errorf("%s is outside the build context", src)
		}
		found, err := filepath.Glob(filepath.Join(context, clean))
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		if len(found) == 0 {
			return fmt.Errorf("%s: not found in the build context %s", src, context)
		}
		matches = append(matches, found...)
	}
	if len(matches) > 1 && !intoDir {
		return fmt.Errorf("with more than one source, DEST %s must end with /", args[len(args)-1])
	}
	for _, m := range matches {
		info, err := os.Stat(m)
		if err != nil {
			return err
		}
		to := target
		if info.IsDir() {
			if m, err = filepath.EvalSymlinks(m); err == nil {
				err = copyTree(m, to)
			}
		} else {
			if existing, statErr := os.Stat(to); intoDir || (statErr == nil && existing.IsDir()) {
				to = filepath.Join(to, filepath.Base(m))
			}
			err = copyFile(m, to, info.Mode().Perm())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the contents of directory src into dst, keeping modes and
// symbolic links as they are, as COPY does.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, to)
		case d.Type().IsRegular():
			return copyFile(p, to, info.Mode().Perm())
		default:
			return fmt.Errorf("%s: not a regular file, directory or symbolic link", p)
		}
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// moduleOf is the module path declared by dir/go.mod, or "" if there is none.
func moduleOf(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// missingPackage is how the go command reports an import it cannot resolve:
// "FILE:LINE:COL: no required module provides package PATH; to add it:".
var missingPackage = regexp.MustCompile(`(?m)^(?:(\S+): )?no required module provides package (\S+?);`)

// diagnose turns a failed RUN step into one line. A package of the main
// module (module) that the go command cannot find is a directory the COPY
// lines did not bring in, and is named as such; otherwise it is the last
// unindented line of the output, which for the go command is the error.
func diagnose(err error, output, module string) string {
	var missing []string
	seen := map[string]bool{}
	for _, m := range missingPackage.FindAllStringSubmatch(output, -1) {
		pkg := m[2]
		rest, ok := strings.CutPrefix(pkg, module+"/")
		if module == "" || !ok || seen[pkg] {
			continue
		}
		seen[pkg] = true
		msg := fmt.Sprintf("package %s is not in the build context: no COPY line brings in %s/", pkg, rest)
		if m[1] != "" {
			msg = fmt.Sprintf("package %s (imported at %s) is not in the build context: no COPY line brings in %s/", pkg, m[1], rest)
		}
		missing = append(missing, msg)
	}
	if len(missing) > 0 {
		return strings.Join(missing, "; ")
	}
	lines := strings.Split(strings.TrimRight(output, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if line := lines[i]; strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			return fmt.Sprintf("%v: %s", err, line)
		}
	}
	return err.Error()
}

// finalStage assembles the final stage onto the distroless-style base.
func finalStage(dockerfile string, st stage, buildStage, outputs string) (ociimage.Image, error) {
	if st.from != distrolessBase {
		return ociimage.Image{}, fmt.Errorf("%s:%d: FROM %s: only %s is reproduced without Docker", dockerfile, st.line, st.from, distrolessBase)
	}
	img := ociimage.Image{Files: ociimage.NonrootBase()}
	for _, ins := range st.steps {
		switch ins.keyword {
		case "COPY":
			fields := strings.Fields(ins.argument)
			if len(fields) != 3 || fields[0] != "--from="+buildStage || !strings.HasPrefix(fields[1], "/out/") {
				return img, fmt.Errorf("%s:%d: COPY %s: want COPY --from=%s /out/FILE DEST", dockerfile, ins.line, ins.argument, buildStage)
			}
			img.Files = append(img.Files, ociimage.File{
				Path: fields[2], Mode: 0o755, Source: filepath.Join(outputs, strings.TrimPrefix(fields[1], "/out/")),
			})
		case "USER":
			img.User = ins.argument
		case "ENTRYPOINT", "CMD":
			var argv []string
			if err := json.Unmarshal([]byte(ins.argument), &argv); err != nil {
				return img, fmt.Errorf("%s:%d: %s %s: want the JSON (exec) form: %w", dockerfile, ins.line, ins.keyword, ins.argument, err)
			}
			if ins.keyword == "ENTRYPOINT" {
				img.Entrypoint = argv
			} else {
				img.Cmd = argv
			}
		default:
			return img, fmt.Errorf("%s:%d: %s is not supported in the final stage", dockerfile, ins.line, ins.keyword)
		}
	}
	if img.Entrypoint == nil {
		return img, errors.New(dockerfile + ": the final stage has no ENTRYPOINT")
	}
	return img, nil
}
