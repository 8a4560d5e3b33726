// Command image builds the turnlog image without a Docker engine, from the
// Dockerfile's own recipe, as an OCI image archive for `ctr images import`
// (or any tool that reads an OCI layout):
//
//	go run ./hack/image --ref ghcr.io/turnlog/turnlog:dev --out bin/turnlog-image.tar
//
// It runs the RUN steps of the Dockerfile's build stage on this machine, with
// the stage's output directory mapped to a temporary one, and assembles the
// final stage's COPY --from, USER, ENTRYPOINT and CMD onto a distroless-style
// base (ociimage.NonrootBase) standing for gcr.io/distroless/static:nonroot.
// Anything else in the Dockerfile is refused with its line, so the two ways
// of building the image cannot drift apart silently.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/turnlog/turnlog/test/localcluster/ociimage"
)

// distrolessBase is the only base the final stage may use: the one
// ociimage.NonrootBase reproduces.
const distrolessBase = "gcr.io/distroless/static:nonroot"

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

// runBuildStage runs the build stage's RUN steps in the Dockerfile's
// directory (the build context, which COPY brings into the stage's
// WORKDIR), with /out — where the stage leaves its results — mapped to
// work/out. It returns the directory standing for /out.
func runBuildStage(dockerfile string, st stage, work string) (string, error) {
	context := filepath.Dir(dockerfile)
	outDir := filepath.Join(work, "out")
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	for _, ins := range st.steps {
		switch ins.keyword {
		case "WORKDIR", "COPY":
			// The context stands for the stage's source directory.
		case "RUN":
			script := strings.ReplaceAll(ins.argument, "/out/", outDir+"/")
			cmd := exec.Command("sh", "-c", script)
			cmd.Dir = context
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			fmt.Fprintf(os.Stderr, "%s:%d: RUN %s\n", dockerfile, ins.line, ins.argument)
			if err := cmd.Run(); err != nil {
				return "", fmt.Errorf("%s:%d: RUN %s: %w", dockerfile, ins.line, ins.argument, err)
			}
		default:
			return "", fmt.Errorf("%s:%d: %s is not supported in the build stage", dockerfile, ins.line, ins.keyword)
		}
	}
	return outDir, nil
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
