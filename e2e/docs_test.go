package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
)

// The command blocks of these files (the README, the server API, the
// access-control recipes, the embedding guide and the history walkthrough) run in the test suite,
// so a doc that drifts from the binary fails CI. Each fenced sh, bash or
// console block in them carries a marker comment on the line before it:
//
//	<!-- doctest: SESSION -->             run the block in SESSION
//	<!-- doctest: SESSION background -->  run its one command in the background
//	<!-- doctest: SESSION file NAME -->   write the block (any language) to NAME
//	<!-- doctest: SESSION redis -->       a block that starts redis-server --port P:
//	                                      the test starts one itself (internal/redistest)
//	                                      and maps P to its port
//	<!-- doctest: skip REASON -->         do not run it, for the reason given
//
// A block of a checked file without a marker fails the test, so every
// command a reader may copy is either run or exempted with a reason.
//
// The blocks of one session run in order in one bash, in a fresh
// directory holding ./rtserver (the binary the suite built), so variables
// set by one block are seen by the next. A console block's "$ " lines are
// commands ("\" continues a line) and the lines after each are its
// expected output, stdout and stderr together; an sh block runs as a whole
// and must succeed, its output unchecked. A background block's command
// runs while the rest of the session does (a subscriber in "another
// terminal"): the session goes on once it printed its first line, and its
// output is compared at the end, once it printed as many lines as shown.
// A line ending in "&" that starts rtserver is waited for until the
// server is ready, as a reader would.
var docsThatRun = []string{"../README.md", "../docs/server-api.md", "../docs/access-control.md", "../docs/embedding.md", "../docs/history.md", "../docs/transports.md"}

// docPorts are the ports the docs use. Each session maps them to free
// ports, in commands, files and expected output alike, and its listen
// address (RTSERVER_LISTEN, read by the server and by the sub and pub
// subcommands) is the one mapped from the default 127.0.0.1:8080.
var docPorts = []string{"8080", "8081", "8082", "9090", "6379"}

var portInDoc = regexp.MustCompile(`(127\.0\.0\.1:|0\.0\.0\.0:|localhost:|--port )(8080|8081|8082|9090|6379)\b`)

// What legitimately differs between runs, in expected and actual output
// alike: tokens, times, and the random hex of instance ids and epochs.
var (
	jwtInOutput  = regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*`)
	timeInOutput = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	hexInOutput  = regexp.MustCompile(`"[0-9a-f]{8,32}(\.[0-9]+)?"`)
)

func normalise(s string) string {
	s = jwtInOutput.ReplaceAllString(s, "<token>")
	s = timeInOutput.ReplaceAllString(s, "<time>")
	return hexInOutput.ReplaceAllString(s, `"<hex>"`)
}

type docBlock struct {
	file    string
	line    int // of the opening fence
	lang    string
	body    string
	session string
	mode    string // "run", "background", "file", "redis"
	name    string // the file a "file" block writes
}

var markerRe = regexp.MustCompile(`^<!-- doctest: (.*) -->$`)

// parseDoc returns the marked blocks of path, and an error naming every
// command block that has no marker.
func parseDoc(path string) ([]docBlock, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(raw), "\n")
	var blocks []docBlock
	var unmarked []string
	marker := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := markerRe.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			marker = m[1]
			continue
		}
		trimmed := strings.TrimSpace(l)
		if !strings.HasPrefix(trimmed, "```") {
			if trimmed != "" {
				marker = ""
			}
			continue
		}
		indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
		lang := strings.TrimPrefix(trimmed, "```")
		start := i + 1
		j := start
		for j < len(lines) && strings.TrimSpace(lines[j]) != "```" {
			j++
		}
		body := make([]string, 0, j-start)
		for _, b := range lines[start:j] {
			body = append(body, strings.TrimPrefix(b, indent))
		}
		b := docBlock{file: filepath.Base(path), line: i + 1, lang: lang, body: strings.Join(body, "\n")}
		i = j
		command := lang == "sh" || lang == "bash" || lang == "console"
		fields := strings.Fields(marker)
		marker = ""
		switch {
		case len(fields) == 0:
			if command {
				unmarked = append(unmarked, fmt.Sprintf("%s:%d", path, b.line))
			}
			continue
		case fields[0] == "skip":
			if len(fields) < 2 {
				return nil, fmt.Errorf("%s:%d: doctest skip needs a reason", path, b.line)
			}
			continue
		}
		b.session, b.mode = fields[0], "run"
		switch {
		case len(fields) == 1 && command:
		case len(fields) == 2 && fields[1] == "background" && lang == "console":
			b.mode = "background"
		case len(fields) == 2 && fields[1] == "redis" && command:
			b.mode = "redis"
		case len(fields) == 3 && fields[1] == "file":
			b.mode, b.name = "file", fields[2]
		default:
			return nil, fmt.Errorf("%s:%d: doctest marker %q does not fit a %q block", path, b.line, strings.Join(fields, " "), lang)
		}
		blocks = append(blocks, b)
	}
	if len(unmarked) > 0 {
		return blocks, fmt.Errorf("command blocks without a doctest marker (run them, or skip them with a reason):\n%s", strings.Join(unmarked, "\n"))
	}
	return blocks, nil
}

