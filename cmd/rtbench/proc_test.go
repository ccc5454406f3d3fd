package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

type bytesBuffer = bytes.Buffer

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		give string
		want cpuTimes
		err  bool
	}{
		{
			name: "plain",
			give: "1234 (rtserver) S 1 1234 1234 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 8 0 100 0 0",
			want: cpuTimes{User: 2500 * time.Millisecond, Sys: 750 * time.Millisecond},
		},
		{
			name: "command with spaces and parentheses",
			give: "42 (a) b (c)) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 5 0 0",
			want: cpuTimes{User: 70 * time.Millisecond, Sys: 30 * time.Millisecond},
		},
		{name: "no parenthesis", give: "42 rtserver S 1 2 3", err: true},
		{name: "truncated", give: "42 (x) S 1 2 3 4 5 6 7 8 9", err: true},
		{name: "not a number", give: "42 (x) S 1 42 42 0 -1 0 0 0 0 0 x 3 0", err: true},
	}
	for _, tt := range tests {
		got, err := parseStat([]byte(tt.give))
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("%s: parseStat = %+v, %v; want %+v, error %v", tt.name, got, err, tt.want, tt.err)
		}
	}
}

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		give string
		want int64
		err  bool
	}{
		{"Name:\trtserver\nVmPeak:\t  100 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 100 kB\n", 12345 * 1024, false},
		{"Name:\tkthreadd\nState:\tS\n", 0, true},
		{"VmRSS:\t12 MB\n", 0, true},
		{"VmRSS:\tlots kB\n", 0, true},
	}
	for _, tt := range tests {
		got, err := parseVmRSS([]byte(tt.give))
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("parseVmRSS(%q) = %d, %v; want %d, error %v", tt.give, got, err, tt.want, tt.err)
		}
	}
}

func TestParseMetric(t *testing.T) {
	body := []byte(`# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines_extra 9
go_goroutines 1234
connections_open{x="y"} 3
connections_open 17
up 1e+06
`)
	tests := []struct {
		name string
		want float64
		ok   bool
	}{
		{"go_goroutines", 1234, true},
		{"connections_open", 17, true},
		{"up", 1e6, true},
		{"missing", 0, false},
		{"go_gorout", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseMetric(body, tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseMetric(%s) = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// The real /proc of this process parses, and CPU time never goes back.
func TestProcSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	a, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 2_000_000 {
		x += i * i
	}
	_ = x
	b, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if b.User < a.User || b.Sys < a.Sys {
		t.Fatalf("cpu went back: %+v then %+v", a, b)
	}
	rss, err := procRSS(os.Getpid())
	if err != nil || rss <= 0 {
		t.Fatalf("rss %d, %v", rss, err)
	}
}
