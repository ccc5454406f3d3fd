package main

import (
	"net/url"
	"testing"
)

func TestCheckURL(t *testing.T) {
	tests := []struct {
		give string
		ok   bool
	}{
		{"ws://127.0.0.1:8080/ws", true},
		{"ws://127.9.8.7/ws", true},
		{"ws://localhost:8080/ws", true},
		{"ws://LOCALHOST/ws", true},
		{"ws://[::1]:8080/ws", true},
		{"wss://127.0.0.1/ws", true},
		{"http://127.0.0.1:8080/metrics", true},
		{"ws://[::ffff:127.0.0.1]:80/ws", true},
		{"ws://10.0.0.1:8080/ws", false},
		{"ws://192.168.1.1/ws", false},
		{"ws://[::2]/ws", false},
		{"ws://0.0.0.0:8080/ws", false},
		{"ws://example.com/ws", false},
		{"ws://localhost.example.com/ws", false},
		{"ws://127.0.0.1.nip.io/ws", false},
		{"ws://[fe80::1%25lo]/ws", false},
		{"ftp://127.0.0.1/", false},
		{"127.0.0.1:8080", false},
		{"ws:///ws", false},
	}
	for _, tt := range tests {
		_, err := checkURL(tt.give)
		if (err == nil) != tt.ok {
			t.Errorf("checkURL(%q) error %v, want ok=%v", tt.give, err, tt.ok)
		}
	}
}

func TestCheckListen(t *testing.T) {
	tests := []struct {
		give string
		ok   bool
	}{
		{"127.0.0.1:9503", true},
		{"localhost:0", true},
		{"[::1]:9503", true},
		{":9503", false},
		{"0.0.0.0:9503", false},
		{"192.0.2.1:80", false},
		{"127.0.0.1", false},
	}
	for _, tt := range tests {
		if err := checkListen(tt.give); (err == nil) != tt.ok {
			t.Errorf("checkListen(%q) error %v, want ok=%v", tt.give, err, tt.ok)
		}
	}
}

func TestMetricsURL(t *testing.T) {
	u, _ := url.Parse("ws://127.0.0.1:8080/ws?token=x")
	if got := metricsURL(u); got != "http://127.0.0.1:8080/metrics" {
		t.Errorf("metricsURL = %q", got)
	}
}

// Every mode refuses a non-loopback target before opening a socket.
func TestModesRefuseNonLoopback(t *testing.T) {
	for _, args := range [][]string{
		{"connect", "--url", "ws://192.0.2.1:8080/ws", "-n", "1"},
		{"idle", "--url", "ws://192.0.2.1:8080/ws", "-n", "1"},
		{"fanout", "--url", "ws://example.com/ws", "--duration", "1ms"},
		{"rpc", "--url", "ws://10.1.2.3/ws", "--duration", "1ms"},
		{"connect", "--url", "ws://127.0.0.1:1/ws", "--probe-url", "ws://192.0.2.1/ws", "--probe-clients", "1"},
		{"idle", "--url", "ws://127.0.0.1:1/ws", "--metrics-url", "http://192.0.2.1/metrics"},
		{"serve503", "--listen", "0.0.0.0:0"},
	} {
		var out, errOut bytesBuffer
		if code := run(args, &out, &errOut); code != 1 || !contains(errOut.String(), "loopback") {
			t.Errorf("run %v = %d, stderr %q; want 1 and a loopback refusal", args, code, errOut.String())
		}
	}
}
