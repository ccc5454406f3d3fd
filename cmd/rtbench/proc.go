package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is sysconf(_SC_CLK_TCK), the unit of utime and stime in
// /proc/PID/stat. It is 100 on every Linux architecture Go supports
// (`getconf CLK_TCK`); hardcoded rather than read through x/sys/unix so as
// not to touch go.mod.
const clockTicks = 100

// cpuTimes is a process's CPU time so far: user (utime) and system
// (stime), as /proc/PID/stat reports them.
type cpuTimes struct{ User, Sys time.Duration }

func (c cpuTimes) Total() time.Duration { return c.User + c.Sys }

func (c cpuTimes) sub(o cpuTimes) cpuTimes { return cpuTimes{c.User - o.User, c.Sys - o.Sys} }

// parseStat returns utime and stime from the contents of /proc/PID/stat.
// The command name (field 2) is in parentheses and may itself hold spaces
// and parentheses, so fields are counted from the last ')'.
func parseStat(b []byte) (cpuTimes, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return cpuTimes{}, errors.New("stat: no ')' after the command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return cpuTimes{}, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks [2]uint64
	for j, s := range f[11:13] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("stat: utime/stime %q: %w", s, err)
		}
		ticks[j] = v
	}
	const tick = time.Second / clockTicks
	return cpuTimes{User: time.Duration(ticks[0]) * tick, Sys: time.Duration(ticks[1]) * tick}, nil
}

// parseVmRSS returns VmRSS in bytes from the contents of /proc/PID/status.
func parseVmRSS(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status: VmRSS line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status: VmRSS: %w", err)
		}
		return kb * 1024, nil
	}
	return 0, errors.New("status: no VmRSS line (kernel thread or zombie?)")
}

func procCPU(pid int) (cpuTimes, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseStat(b)
}

func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	return parseVmRSS(b)
}

// cpuMeter measures a process's CPU between two points; pid 0 measures
// nothing and reports ok false.
type cpuMeter struct {
	pid    int
	before cpuTimes
}

func startCPU(pid int) (*cpuMeter, error) {
	m := &cpuMeter{pid: pid}
	if pid == 0 {
		return m, nil
	}
	var err error
	m.before, err = procCPU(pid)
	return m, err
}

func (m *cpuMeter) stop() (cpuTimes, bool, error) {
	if m.pid == 0 {
		return cpuTimes{}, false, nil
	}
	after, err := procCPU(m.pid)
	if err != nil {
		return cpuTimes{}, false, err
	}
	return after.sub(m.before), true, nil
}

// parseMetric returns the value of an unlabelled series in a Prometheus
// text exposition.
func parseMetric(body []byte, name string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || len(rest) == 0 || rest[0] != ' ' {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

// scrapeMetric fetches url (a /metrics endpoint) and returns series name.
func scrapeMetric(ctx context.Context, url, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	v, ok := parseMetric(body, name)
	if !ok {
		return 0, fmt.Errorf("GET %s: no series %s", url, name)
	}
	return v, nil
}

func selfPID() int { return os.Getpid() }
