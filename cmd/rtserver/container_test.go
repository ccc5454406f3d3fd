package main

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/testkit"
)

// dockerfile is what the container test reads of ../../Dockerfile.
type dockerfile struct {
	env         map[string]string // every ENV, over both stages
	build       string            // the RUN go build line's command
	user        string
	expose      string
	healthcheck string
	entrypoint  string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := dockerfile{env: map[string]string{}}
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(l, "\\"); ok {
			line += cont + " "
			continue
		}
		line += l
		instr, rest, _ := strings.Cut(line, " ")
		line = ""
		switch instr {
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				d.env[k] = v
			}
		case "RUN":
			if strings.HasPrefix(rest, "go build ") {
				d.build = rest
			}
		case "USER":
			d.user = rest
		case "EXPOSE":
			d.expose = rest
		case "HEALTHCHECK":
			d.healthcheck = rest
		case "ENTRYPOINT":
			d.entrypoint = rest
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// The Dockerfile's binary, built here by its own go build line with its
// ENV (but this machine's Go toolchain, so nothing is downloaded), is
// static (no interpreter, no shared library), stripped, built without cgo
// and with -trimpath, stamped with the revision and the release, and
// serves /healthz on the address the image's environment gives it. The
// image runs as a non-root user and checks the port it exposes.
func TestContainerBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	d := readDockerfile(t)
	if d.build == "" {
		t.Fatal("the Dockerfile has no RUN go build line")
	}
	for _, want := range []string{"-trimpath", "-ldflags=", "-s -w", "-X main.revision=${REVISION}", "-o /out/rtserver", "./cmd/rtserver"} {
		if !strings.Contains(d.build, want) {
			t.Errorf("the Dockerfile's go build line lacks %q: %s", want, d.build)
		}
	}
	if d.env["CGO_ENABLED"] != "0" {
		t.Errorf("the Dockerfile sets CGO_ENABLED=%q, want 0 (a static binary)", d.env["CGO_ENABLED"])
	}
	if u := d.user; u == "" || u == "root" || strings.HasPrefix(u, "0:") || u == "0" {
		t.Errorf("the image runs as %q, want a non-root user", u)
	}
	listen := d.env["RTSERVER_LISTEN"]
	host, port, err := net.SplitHostPort(listen)
	if err != nil || host != "0.0.0.0" {
		t.Errorf("the image's RTSERVER_LISTEN is %q, want all interfaces (0.0.0.0:PORT)", listen)
	}
	if d.expose != port || !strings.Contains(d.healthcheck, "http://127.0.0.1:"+port+"/healthz") {
		t.Errorf("EXPOSE %q and HEALTHCHECK %q, want both on the listen port %s and /healthz", d.expose, d.healthcheck, port)
	}
	if !strings.Contains(d.entrypoint, "/usr/local/bin/rtserver") {
		t.Errorf("ENTRYPOINT %s does not run the binary", d.entrypoint)
	}

	// The build line, run from the repository's root as the Dockerfile
	// runs it from /src, writing where the test says.
	out := filepath.Join(t.TempDir(), "rtserver")
	cmdline := strings.ReplaceAll(d.build, "/out/rtserver", out)
	cmd := exec.Command("sh", "-c", "go "+strings.TrimPrefix(cmdline, "go "))
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "REVISION=test-revision", "GOTOOLCHAIN=local")
	for k, v := range d.env {
		if k != "GOTOOLCHAIN" && !strings.HasPrefix(k, "RTSERVER_") {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmdline, err, b)
	}

	ef, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is dynamically linked", p.Type)
		}
	}
	if libs, _ := ef.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	if ef.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -s did not strip it")
	}
	bi, err := buildinfo.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	// With -trimpath the build does not record -ldflags (they may hold
	// paths): --version below shows that the revision was stamped.
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings %v, want CGO_ENABLED=0 and -trimpath=true", settings)
	}

	v, err := exec.Command(out, "--version").CombinedOutput()
	want := "rtserver " + rtserver.Version() + " (test-revision) go1."
	if err != nil || !strings.HasPrefix(string(v), want) {
		t.Errorf("--version: %q (%v), want it to start %q", v, err, want)
	}

	// The image's environment, with a free port for its own: the binary
	// listens on every interface and answers /healthz, as the
	// HEALTHCHECK asks it. The port is free when picked, but on every
	// interface another test's listener may take it before the binary
	// binds it: then the binary says so and exits, and a new port is
	// picked.
	var (
		free string
		log  *testkit.LogBuffer
	)
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		free = strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		log = &testkit.LogBuffer{}
		srv := exec.Command(out)
		srv.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "RTSERVER_") })
		srv.Env = append(srv.Env, "RTSERVER_LISTEN=0.0.0.0:"+free)
		srv.Stdout, srv.Stderr = log, log
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = srv.Wait(); close(exited) }()
		defer func() { _ = srv.Process.Kill(); <-exited }()
		taken := func() bool {
			select {
			case <-exited:
				return strings.Contains(log.String(), "address already in use")
			default:
				return false
			}
		}
		everywhere := regexp.MustCompile(`msg="rtserver listening" addr=(0\.0\.0\.0|\[::\]):` + free + `\b`)
		testkit.Eventually(t, 30*time.Second, func() string {
			return "the server neither said it listens on every interface nor exited for a taken port:\n" + log.String()
		}, func() bool { return everywhere.MatchString(log.String()) || taken() })
		if !taken() {
			break
		}
		if attempt == 4 {
			t.Fatalf("5 free ports taken before the binary bound them:\n%s", log.String())
		}
	}
	testkit.Eventually(t, 30*time.Second, func() string {
		return "/healthz never answered 200:\n" + log.String()
	}, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://127.0.0.1:"+free+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}