// consoleCmd is one "$ " command of a console block and what it prints.
type consoleCmd struct {
	cmd  string
	want []string
}

func parseConsole(body string) ([]consoleCmd, error) {
	var cmds []consoleCmd
	continued := false
	for l := range strings.SplitSeq(body, "\n") {
		switch {
		case continued:
			cmds[len(cmds)-1].cmd += "\n" + l
		case strings.HasPrefix(l, "$ "):
			cmds = append(cmds, consoleCmd{cmd: strings.TrimPrefix(l, "$ ")})
		case len(cmds) == 0:
			return nil, fmt.Errorf("console block starts with %q, not a \"$ \" command", l)
		default:
			cmds[len(cmds)-1].want = append(cmds[len(cmds)-1].want, l)
			continue
		}
		continued = strings.HasSuffix(l, `\`)
	}
	for i := range cmds {
		for len(cmds[i].want) > 0 && cmds[i].want[len(cmds[i].want)-1] == "" {
			cmds[i].want = cmds[i].want[:len(cmds[i].want)-1]
		}
	}
	return cmds, nil
}

// step is one command whose output the session compares.
type step struct {
	where string // file:line of the block
	cmd   string
	want  []string
}

// session is the script of one session and the steps its output is split into.
type session struct {
	name   string
	script strings.Builder
	steps  []step
	bg     []int // steps run in the background, compared at the end
	ports  map[string]string
}

const stepMark = "@@doctest-step "

func (s *session) mapPorts(text string) string {
	return portInDoc.ReplaceAllStringFunc(text, func(m string) string {
		sub := portInDoc.FindStringSubmatch(m)
		return sub[1] + s.ports[sub[2]]
	})
}

// readyAfter is the wait a reader does after starting a server with line.
func (s *session) readyAfter(line string) string {
	if !strings.HasSuffix(strings.TrimSpace(line), "&") {
		return ""
	}
	f := strings.Fields(line)
	switch {
	case slices.ContainsFunc(f, func(w string) bool { return strings.HasSuffix(w, "/rtserver") || w == "rtserver" }):
		addr := "$RTSERVER_LISTEN"
		if i := slices.Index(f, "--listen"); i >= 0 && i+1 < len(f) {
			addr = f[i+1]
		}
		return fmt.Sprintf("doctest_wait 'rtserver on %s' \"curl -sf -o /dev/null http://%s/readyz\"\n", addr, addr)
	}
	return ""
}

const scriptHead = `exec 2>&1
# doctest_wait WHAT COMMAND: wait until COMMAND succeeds, as a reader
# waits for a server to come up (bounded: 30 s).
doctest_wait() {
	for _ in $(seq 600); do
		eval "$2" >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "doctest: $1 was not ready within 30 s"
	exit 1
}
# doctest_lines FILE N: wait until FILE has N lines (bounded: 30 s). The
# background command's shell may not have created FILE yet.
doctest_lines() {
	for _ in $(seq 600); do
		[ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ] && return 0
		sleep 0.05
	done
}
`

func (s *session) add(t *testing.T, b docBlock) error {
	where := fmt.Sprintf("%s:%d", b.file, b.line)
	w := &s.script
	switch b.mode {
	case "redis":
		f := strings.Fields(b.body)
		i := slices.Index(f, "--port")
		if len(f) == 0 || !strings.HasSuffix(f[0], "redis-server") || i < 0 || i+1 >= len(f) {
			return fmt.Errorf("%s: a redis block is one redis-server --port P line", where)
		}
		s.ports[f[i+1]] = strconv.Itoa(redistest.Start(t).Port)
		return nil
	}
	body := s.mapPorts(b.body)
	switch b.mode {
	case "file":
		fmt.Fprintf(w, "cat > %q <<'DOCTEST_EOF'\n%s\nDOCTEST_EOF\n", b.name, body)
	case "run":
		if b.lang != "console" {
			// Run as a reader pastes it; its output (and that of servers
			// it starts) goes to a log shown when the session fails.
			fmt.Fprintf(w, "echo '%sblock %s'\n{\nset -e\n", stepMark, where)
			for l := range strings.SplitSeq(body, "\n") {
				w.WriteString(l + "\n")
				w.WriteString(s.readyAfter(l))
			}
			fmt.Fprintf(w, "set +e\n} > %q 2>&1\n", "block-"+strconv.Itoa(b.line)+".log")
			return nil
		}
		cmds, err := parseConsole(body)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		for _, c := range cmds {
			fmt.Fprintf(w, "echo '%s%d'\n%s\n", stepMark, len(s.steps), c.cmd)
			w.WriteString(s.readyAfter(c.cmd))
			s.steps = append(s.steps, step{where: where, cmd: c.cmd, want: c.want})
		}
	case "background":
		cmds, err := parseConsole(body)
		if err != nil || len(cmds) != 1 {
			return fmt.Errorf("%s: a background block holds one command (%v)", where, err)
		}
		out := fmt.Sprintf("background-%d.out", len(s.steps))
		fmt.Fprintf(w, "%s > %q 2>&1 &\nDOCTEST_BG_%d=$!\n", cmds[0].cmd, out, len(s.steps))
		if len(cmds[0].want) > 0 {
			fmt.Fprintf(w, "doctest_lines %q 1\n", out)
		}
		s.bg = append(s.bg, len(s.steps))
		s.steps = append(s.steps, step{where: where, cmd: cmds[0].cmd, want: cmds[0].want})
	}
	return nil
}

// finish compares the background commands' output last, once each has
// printed what the doc shows (or 30 s passed), and stops them.
func (s *session) finish() {
	w := &s.script
	for _, i := range s.bg {
		out := fmt.Sprintf("background-%d.out", i)
		fmt.Fprintf(w, "doctest_lines %q %d\nkill $DOCTEST_BG_%d 2>/dev/null\nwait $DOCTEST_BG_%d 2>/dev/null\necho '%s%d'\ncat %q\n",
			out, len(s.steps[i].want), i, i, stepMark, i, out)
	}
	fmt.Fprintf(w, "echo '%send'\n", stepMark)
}

// TestDocsRunAsWritten runs the marked command blocks of docsThatRun
// against the built binary and compares what they print with what the
// docs show.
func TestDocsRunAsWritten(t *testing.T) {
	leakcheck.Check(t)
	testkit.Program(t, "curl", "apt-get install curl; scripts/test.sh does")
	var order []string
	sessions := map[string][]docBlock{}
	for _, path := range docsThatRun {
		blocks, err := parseDoc(path)
		if err != nil {
			t.Error(err)
		}
		for _, b := range blocks {
			key := b.file + "/" + b.session
			if _, seen := sessions[key]; !seen {
				order = append(order, key)
			}
			sessions[key] = append(sessions[key], b)
		}
	}
	if len(order) == 0 {
		t.Fatal("no doctest sessions found")
	}
	for _, key := range order {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			runSession(t, key, sessions[key])
		})
	}
}

func runSession(t *testing.T, name string, blocks []docBlock) {
	s := &session{name: name, ports: map[string]string{}}
	// Held together, so that no two doc ports get the same free port.
	var held []net.Listener
	for _, p := range docPorts {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		s.ports[p] = strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range held {
		l.Close()
	}
	s.script.WriteString(scriptHead)
	for _, b := range blocks {
		if err := s.add(t, b); err != nil {
			t.Fatal(err)
		}
	}
	s.finish()

	dir := t.TempDir()
	if err := os.Symlink(binary, filepath.Join(dir, "rtserver")); err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(dir, ".doctest.sh")
	if err := os.WriteFile(scriptPath, []byte(s.script.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", scriptPath)
	cmd.Dir = dir
	// The binary refuses RTSERVER_* variables it does not know: the
	// session has only its listen address.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "RTSERVER_") })
	cmd.Env = append(cmd.Env, "RTSERVER_LISTEN=127.0.0.1:"+s.ports["8080"])
	// Its own process group, so that the servers it started in the
	// background stop with it.
	ownGroup(cmd)
	var out testkit.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopGroup := func() { killGroup(cmd) }
	select {
	case err := <-done:
		stopGroup()
		if err != nil {
			t.Errorf("the session's shell failed: %v", err)
		}
	case <-time.After(3 * time.Minute):
		stopGroup()
		<-done
		t.Errorf("the session did not finish within 3 minutes")
	}
	got, ended := splitSteps(out.String())
	for i, st := range s.steps {
		want := make([]string, len(st.want))
		for j, l := range st.want {
			want[j] = normalise(s.mapPorts(l))
		}
		have, ran := got[strconv.Itoa(i)]
		if !ran {
			t.Errorf("%s: $ %s\ndid not run", st.where, st.cmd)
			continue
		}
		for j := range have {
			have[j] = normalise(have[j])
		}
		if !slices.Equal(have, want) {
			t.Errorf("%s: $ %s\nprints:\n%s\nthe doc shows (after normalising ports, tokens, times and hex ids):\n%s",
				st.where, st.cmd, strings.Join(have, "\n"), strings.Join(want, "\n"))
		}
	}
	if !ended || t.Failed() {
		if !ended {
			t.Errorf("the session stopped before its end (an sh block failed?)")
		}
		t.Logf("session output:\n%s", out.String())
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", filepath.Base(l), b)
		}
	}
}

// splitSteps cuts the session's output at the step marks: step id -> lines.
func splitSteps(out string) (map[string][]string, bool) {
	steps := map[string][]string{}
	cur, ended := "", false
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for sc.Scan() {
		l := sc.Text()
		// curl prints no final newline: a mark may follow output on its line.
		if i := strings.Index(l, stepMark); i >= 0 {
			if i > 0 && cur != "" {
				steps[cur] = append(steps[cur], l[:i])
			}
			cur = strings.TrimSpace(l[i+len(stepMark):])
			if cur == "end" {
				ended = true
			}
			if _, err := strconv.Atoi(cur); err == nil {
				steps[cur] = []string{}
			}
			continue
		}
		if cur != "" {
			steps[cur] = append(steps[cur], strings.TrimRight(l, " \t"))
		}
	}
	for k, v := range steps {
		for len(v) > 0 && v[len(v)-1] == "" {
			v = v[:len(v)-1]
		}
		steps[k] = v
	}
	return steps, ended
}
